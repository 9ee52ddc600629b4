//! The dynamically growing pool: starts small, grows on demand by a factor up to a cap.

mod block_cache;
mod config;
mod dynamic_pool;
mod growth_policy;
mod page_policy;
mod pool_device;
mod segment_space;
mod shard_set;
mod space;
mod virtual_space;

pub(crate) use block_cache::BlockCache;
pub use config::{Cap, DynamicConfig, Paging, VirtualMemory};
pub use dynamic_pool::DynamicPool;
pub use growth_policy::GrowthPolicy;
pub use page_policy::PagePolicy;
pub use shard_set::MAX_SHARDS;
