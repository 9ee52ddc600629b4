//! PyTorch's own figures on a trace it recorded: peak live bytes, peak reserved bytes, utilization.

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::event::EventKind;
use crate::trace::Trace;

/// What the allocator that recorded a trace achieved on it, computed from the recorded events.
///
/// - **live bytes**: the sum of the requested sizes of blocks allocated and not yet freed. A block stops
///   being live at its [`EventKind::Free`] (PyTorch's `free_completed`), when it becomes reusable; blocks in
///   [`Trace::initial_live`] are live from the start. On the bundled traces, dropping live bytes at
///   `free_requested` instead gives the same peaks: there every `free_requested` is followed at once by its
///   `free_completed`.
/// - **reserved bytes**: the running sum of `segment_alloc` and `segment_map` sizes minus `segment_free` and
///   `segment_unmap` sizes. Where the trace frees segments it never allocated (a ring buffer dropped their
///   allocation), the least starting amount that keeps the sum from going negative is taken as reserved from
///   the start.
/// - **utilization**: peak live bytes over peak reserved bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PytorchBaseline {
    /// The highest live bytes.
    pub peak_live_bytes: u64,
    /// The highest reserved bytes.
    pub peak_reserved_bytes: u64,
    /// The bytes taken as reserved before the first event.
    pub initial_reserved_bytes: u64,
}

impl PytorchBaseline {
    /// The baseline of `trace`. Linear in the number of events.
    pub fn of(trace: &Trace) -> Self {
        Self::walk(trace, |_, _, _| {})
    }

    /// [`PytorchBaseline::of`], telling `visit(events_done, live_bytes, reserved_change)` PyTorch's memory
    /// before the first event (`events_done` 0) and after each event. `reserved_change` is the running sum of
    /// segment bytes since the start; the bytes reserved are [`PytorchBaseline::initial_reserved_bytes`]
    /// plus it.
    pub fn walk(trace: &Trace, mut visit: impl FnMut(usize, u64, i128)) -> Self {
        let mut sizes: FxHashMap<u64, u64> = FxHashMap::default();
        let mut live: u64 = 0;
        for block in &trace.initial_live {
            live = live.saturating_add(block.size);
            if let Some(old) = sizes.insert(block.addr, block.size) {
                live = live.saturating_sub(old);
            }
        }
        let mut peak_live = live;
        let mut reserved: i128 = 0;
        let (mut lowest_reserved, mut highest_reserved): (i128, i128) = (0, 0);
        visit(0, live, reserved);
        for (index, event) in trace.events.iter().enumerate() {
            match event.kind {
                // Zero-byte allocations and frees are not tracked, as the readers do not track them.
                EventKind::Alloc | EventKind::Free if event.size == 0 => {}
                EventKind::Alloc => {
                    if let Some(old) = sizes.insert(event.addr, event.size) {
                        live = live.saturating_sub(old);
                    }
                    live = live.saturating_add(event.size);
                    peak_live = peak_live.max(live);
                }
                EventKind::Free => {
                    let size = sizes.remove(&event.addr).unwrap_or(0);
                    live = live.saturating_sub(size);
                }
                EventKind::SegmentAlloc | EventKind::SegmentMap => {
                    reserved += i128::from(event.size);
                    highest_reserved = highest_reserved.max(reserved);
                }
                EventKind::SegmentFree | EventKind::SegmentUnmap => {
                    reserved -= i128::from(event.size);
                    lowest_reserved = lowest_reserved.min(reserved);
                }
                EventKind::FreeRequested | EventKind::Oom | EventKind::AllocFailure => {}
            }
            visit(index + 1, live, reserved);
        }
        let initial_reserved = saturate(-lowest_reserved);
        PytorchBaseline {
            peak_live_bytes: peak_live,
            peak_reserved_bytes: saturate(i128::from(initial_reserved) + highest_reserved),
            initial_reserved_bytes: initial_reserved,
        }
    }

    /// Peak live bytes over peak reserved bytes; `None` when the trace reserves nothing (logs without
    /// segment events).
    pub fn utilization(&self) -> Option<f64> {
        (self.peak_reserved_bytes > 0).then(|| self.peak_live_bytes as f64 / self.peak_reserved_bytes as f64)
    }
}

/// `value` clamped into `u64`.
fn saturate(value: i128) -> u64 {
    u64::try_from(value.max(0)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, LiveBlock};

    #[test]
    fn blocks_live_from_the_start_count_from_the_start() {
        let trace = Trace {
            initial_live: vec![LiveBlock { addr: 0x10, size: 10_000, stream: 0 }],
            events: vec![
                Event::new(0, EventKind::Alloc, 0x20, 5000, 0),
                Event::new(1, EventKind::FreeRequested, 0x10, 10_000, 0),
                Event::new(2, EventKind::Free, 0x10, 10_000, 0),
                Event::new(3, EventKind::Alloc, 0x30, 4000, 0),
            ],
            ..Trace::default()
        };
        let baseline = PytorchBaseline::of(&trace);
        assert_eq!(baseline.peak_live_bytes, 15_000);
        assert_eq!(baseline.peak_reserved_bytes, 0);
        assert_eq!(baseline.utilization(), None);
    }

    #[test]
    fn a_block_stays_live_until_its_free_completes() {
        let trace = Trace {
            events: vec![
                Event::new(0, EventKind::Alloc, 0x10, 100, 0),
                Event::new(1, EventKind::FreeRequested, 0x10, 100, 0),
                Event::new(2, EventKind::Alloc, 0x20, 50, 0),
                Event::new(3, EventKind::Free, 0x10, 100, 0),
                Event::new(4, EventKind::Alloc, 0x30, 60, 0),
            ],
            ..Trace::default()
        };
        assert_eq!(PytorchBaseline::of(&trace).peak_live_bytes, 150);
    }

    #[test]
    fn segments_freed_but_never_allocated_were_reserved_from_the_start() {
        let trace = Trace {
            events: vec![
                Event::new(0, EventKind::SegmentAlloc, 0x100, 100, 0),
                Event::new(1, EventKind::SegmentFree, 0x900, 300, 0),
                Event::new(2, EventKind::SegmentMap, 0x500, 50, 0),
                Event::new(3, EventKind::Alloc, 0x100, 120, 0),
                Event::new(4, EventKind::SegmentUnmap, 0x500, 50, 0),
            ],
            ..Trace::default()
        };
        let baseline = PytorchBaseline::of(&trace);
        // Running sum: 100, -200, -150, -200: at least 200 bytes were reserved before the first event.
        assert_eq!(baseline.initial_reserved_bytes, 200);
        assert_eq!(baseline.peak_reserved_bytes, 300);
        assert_eq!(baseline.peak_live_bytes, 120);
        assert_eq!(baseline.utilization(), Some(0.4));
    }

    #[test]
    fn zero_byte_allocations_and_frees_change_no_live_bytes() {
        let trace = Trace {
            events: vec![
                Event::new(0, EventKind::Alloc, 0x10, 100, 0),
                Event::new(1, EventKind::Alloc, 0x10, 0, 0),
                Event::new(2, EventKind::Free, 0x10, 0, 0),
                Event::new(3, EventKind::Alloc, 0x20, 50, 0),
            ],
            ..Trace::default()
        };
        assert_eq!(PytorchBaseline::of(&trace).peak_live_bytes, 150);
    }
}
