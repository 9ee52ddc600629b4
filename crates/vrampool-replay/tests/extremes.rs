//! Traces at the edges of the numbers they hold: sizes of 0, 1, 2^63 and 2^64 - 1, times from -2^63 to
//! 2^63 - 1, the highest addresses and streams. Planning, comparing and advising give sound figures on them:
//! nothing wraps (a debug build panics on a wrap, so these tests also catch one that a release build hides).

use vrampool::Strategy;
use vrampool_replay::{ReplayOptions, ReplayPlan, SizeProfile, advise, candidates};
use vrampool_trace::{Event, EventKind, Trace};

/// A trace of `events`.
fn trace(events: Vec<Event>) -> Trace {
    Trace { name: "edges".into(), events, ..Trace::default() }
}

/// An allocation of `size` bytes at `addr` at `time`, freed one microsecond later (saturating).
fn pair(time: i64, addr: u64, size: u64, stream: u64) -> [Event; 2] {
    [
        Event::new(time, EventKind::Alloc, addr, size, stream),
        Event::new(time.saturating_add(1), EventKind::Free, addr, size, stream),
    ]
}

#[test]
fn a_request_of_the_largest_size_is_never_advised_a_block_of_256_bytes() {
    let plan = ReplayPlan::from_trace(&trace(pair(0, 0x1000, u64::MAX, 0).to_vec())).unwrap();
    assert_eq!(SizeProfile::of(&plan).percentile(1.0), u64::MAX);
    // No fixed pool holds such a block: none is tried, rather than one of blocks too small.
    assert!(candidates(Strategy::Fixed, &plan, ReplayOptions::default().capacity).is_empty());
    let advice = advise(&plan, &Strategy::ALL, &ReplayOptions::default(), &|_, _| {}).unwrap();
    assert!(advice.strategies.iter().all(|s| s.best.strategy != Strategy::Fixed));
    for strategy in &advice.strategies {
        assert_eq!(strategy.best.ooms, 1, "{}: the request does not fit the device", strategy.best.config);
    }
    assert!(!advice.config.contains("block_size=256"), "{}", advice.config);
}

#[test]
fn sizes_at_every_edge_replay_and_are_counted() {
    let mut events = Vec::new();
    for (i, size) in [0, 1, 256, 257, 1 << 63, u64::MAX - 255, u64::MAX].into_iter().enumerate() {
        events.extend(pair(i as i64 * 10, 0x1000 * (i as u64 + 1), size, 0));
    }
    let plan = ReplayPlan::from_trace(&trace(events)).unwrap();
    let profile = SizeProfile::of(&plan);
    assert_eq!(profile.requests, 6, "the zero-byte request is not planned");
    assert_eq!(profile.percentile(1.0), u64::MAX);
    let advice = advise(&plan, &Strategy::ALL, &ReplayOptions::default(), &|_, _| {}).unwrap();
    for strategy in &advice.strategies {
        assert_eq!(strategy.best.ooms, 3, "{}: 2^63 bytes and up do not fit", strategy.best.config);
        assert!(strategy.best.peak_live_bytes <= 513, "{}", strategy.best.peak_live_bytes);
    }
}
