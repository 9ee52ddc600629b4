//! What a pool reports about itself: the cheap counters ([`PoolStats`]) in PyTorch's vocabulary.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A quantity's value now and its highest value so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    /// The value now.
    pub current: u64,
    /// The highest value so far.
    pub peak: u64,
}

/// A pool's counters, cheap to read.
///
/// Allocated bytes are the sizes *requested* by live allocations (not rounded); reserved bytes are what
/// the pool holds from the device (for virtual memory: mapped physical bytes).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolStats {
    /// Bytes requested by allocations not yet freed.
    pub allocated_bytes: Stat,
    /// Bytes the pool holds from the device.
    pub reserved_bytes: Stat,
    /// Allocations not yet freed.
    pub active_allocations: u64,
    /// Allocations served.
    pub allocations: u64,
    /// Frees done.
    pub frees: u64,
    /// Allocations served outside the pool's main structure.
    pub fallbacks: u64,
    /// Fallbacks by reason (`oversize`, `exhausted`, `alignment`, ...).
    pub fallback_reasons: BTreeMap<String, u64>,
    /// Requests refused for lack of memory.
    pub ooms: u64,
    /// Times the pool asked the device for more memory.
    pub growths: u64,
    /// Growths done ahead of need, off the allocation path (the hybrid pool's watermark).
    pub pre_expansions: u64,
    /// Calls made to the backend's memory functions (allocate, free, reserve, map, unmap, move).
    pub backend_calls: u64,
    /// Physical chunks moved from idle stretches to where memory was needed (virtual memory only).
    pub chunks_moved: u64,
    /// Physical chunks still in use by queued work given to a new block by mapping them at its address as
    /// well ([`crate::DynamicConfig::alias_in_use`]), instead of waiting to move them.
    #[serde(default)]
    pub chunks_aliased: u64,
    /// Bytes given back to the device by trim or by the pool's own reclaiming.
    pub trimmed_bytes: u64,
    /// Events recorded to order reuse across streams.
    pub events_recorded: u64,
    /// Streams made to wait on another stream's event before reusing its memory.
    pub stream_waits: u64,
    /// Whole-device synchronisations (before unmapping memory, moving memory several streams used, or past
    /// the stream table).
    pub synchronizations: u64,
    /// Host waits for one event of the pool's stream, before moving idle memory its queued work may still
    /// use (later work keeps the device busy meanwhile).
    #[serde(default)]
    pub event_waits: u64,
    /// Wall time the pool's callers spent in its device work, in nanoseconds, on the dynamic and hybrid
    /// pools (0 on the fixed pool): memory calls made while allocating (maps, moves, new segments) and
    /// freeing (events), and the waits among them.
    #[serde(default)]
    pub device_time_ns: u64,
    /// The part of [`PoolStats::device_time_ns`] spent waiting for the device before moving idle memory.
    #[serde(default)]
    pub wait_time_ns: u64,
}

impl PoolStats {
    /// Peak allocated bytes over peak reserved bytes (1.0 is the physical limit; 0 before any reservation).
    pub fn utilization(&self) -> f64 {
        if self.reserved_bytes.peak == 0 {
            0.0
        } else {
            self.allocated_bytes.peak as f64 / self.reserved_bytes.peak as f64
        }
    }
}
