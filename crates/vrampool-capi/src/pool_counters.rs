//! The counters of a pool as one C struct: the cheap stats call, which builds no report and no string.

use vrampool::{PoolStats, StreamUseCounters};

/// A pool's counters, as `vrampool_pool_counters` and `vrampool_device_counters` write them.
///
/// Allocated bytes are the sizes requested by live allocations (not rounded); reserved bytes are what the
/// pool holds from the device (for virtual memory: the mapped physical pages). Peaks are the highest values
/// since the pool was made.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Bytes requested by allocations not yet freed.
    pub allocated_bytes: u64,
    /// The highest `allocated_bytes` so far.
    pub allocated_bytes_peak: u64,
    /// Bytes the pool holds from the device.
    pub reserved_bytes: u64,
    /// The highest `reserved_bytes` so far.
    pub reserved_bytes_peak: u64,
    /// Allocations not yet freed.
    pub active_allocations: u64,
    /// Allocations served so far.
    pub allocations: u64,
    /// Frees done so far (a held free counts once the pool has the block back).
    pub frees: u64,
    /// Allocations that failed (for lack of memory or a device error).
    pub failed_allocations: u64,
    /// Requests refused because they would pass the pool's cap or the device was full.
    pub ooms: u64,
    /// Times the pool asked the device for more memory.
    pub growths: u64,
    /// Bytes given back to the device so far.
    pub trimmed_bytes: u64,
    /// Allocations served outside the pool's main structure.
    pub fallbacks: u64,
    /// Frees held back now until work queued on other streams has run.
    pub held_frees: u64,
    /// Frees held back so far.
    pub held_frees_total: u64,
    /// Calls the pool made to the device's memory functions.
    pub backend_calls: u64,
}

impl Counters {
    /// The counters of a pool with `stats`, `uses` and `failed_allocations`.
    pub(crate) fn new(stats: &PoolStats, uses: StreamUseCounters, failed_allocations: u64) -> Self {
        Counters {
            allocated_bytes: stats.allocated_bytes.current,
            allocated_bytes_peak: stats.allocated_bytes.peak,
            reserved_bytes: stats.reserved_bytes.current,
            reserved_bytes_peak: stats.reserved_bytes.peak,
            active_allocations: stats.active_allocations,
            allocations: stats.allocations,
            frees: stats.frees,
            failed_allocations,
            ooms: stats.ooms,
            growths: stats.growths,
            trimmed_bytes: stats.trimmed_bytes,
            fallbacks: stats.fallbacks,
            held_frees: uses.held_now,
            held_frees_total: uses.held_frees,
            backend_calls: stats.backend_calls,
        }
    }
}
