//! The adaptive pool, vrampool's default: the hybrid's size classes over a dynamic region whose pages,
//! growth and caching follow what the pool sees, with no parameter fitted to a workload.

mod adaptive_pool;
mod config;

pub use adaptive_pool::AdaptivePool;
pub use config::AdaptiveConfig;
