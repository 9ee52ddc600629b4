//! Everything a pool or a device counts, and what a pool reports of it.
//!
//! - [`PoolStats`] and [`Stat`]: what a pool reports, cheap to read;
//! - [`StatsCounters`]: allocated bytes, allocations and frees of a pool, one cache line per thread slot;
//! - [`SlotTallies`]: counts of events kept per thread slot (the hybrid's routes);
//! - [`ReservedCounters`]: reserved bytes, device calls and their time, and the rare events of a pool;
//! - [`DeviceCounters`]: what a device without a GPU was asked to do.

mod device_counters;
mod reserved_counters;
mod slot_tallies;
mod stats;
mod stats_counters;

pub use device_counters::DeviceCounters;
pub(crate) use reserved_counters::ReservedCounters;
pub(crate) use slot_tallies::SlotTallies;
pub use stats::{PoolStats, Stat};
pub(crate) use stats_counters::StatsCounters;
