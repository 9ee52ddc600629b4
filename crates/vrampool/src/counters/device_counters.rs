//! Counters every backend without a GPU keeps: calls, bytes and modelled driver time.

use serde::{Deserialize, Serialize};

/// What a device was asked to do, counted since it was created.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceCounters {
    /// Segments allocated.
    pub segments_allocated: u64,
    /// Segments freed.
    pub segments_freed: u64,
    /// Address ranges reserved.
    pub ranges_reserved: u64,
    /// Address ranges released.
    pub ranges_released: u64,
    /// Map calls (each a batch of chunks).
    pub map_calls: u64,
    /// Unmap calls.
    pub unmap_calls: u64,
    /// Remap calls (moves of physical chunks).
    pub remap_calls: u64,
    /// Chunks newly mapped.
    pub chunks_mapped: u64,
    /// Chunks unmapped and released.
    pub chunks_unmapped: u64,
    /// Chunks moved by remap.
    pub chunks_moved: u64,
    /// Alias calls (physical chunks mapped at a second address too).
    #[serde(default)]
    pub alias_calls: u64,
    /// Chunks mapped at a second address by alias calls.
    #[serde(default)]
    pub chunks_aliased: u64,
    /// Events recorded.
    pub events_recorded: u64,
    /// Event queries.
    pub event_queries: u64,
    /// Streams made to wait on an event.
    pub stream_waits: u64,
    /// Whole-device synchronisations.
    pub synchronizations: u64,
    /// Host waits for one event ([`crate::Backend::wait_event`]).
    #[serde(default)]
    pub event_waits: u64,
    /// Modelled time the host spent blocked on the device's queued work, in nanoseconds: on a device that
    /// runs behind the program ([`crate::SimDeviceConfig::gpu_lag_us`]), the whole lag for a
    /// synchronisation, what is left of it for an event wait. Zero where the device keeps up.
    #[serde(default)]
    pub host_blocked_ns: u64,
    /// Calls that failed (refused, invalid or injected faults).
    pub failed_calls: u64,
    /// Device memory in use now (segments plus mapped chunks).
    pub used_bytes: u64,
    /// The most device memory ever in use at once.
    pub peak_used_bytes: u64,
    /// Modelled time spent in the driver, in nanoseconds (zero on host memory).
    pub driver_time_ns: u64,
}

impl DeviceCounters {
    /// Calls that allocate, free, reserve, release, map, unmap, move or alias memory.
    pub fn memory_calls(&self) -> u64 {
        self.segments_allocated
            + self.segments_freed
            + self.ranges_reserved
            + self.ranges_released
            + self.map_calls
            + self.unmap_calls
            + self.remap_calls
            + self.alias_calls
    }
}
