//! One row of `vrampool compare`: a strategy's figures on a trace, PyTorch's own, or those of PyTorch's
//! expandable segments as modelled.

use serde::{Deserialize, Serialize};
use vrampool::CostModel;
use vrampool_trace::{EventKind, PytorchBaseline, Trace};

use crate::expandable_model::expandable_segments;
use crate::replay_plan::ReplayPlan;
use crate::replay_result::ReplayResult;

/// The virtual-memory granularity PyTorch's expandable segments map in on an H200.
const GRANULARITY: u64 = 2 << 20;

/// A row of the comparison, with exactly the keys `vrampool compare --json` promises (null where a field
/// does not apply).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComparisonRow {
    /// The trace's file name without directory.
    pub trace: String,
    /// `fixed`, `dynamic`, `hybrid`, `adaptive`, `pytorch` (PyTorch's recorded figures) or `expandable`
    /// (PyTorch's expandable segments, modelled: [`crate::expandable_segments`]).
    pub strategy: String,
    /// The config string (null for PyTorch's rows).
    pub config: Option<String>,
    /// Events in the trace.
    pub events: u64,
    /// The most bytes live at once.
    pub peak_live_bytes: u64,
    /// The most bytes reserved at once.
    pub peak_reserved_bytes: u64,
    /// Peak live over peak reserved (null where nothing was reserved).
    pub utilization: Option<f64>,
    /// Requests served outside the strategy's main structure (null for PyTorch's rows).
    pub fallbacks: Option<u64>,
    /// Requests refused for lack of memory (for PyTorch: its recorded out-of-memory events).
    pub ooms: Option<u64>,
    /// Device calls (for PyTorch: its recorded segment allocations, frees, maps and unmaps; for expandable
    /// segments: the modelled maps).
    pub backend_calls: Option<u64>,
    /// The cost model's time in the driver, in microseconds (for PyTorch: its recorded segment calls
    /// priced by the same model).
    pub driver_time_us: Option<f64>,
    /// The pool's own CPU time per event in nanoseconds (null for PyTorch's rows).
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
    /// PyTorch's own figures on the trace it recorded, from its `segment_*` events; `None` where the trace
    /// records none (an RMM or vrampool CSV log, or a snapshot without its segment history): it then holds no
    /// figures of PyTorch's to compare with, rather than PyTorch reserving nothing.
    pub fn pytorch(trace: &Trace) -> Option<Self> {
        let cost = CostModel::default();
        let (mut calls, mut driver_ns, mut ooms) = (0u64, 0u64, 0u64);
        for event in &trace.events {
            match event.kind {
                EventKind::SegmentAlloc => {
                    calls += 1;
                    driver_ns = driver_ns.saturating_add(cost.segment_alloc(event.size));
                }
                EventKind::SegmentFree => {
                    calls += 1;
                    driver_ns = driver_ns.saturating_add(cost.segment_free(event.size));
                }
                EventKind::SegmentMap => {
                    calls += 1;
                    driver_ns = driver_ns.saturating_add(cost.map(event.size.div_ceil(GRANULARITY), GRANULARITY));
                }
                EventKind::SegmentUnmap => {
                    calls += 1;
                    driver_ns = driver_ns.saturating_add(cost.unmap(event.size.div_ceil(GRANULARITY), GRANULARITY));
                }
                EventKind::Oom => ooms += 1,
                _ => {}
            }
        }
        // Every segment event is a call: none counted, none recorded.
        if calls == 0 {
            return None;
        }
        let baseline = PytorchBaseline::of(trace);
        Some(ComparisonRow {
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
        })
    }

    /// The figures of PyTorch's caching allocator with expandable segments on the requests of `plan`, by
    /// the model ([`crate::expandable_segments`]), its maps priced by the default cost model: what the
    /// trace's program would reserve with `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.
    pub fn expandable(plan: &ReplayPlan) -> Self {
        let figures = expandable_segments(plan, &CostModel::default());
        ComparisonRow {
            trace: plan.name.clone(),
            strategy: "expandable".into(),
            config: None,
            events: plan.events,
            peak_live_bytes: figures.peak_live_bytes,
            peak_reserved_bytes: figures.peak_reserved_bytes,
            utilization: figures.utilization(),
            fallbacks: None,
            ooms: Some(0),
            backend_calls: Some(figures.maps),
            driver_time_us: Some(figures.driver_ns as f64 / 1000.0),
            replay_ns_per_event: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use vrampool_trace::Event;

    use super::*;

    fn trace(events: Vec<Event>) -> Trace {
        Trace { name: "t".into(), events, ..Trace::default() }
    }

    #[test]
    fn pytorch_figures_come_from_segment_events_and_only_from_them() {
        let allocations =
            vec![Event::new(0, EventKind::Alloc, 0x1000, 4096, 0), Event::new(1, EventKind::Free, 0x1000, 4096, 0)];
        assert_eq!(ComparisonRow::pytorch(&trace(allocations.clone())), None, "a log without segment events");
        let mut recorded = vec![Event::new(0, EventKind::SegmentAlloc, 0x1000, 2 << 20, 0)];
        recorded.extend(allocations);
        let row = ComparisonRow::pytorch(&trace(recorded)).expect("PyTorch's segment was recorded");
        assert_eq!((row.strategy.as_str(), row.config.as_deref()), ("pytorch", None));
        assert_eq!(row.peak_reserved_bytes, 2 << 20);
        assert_eq!(row.backend_calls, Some(1));
    }

    #[test]
    fn expandable_segments_figures_come_from_the_requests() {
        let t = trace(vec![
            Event::new(0, EventKind::Alloc, 0x1000, 30 << 20, 0),
            Event::new(1, EventKind::Free, 0x1000, 30 << 20, 0),
        ]);
        let row = ComparisonRow::expandable(&ReplayPlan::from_trace(&t).unwrap());
        assert_eq!((row.strategy.as_str(), row.config.as_deref()), ("expandable", None));
        assert_eq!((row.peak_live_bytes, row.peak_reserved_bytes), (30 << 20, 40 << 20), "two pages of 20 MiB");
        assert_eq!(row.utilization, Some(0.75));
        assert_eq!(row.backend_calls, Some(1));
        assert!(row.driver_time_us.unwrap() > 0.0);
    }
}
