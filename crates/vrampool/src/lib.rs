//! vrampool: a GPU memory pool.
//!
//! It decides when to ask the device for memory and how much, with three pre-allocation strategies:
//!
//! - [`FixedPool`]: one reservation at start, cut into equal blocks, with an O(1) lock-free free list and a
//!   counted fallback for requests that do not fit a block;
//! - [`DynamicPool`]: starts small, grows on demand by a growth factor up to a cap, sub-allocates with an
//!   O(1) range allocator, and on a device with virtual memory grows in place;
//! - [`HybridPool`]: a core of size classes (learned during warm-up or given) for the common requests, a
//!   dynamic region for the rest, and a watermark that grows the region ahead of need;
//! - [`AdaptivePool`], the default: one range that sizes its own pages, places every block where the
//!   fewest pages are missing and moves idle pages before it grows, with nothing to tune.
//!
//! Every pool implements [`Pool`] over a [`Backend`]: [`SimDevice`] (no memory, a cost model, fault
//! injection), [`HostMemory`] (host bytes behind synthetic addresses, read and written through its own
//! methods, for tests that check data), or the CUDA backends of `vrampool-cuda`.
//!
//! ```
//! use std::sync::Arc;
//! use vrampool::{DynamicConfig, DynamicPool, Pool, PoolExt, SimDevice};
//!
//! let pool = DynamicPool::new(Arc::new(SimDevice::default()), DynamicConfig::default())?;
//! let buffer = pool.buffer(64 << 20)?;
//! assert_eq!(pool.stats().allocated_bytes.current, 64 << 20);
//! # drop(buffer);
//! # Ok::<(), vrampool::Error>(())
//! ```
#![forbid(unsafe_code)]

mod adaptive;
mod any_pool;
mod backend;
mod block_stack;
mod block_states;
mod buffer;
mod byte_format;
mod config_keys;
mod counters;
mod dynamic;
mod error;
mod excerpt;
mod fallback_segments;
mod fixed;
mod free_sequence;
mod host_table;
mod hot_list;
mod hybrid;
mod pool;
mod pool_spec;
mod range_allocator;
mod report;
mod request;
mod slab;
mod stream;
mod stream_homes;
mod stream_order;
mod stream_uses;
mod sync;
mod thread_slot;
mod units;

pub use adaptive::{AdaptiveConfig, AdaptivePool};
pub use any_pool::AnyPool;
pub use backend::{
    Backend, CostModel, DeviceAddr, DeviceCounters, DriverClock, EventId, FaultPlan, HOST_ADDRESS_SPACE, HostMemory,
    HostMemoryConfig, POISON, SIM_ADDRESS_SPACE, SimDevice, SimDeviceConfig,
};
pub use buffer::Buffer;
pub use byte_format::{BYTE_UNITS, format_bytes, human_bytes, parse_bytes, short_bytes, whole_mib};
pub use config_keys::{CONFIG_KEYS, ConfigKey, KeyScope};
pub use counters::{PoolStats, Stat};
pub use dynamic::{Cap, DynamicConfig, DynamicPool, GrowthPolicy, MAX_SHARDS, PagePolicy, Paging, VirtualMemory};
pub use error::{Error, Result};
pub use excerpt::{MAX_EXCERPT_CHARS, excerpt};
pub use fixed::{Fallback, FixedConfig, FixedPool};
pub use hybrid::{ClassSpec, HybridConfig, HybridPool, LearnedClasses, MAX_CLASSES};
pub use pool::{Allocation, Pool, PoolExt};
pub use pool_spec::{BackendKind, PoolSpec, Strategy};
pub use report::{BlockReport, PoolReport, ReportLimit, SegmentKind, SegmentReport, SizeClassReport};
pub use stream::StreamId;
pub use stream_uses::{StreamUseCounters, StreamUses};
pub use units::{DEFAULT_ALIGNMENT, GIB, KIB, MAX_BLOCK_SIZE, MIB, MIN_BLOCK};
