//! The adaptive pool, vrampool's default: one dynamic range of virtual addresses whose pages, growth and
//! moves of idle memory follow what the pool sees, with no parameter fitted to a workload.

mod adaptive_pool;
mod config;

pub use adaptive_pool::AdaptivePool;
pub use config::AdaptiveConfig;
