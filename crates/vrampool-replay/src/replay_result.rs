//! What one replay measured.

use serde::{Deserialize, Serialize};
use vrampool::{ClassSpec, PoolStats, Strategy};

/// Live and reserved bytes after some operation of a replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelinePoint {
    /// Operations done so far.
    pub operation: u64,
    /// Bytes live.
    pub live_bytes: u64,
    /// Bytes reserved.
    pub reserved_bytes: u64,
}

/// The measures of one strategy on one trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayResult {
    /// The trace's name.
    pub trace: String,
    /// The strategy.
    pub strategy: Strategy,
    /// The config string.
    pub config: String,
    /// Events in the trace.
    pub events: u64,
    /// Microseconds from the trace's first event to its last: what the driver time is weighed against.
    #[serde(default)]
    pub duration_us: i64,
    /// Allocations and frees replayed.
    pub operations: u64,
    /// The most bytes live at once (requested sizes).
    pub peak_live_bytes: u64,
    /// The most bytes reserved at once.
    pub peak_reserved_bytes: u64,
    /// Peak live over peak reserved.
    pub utilization: f64,
    /// Requests served outside the strategy's main structure.
    pub fallbacks: u64,
    /// Requests refused for lack of memory.
    pub ooms: u64,
    /// Device calls (allocate, free, reserve, map, unmap, move).
    pub backend_calls: u64,
    /// The cost model's time in the driver, in microseconds (0 on a real device).
    pub driver_time_us: f64,
    /// The modelled time the program spent blocked waiting for the simulated GPU, in microseconds (0 on a
    /// GPU that keeps up, and on a real device): each wait for idle pages costs what the GPU had left to run
    /// of the work it waited for ([`vrampool::DeviceCounters::host_blocked_ns`]).
    #[serde(default)]
    pub host_blocked_us: f64,
    /// On a real device: the most memory its driver reported in use beyond what was in use before the
    /// replay, read whenever the pool's reserved bytes reached a new high.
    pub device_peak_used_bytes: Option<u64>,
    /// The pool's own CPU time per trace event, in nanoseconds (on a real device, with the reading of the
    /// pool's reserved bytes after each operation that decides when to read the driver).
    pub replay_ns_per_event: f64,
    /// The pool's counters at the end.
    pub stats: PoolStats,
    /// The hybrid's classes at the end (empty for other strategies).
    pub classes: Vec<ClassSpec>,
    /// Live and reserved bytes along the replay.
    pub timeline: Vec<TimelinePoint>,
}
