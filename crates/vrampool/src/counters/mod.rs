//! Everything a pool or a device counts, and what a pool reports of it.
//!
//! - [`PoolStats`] and [`Stat`]: what a pool reports, cheap to read;
//! - [`StatsCounters`]: allocated bytes, allocations and frees of the pools whose hot paths take no lock,
//!   one cache line per thread slot;
//! - [`LiveTally`]: the same counts for a pool that holds its lock on every allocation and free;
//! - [`SlotTallies`]: counts of events kept per thread slot (the hybrid's routes);
//! - [`ReservedCounters`]: reserved bytes, device calls and their time, and the rare events of a pool;
//! - [`DeviceCounters`]: what a device without a GPU was asked to do.

mod device_counters;
mod live_tally;
mod reserved_counters;
mod slot_tallies;
mod stats;
mod stats_counters;

pub use device_counters::DeviceCounters;
pub(crate) use live_tally::LiveTally;
pub(crate) use reserved_counters::ReservedCounters;
pub(crate) use slot_tallies::SlotTallies;
pub use stats::{PoolStats, Stat};
pub(crate) use stats_counters::StatsCounters;
