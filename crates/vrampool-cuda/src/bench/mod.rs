//! Allocation latency on a GPU, measured in one process: `cuMemAlloc`/`cuMemFree`, CUDA's own
//! stream-ordered pool (`cuMemAllocAsync`/`cuMemFreeAsync` with the release threshold at its maximum), and
//! the vrampool strategies on both CUDA backends, over the patterns of the design (an allocate+free pair
//! at several sizes, and churn over many live blocks).
//!
//! Each (method, pattern) cell runs rounds of operations, each round timed as a whole, until a time budget
//! is spent; the figure is the median nanoseconds per operation over the rounds. The methods' rounds of one
//! pattern take turns, so that every figure of a column is taken over the same stretch of time. Adding a strategy is one
//! line in [`default_methods`] ([`Method::pool_on_both`]).

mod bench_device;
mod latency_report;
mod method;
mod runner;

pub use bench_device::BenchDevice;
pub use latency_report::{LatencyCell, LatencyReport, PoolWork};
pub use method::{Allocator, Method, default_methods, fixed_config};
pub use runner::{BenchConfig, default_patterns, run};
pub use vrampool_bench::Pattern;
