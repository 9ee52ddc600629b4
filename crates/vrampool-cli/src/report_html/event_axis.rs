//! Where a replay's operations fall among the events of the trace they came from, so that a replay's
//! timeline and PyTorch's share one x axis: the trace's events.

use vrampool_replay::ReplayPlan;
use vrampool_trace::Trace;

/// Turns "operations done" in a replay of a plan into "events done" in its trace.
///
/// A plan keeps each operation's trace time; when the trace's times never go backwards, the events done
/// after an operation are those up to its time (ties within one microsecond go to the end of the tie).
/// Otherwise operations are spread evenly over the events.
#[derive(Clone, Copy, Debug)]
pub struct EventAxis<'a> {
    event_times: Option<&'a [i64]>,
    operation_times: &'a [i64],
    events: u64,
}

/// A trace's event times, in order.
#[derive(Clone, Debug, Default)]
pub struct EventTimes {
    times: Vec<i64>,
    ordered: bool,
}

impl EventTimes {
    /// The times of `trace`'s events.
    pub fn of(trace: &Trace) -> Self {
        let times: Vec<i64> = trace.events.iter().map(|e| e.time_us).collect();
        let ordered = times.is_sorted();
        EventTimes { times, ordered }
    }
}

impl<'a> EventAxis<'a> {
    /// The axis of `plan`, made from the trace whose event times are `times`.
    pub fn new(times: &'a EventTimes, plan: &'a ReplayPlan) -> Self {
        let usable = times.ordered && plan.times_us.is_sorted();
        EventAxis {
            event_times: usable.then_some(times.times.as_slice()),
            operation_times: &plan.times_us,
            events: times.times.len() as u64,
        }
    }

    /// The events done when the first `operations` operations of the plan are done.
    pub fn events_after(&self, operations: u64) -> f64 {
        let total = self.operation_times.len() as u64;
        if operations == 0 || total == 0 {
            return 0.0;
        }
        let operations = operations.min(total);
        match self.event_times {
            Some(times) => {
                let time = self.operation_times[operations as usize - 1];
                times.partition_point(|&t| t <= time) as f64
            }
            None => operations as f64 / total as f64 * self.events as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vrampool_trace::{Event, EventKind};

    fn trace(times: [i64; 6]) -> Trace {
        let kinds = [
            EventKind::SegmentAlloc,
            EventKind::Alloc,
            EventKind::FreeRequested,
            EventKind::Free,
            EventKind::SegmentFree,
            EventKind::Alloc,
        ];
        Trace {
            events: kinds.iter().zip(times).map(|(&kind, t)| Event::new(t, kind, 0x100, 64, 0)).collect(),
            ..Trace::default()
        }
    }

    #[test]
    fn operations_land_on_their_events() {
        let trace = trace([10, 20, 30, 40, 50, 60]);
        let plan = ReplayPlan::from_trace(&trace).unwrap();
        assert_eq!(plan.operations.len(), 3, "alloc, free, alloc");
        let times = EventTimes::of(&trace);
        let axis = EventAxis::new(&times, &plan);
        let x: Vec<f64> = (0..=4).map(|ops| axis.events_after(ops)).collect();
        // The alloc is event 2, its free event 4, the second alloc event 6.
        assert_eq!(x, vec![0.0, 2.0, 4.0, 6.0, 6.0]);
    }

    #[test]
    fn times_out_of_order_spread_operations_evenly() {
        let trace = trace([10, 20, 30, 5, 50, 60]);
        let plan = ReplayPlan::from_trace(&trace).unwrap();
        let times = EventTimes::of(&trace);
        let axis = EventAxis::new(&times, &plan);
        assert_eq!(axis.events_after(0), 0.0);
        assert_eq!(axis.events_after(1), 2.0);
        assert_eq!(axis.events_after(3), 6.0);
    }
}
