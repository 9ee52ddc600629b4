//! PyTorch's own live and reserved bytes along a trace it recorded, by the rules of
//! [`vrampool_trace::PytorchBaseline`].

use vrampool_trace::{PytorchBaseline, Trace};

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
    /// [`vrampool_trace::EventKind::Free`] (PyTorch's `free_completed`), and blocks of [`Trace::initial_live`] are live from
    /// the start; reserved bytes start from [`PytorchBaseline::initial_reserved_bytes`].
    pub fn of(trace: &Trace, points: usize) -> Self {
        let events = trace.events.len();
        let step = events.div_ceil(points.max(1)).max(1);
        let mut taken = Vec::with_capacity(events / step + 2);
        let baseline = PytorchBaseline::walk(trace, |done, live, reserved_change| {
            if done % step == 0 || done == events {
                taken.push((done, live, reserved_change));
            }
        });
        let initial_reserved = i128::from(baseline.initial_reserved_bytes);
        let samples = taken
            .into_iter()
            .map(|(done, live, change)| TimelineSample {
                event: done as u64,
                live_bytes: live,
                // Never negative: the initial bytes are the least that keep the running sum from going below 0.
                reserved_bytes: u64::try_from(initial_reserved + change).unwrap_or(u64::MAX),
            })
            .collect();
        PytorchTimeline {
            samples,
            peak_live_bytes: baseline.peak_live_bytes,
            peak_reserved_bytes: baseline.peak_reserved_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vrampool_trace::{Event, EventKind, LiveBlock};

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
