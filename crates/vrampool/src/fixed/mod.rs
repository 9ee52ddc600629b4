//! The fixed-size pool: one reservation at start, cut into equal blocks.

mod config;
mod fixed_pool;

pub use config::{Fallback, FixedConfig};
pub use fixed_pool::FixedPool;
