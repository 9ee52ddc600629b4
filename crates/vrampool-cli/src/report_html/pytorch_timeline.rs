//! PyTorch's own live and reserved bytes along a trace it recorded, by the rules of
//! [`vrampool_trace::PytorchBaseline`].

use std::collections::HashMap;

use vrampool_trace::{EventKind, PytorchBaseline, Trace};

/// Live and reserved bytes after some number of events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimelineSample {
    /// Events done so far.
    pub event: u64,
    /// Bytes requested by blocks allocated and not yet freed (`free_completed`).
    pub live_bytes: u64,
    /// Bytes of segments allocated or mapped and not yet freed or unmapped, with what was reserved before
    /// the first event.
    pub reserved_bytes: u64,
}

/// PyTorch's memory along a trace: about `points` samples, taken after every `step` events, and the exact
/// peaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PytorchTimeline {
    /// The samples, the first before any event and the last after the last event.
    pub samples: Vec<TimelineSample>,
    /// The highest live bytes after any event.
    pub peak_live_bytes: u64,
    /// The highest reserved bytes after any event.
    pub peak_reserved_bytes: u64,
}

impl PytorchTimeline {
    /// The timeline of `trace`, sampled about `points` times (at least twice). Live bytes drop at
    /// [`EventKind::Free`] (PyTorch's `free_completed`), and blocks of [`Trace::initial_live`] are live from
    /// the start; reserved bytes start from [`PytorchBaseline::initial_reserved_bytes`].
    pub fn of(trace: &Trace, points: usize) -> Self {
        let events = trace.events.len();
        let step = events.div_ceil(points.max(1)).max(1);
        let mut sizes: HashMap<u64, u64> = HashMap::new();
        let mut live: u64 = 0;
        for block in &trace.initial_live {
            if let Some(old) = sizes.insert(block.addr, block.size) {
                live = live.saturating_sub(old);
            }
            live = live.saturating_add(block.size);
        }
        let mut reserved = PytorchBaseline::of(trace).initial_reserved_bytes;
        let mut samples = vec![TimelineSample { event: 0, live_bytes: live, reserved_bytes: reserved }];
        let (mut peak_live, mut peak_reserved) = (live, reserved);
        for (i, event) in trace.events.iter().enumerate() {
            match event.kind {
                EventKind::Alloc => {
                    if let Some(old) = sizes.insert(event.addr, event.size) {
                        live = live.saturating_sub(old);
                    }
                    live = live.saturating_add(event.size);
                }
                EventKind::Free => live = live.saturating_sub(sizes.remove(&event.addr).unwrap_or(0)),
                EventKind::SegmentAlloc | EventKind::SegmentMap => reserved = reserved.saturating_add(event.size),
                EventKind::SegmentFree | EventKind::SegmentUnmap => reserved = reserved.saturating_sub(event.size),
                EventKind::FreeRequested | EventKind::Oom | EventKind::AllocFailure => {}
            }
            peak_live = peak_live.max(live);
            peak_reserved = peak_reserved.max(reserved);
            let done = i + 1;
            if done % step == 0 || done == events {
                samples.push(TimelineSample { event: done as u64, live_bytes: live, reserved_bytes: reserved });
            }
        }
        PytorchTimeline { samples, peak_live_bytes: peak_live, peak_reserved_bytes: peak_reserved }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vrampool_trace::{Event, LiveBlock};

    fn trace() -> Trace {
        Trace {
            name: "hand-made".into(),
            initial_live: vec![LiveBlock { addr: 0x900, size: 30, stream: 0 }],
            events: vec![
                Event::new(0, EventKind::SegmentFree, 0x5000, 200, 0),
                Event::new(1, EventKind::SegmentAlloc, 0x100, 1000, 0),
                Event::new(2, EventKind::Alloc, 0x100, 400, 0),
                Event::new(3, EventKind::Alloc, 0x300, 500, 0),
                Event::new(4, EventKind::FreeRequested, 0x100, 400, 0),
                Event::new(5, EventKind::Free, 0x100, 400, 0),
                Event::new(6, EventKind::SegmentMap, 0x8000, 300, 0),
                Event::new(7, EventKind::Free, 0x900, 30, 0),
                Event::new(8, EventKind::SegmentUnmap, 0x8000, 300, 0),
            ],
            ..Trace::default()
        }
    }

    #[test]
    fn every_event_sampled_on_a_short_trace() {
        let trace = trace();
        let timeline = PytorchTimeline::of(&trace, 1000);
        // The segment freed by the first event was never allocated: 200 bytes were reserved from the start.
        let expected: [(u64, u64); 10] = [
            (30, 200),
            (30, 0),
            (30, 1000),
            (430, 1000),
            (930, 1000),
            (930, 1000),
            (530, 1000),
            (530, 1300),
            (500, 1300),
            (500, 1000),
        ];
        let got: Vec<(u64, u64)> = timeline.samples.iter().map(|s| (s.live_bytes, s.reserved_bytes)).collect();
        assert_eq!(got, expected);
        assert_eq!(timeline.samples.iter().map(|s| s.event).collect::<Vec<_>>(), (0..=9).collect::<Vec<u64>>());
        assert_eq!((timeline.peak_live_bytes, timeline.peak_reserved_bytes), (930, 1300));
        let baseline = PytorchBaseline::of(&trace);
        assert_eq!((baseline.peak_live_bytes, baseline.peak_reserved_bytes), (930, 1300));
    }

    #[test]
    fn downsampling_keeps_the_ends_and_the_exact_peaks() {
        let trace = trace();
        let timeline = PytorchTimeline::of(&trace, 4);
        // 9 events, 4 points: a sample every 3 events, and the last event.
        assert_eq!(timeline.samples.iter().map(|s| s.event).collect::<Vec<_>>(), vec![0, 3, 6, 9]);
        assert_eq!(timeline.samples[3], TimelineSample { event: 9, live_bytes: 500, reserved_bytes: 1000 });
        // The peaks fall between samples and are still exact.
        assert_eq!((timeline.peak_live_bytes, timeline.peak_reserved_bytes), (930, 1300));
    }

    #[test]
    fn an_empty_trace_has_one_sample() {
        let timeline = PytorchTimeline::of(&Trace::default(), 1000);
        assert_eq!(timeline.samples, vec![TimelineSample { event: 0, live_bytes: 0, reserved_bytes: 0 }]);
    }
}
