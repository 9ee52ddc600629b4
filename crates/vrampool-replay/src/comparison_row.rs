//! One row of `vrampool compare`: a strategy's figures on a trace, or PyTorch's own.

use serde::{Deserialize, Serialize};
use vrampool::CostModel;
use vrampool_trace::{EventKind, PytorchBaseline, Trace};

use crate::replay_result::ReplayResult;

/// The virtual-memory granularity PyTorch's expandable segments map in on an H200.
const GRANULARITY: u64 = 2 << 20;

/// A row of the comparison, with exactly the keys `vrampool compare --json` promises (null where a field
/// does not apply).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComparisonRow {
    /// The trace's file name without directory.
    pub trace: String,
    /// `fixed`, `dynamic`, `hybrid` or `pytorch`.
    pub strategy: String,
    /// The config string (null for PyTorch's recorded baseline).
    pub config: Option<String>,
    /// Events in the trace.
    pub events: u64,
    /// The most bytes live at once.
    pub peak_live_bytes: u64,
    /// The most bytes reserved at once.
    pub peak_reserved_bytes: u64,
    /// Peak live over peak reserved (null where nothing was reserved).
    pub utilization: Option<f64>,
    /// Requests served outside the strategy's main structure (null for PyTorch).
    pub fallbacks: Option<u64>,
    /// Requests refused for lack of memory (for PyTorch: its recorded out-of-memory events).
    pub ooms: Option<u64>,
    /// Device calls (for PyTorch: its recorded segment allocations, frees, maps and unmaps).
    pub backend_calls: Option<u64>,
    /// The cost model's time in the driver, in microseconds (for PyTorch: its recorded segment calls
    /// priced by the same model).
    pub driver_time_us: Option<f64>,
    /// The pool's own CPU time per event in nanoseconds (null for PyTorch).
    pub replay_ns_per_event: Option<f64>,
}

impl From<&ReplayResult> for ComparisonRow {
    fn from(r: &ReplayResult) -> Self {
        ComparisonRow {
            trace: r.trace.clone(),
            strategy: r.strategy.name().into(),
            config: Some(r.config.clone()),
            events: r.events,
            peak_live_bytes: r.peak_live_bytes,
            peak_reserved_bytes: r.peak_reserved_bytes,
            utilization: (r.peak_reserved_bytes > 0).then_some(r.utilization),
            fallbacks: Some(r.fallbacks),
            ooms: Some(r.ooms),
            backend_calls: Some(r.backend_calls),
            driver_time_us: Some(r.driver_time_us),
            replay_ns_per_event: Some(r.replay_ns_per_event),
        }
    }
}

impl ComparisonRow {
    /// PyTorch's own figures on the trace it recorded, from its `segment_*` events.
    pub fn pytorch(trace: &Trace) -> Self {
        let baseline = PytorchBaseline::of(trace);
        let cost = CostModel::default();
        let (mut calls, mut driver_ns, mut ooms) = (0u64, 0u64, 0u64);
        for event in &trace.events {
            match event.kind {
                EventKind::SegmentAlloc => {
                    calls += 1;
                    driver_ns += cost.segment_alloc(event.size);
                }
                EventKind::SegmentFree => {
                    calls += 1;
                    driver_ns += cost.segment_free(event.size);
                }
                EventKind::SegmentMap => {
                    calls += 1;
                    driver_ns += cost.map(event.size.div_ceil(GRANULARITY), GRANULARITY);
                }
                EventKind::SegmentUnmap => {
                    calls += 1;
                    driver_ns += cost.unmap(event.size.div_ceil(GRANULARITY), GRANULARITY);
                }
                EventKind::Oom => ooms += 1,
                _ => {}
            }
        }
        ComparisonRow {
            trace: trace.name.clone(),
            strategy: "pytorch".into(),
            config: None,
            events: trace.events.len() as u64,
            peak_live_bytes: baseline.peak_live_bytes,
            peak_reserved_bytes: baseline.peak_reserved_bytes,
            utilization: baseline.utilization(),
            fallbacks: None,
            ooms: Some(ooms),
            backend_calls: Some(calls),
            driver_time_us: Some(driver_ns as f64 / 1000.0),
            replay_ns_per_event: None,
        }
    }
}
