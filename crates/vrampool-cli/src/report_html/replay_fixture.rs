//! Replay results for the report's tests: a real replay of a small trace, whose figures a test then sets
//! as it needs.

use vrampool::PoolSpec;
use vrampool_replay::{ReplayOptions, ReplayPlan, ReplayResult, replay};
use vrampool_trace::{Event, EventKind, Trace};

/// The replay of a trace of three allocations and their frees through the pool `config` describes.
pub fn replay_result(config: &str) -> ReplayResult {
    let mut events = Vec::new();
    for (i, size) in [4096u64, 64 << 10, 1 << 20].into_iter().enumerate() {
        events.push(Event::new(i as i64, EventKind::Alloc, 0x1000 * (i as u64 + 1), size, 0));
    }
    for i in 0..3u64 {
        events.push(Event::new(10 + i as i64, EventKind::Free, 0x1000 * (i + 1), 0, 0));
    }
    let trace = Trace { name: "t".into(), events, ..Trace::default() };
    let spec = PoolSpec::parse(config).expect("a test's config parses");
    replay(&ReplayPlan::from_trace(&trace).unwrap(), &spec, &ReplayOptions::default()).expect("the small trace replays")
}
