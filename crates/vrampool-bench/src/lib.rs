//! The patterns vrampool's speed is measured on, runnable on any pool and on offset-allocator (the O(1)
//! reference) side by side, in one process.
//!
//! - **pair**: allocate `size` bytes and free them, repeated; nanoseconds per allocate+free pair.
//! - **churn**: 1000 live blocks of log-uniform sizes from 256 B to 8 MiB; free one at random and allocate
//!   one, repeated; nanoseconds per churn step (one free plus one allocation).
//!
//! Used by the criterion benches of this crate (`cargo bench -p vrampool-bench`) and by `vrampool bench`.
#![forbid(unsafe_code)]

mod churn_sequence;
mod median;
mod offset_reference;
mod pattern;
mod pool_runner;
mod shared_churn;
mod thread_scaling;

pub use churn_sequence::ChurnSequence;
pub use median::median_ns_per_op;
pub use offset_reference::OffsetReference;
pub use pattern::{Pattern, log_uniform};
pub use pool_runner::{PoolChurn, run_pair, run_pool};
pub use shared_churn::{HANDOFF_EVERY, MAILBOX_MOST, churn_on_pools, shared_churn_throughput};
pub use thread_scaling::{ThreadScaling, thread_throughput};
