//! Traces at the edges of the numbers they hold: sizes of 0, 1, 2^63 and 2^64 - 1, times from -2^63 to
//! 2^63 - 1, the highest addresses and streams. Planning, comparing and advising give sound figures on them:
//! nothing wraps (a debug build panics on a wrap, so these tests also catch one that a release build hides).

use vrampool::Strategy;
use vrampool_replay::{ComparisonRow, ReplayOptions, ReplayPlan, SizeProfile, advise, candidates};
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

#[test]
fn times_from_the_lowest_to_the_highest_give_a_duration_that_does_not_wrap() {
    let mut events = pair(i64::MIN, 0x1000, 4096, 0).to_vec();
    events.extend(pair(0, 0x2000, 4096, u64::MAX));
    events.extend(pair(i64::MAX - 1, u64::MAX - 4095, 4096, 0));
    let plan = ReplayPlan::from_trace(&trace(events)).unwrap();
    assert_eq!(plan.duration_us, i64::MAX);
    for options in [ReplayOptions::default(), ReplayOptions { gpu_lag_us: 60_000_000, ..ReplayOptions::default() }] {
        let advice = advise(&plan, &Strategy::ALL, &options, &|_, _| {}).unwrap();
        assert!(advice.objective.driver_budget_us > 0.0);
        assert!(advice.reason.ends_with("of 1% of the trace's 9223372036854.8 s"), "{}", advice.reason);
    }
    // Times that go backwards make no negative duration.
    let backwards = ReplayPlan::from_trace(&trace(vec![
        Event::new(i64::MAX, EventKind::Alloc, 0x1000, 4096, 0),
        Event::new(i64::MIN, EventKind::Free, 0x1000, 4096, 0),
    ]))
    .unwrap();
    assert_eq!(backwards.duration_us, 0);
    let advice = advise(&backwards, &Strategy::ALL, &ReplayOptions::default(), &|_, _| {}).unwrap();
    assert!(advice.reason.ends_with("of 1% of the trace's 0.0 s"), "{}", advice.reason);
}

#[test]
fn pytorch_figures_of_the_largest_segments_saturate() {
    // Mapping 2^64 - 1 bytes costs some 10^17 ns in the cost model: a few hundred such calls pass 2^64 ns.
    let mut events = vec![Event::new(0, EventKind::SegmentAlloc, 0, u64::MAX, 0)];
    for _ in 0..500 {
        events.push(Event::new(0, EventKind::SegmentMap, 0, u64::MAX, 0));
        events.push(Event::new(1, EventKind::SegmentUnmap, 0, u64::MAX, 0));
    }
    events.push(Event::new(1, EventKind::SegmentFree, 0, u64::MAX, 0));
    events.extend(pair(2, 0x1000, u64::MAX, 0));
    let row = ComparisonRow::pytorch(&trace(events)).unwrap();
    assert_eq!(row.peak_reserved_bytes, u64::MAX);
    assert_eq!(row.peak_live_bytes, u64::MAX);
    assert_eq!(row.backend_calls, Some(1002));
    assert_eq!(row.driver_time_us, Some(u64::MAX as f64 / 1000.0));
}

/// The simulated device counts the time the host waits in nanoseconds, from a lag in microseconds: the longest
/// lag saturates there instead of wrapping (the command refuses such a lag before it reaches the device).
#[test]
fn the_longest_lag_replays_without_wrapping_the_blocked_time() {
    let mut events = pair(i64::MIN, 0x1000, 4096, 0).to_vec();
    events.extend(pair(i64::MAX - 1, 0x2000, 64 << 20, 0));
    let plan = ReplayPlan::from_trace(&trace(events)).unwrap();
    let options = ReplayOptions { gpu_lag_us: u64::MAX, ..ReplayOptions::default() };
    advise(&plan, &Strategy::ALL, &options, &|_, _| {}).unwrap();
}
