//! The hybrid pool: a core of size classes over a dynamic region, with a watermark.

mod address_map;
mod class_cache;
mod class_learner;
mod config;
mod core;
mod hybrid_pool;
mod waste_bound;
mod watermark;

pub use class_learner::LearnedClasses;
pub use config::{ClassSpec, HybridConfig, MAX_CLASSES};
pub use hybrid_pool::HybridPool;
