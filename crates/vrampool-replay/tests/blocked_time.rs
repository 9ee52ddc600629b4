//! On a simulated GPU that runs behind the program, a replay counts the time the program was blocked waiting
//! for it: a wait for idle pages lasts what the GPU had left of the work it waits for, never more than the lag.

use std::path::PathBuf;

use vrampool::PoolSpec;
use vrampool_replay::{ReplayOptions, ReplayPlan, replay};

fn bundled(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../traces").join(name)
}

#[test]
fn waits_for_idle_pages_block_for_at_most_the_lag_each() {
    let trace = vrampool_trace::read_trace(bundled("resnet_train_fixed.pickle.gz"), &Default::default()).unwrap();
    let plan = ReplayPlan::from_trace(&trace).unwrap();
    let hybrid = PoolSpec::parse("strategy=hybrid,page_size=16MiB").unwrap();
    let idle = replay(&plan, &hybrid, &ReplayOptions::default()).unwrap();
    assert_eq!((idle.stats.event_waits, idle.stats.synchronizations, idle.host_blocked_us), (0, 0, 0.0));
    let lag_us = 5_000;
    let behind = replay(&plan, &hybrid, &ReplayOptions { gpu_lag_us: lag_us, ..ReplayOptions::default() }).unwrap();
    let stats = &behind.stats;
    assert!(stats.event_waits > 0, "the pool waited for idle pages: {stats:?}");
    assert_eq!(stats.synchronizations, 0, "one stream: each wait is for one event");
    assert!(behind.host_blocked_us > 0.0);
    assert!(
        behind.host_blocked_us <= (stats.event_waits * lag_us) as f64,
        "{} µs blocked in {} waits",
        behind.host_blocked_us,
        stats.event_waits
    );
    assert_eq!(behind.peak_reserved_bytes, idle.peak_reserved_bytes, "waiting reserves what an idle GPU would");
}

/// Aliasing pages still in use (the default) instead of waiting to move them: on the same lagging GPU the
/// program is blocked for less, and reserves the same.
#[test]
fn aliasing_pages_in_use_blocks_for_less_than_waiting_for_them() {
    let trace = vrampool_trace::read_trace(bundled("resnet_train_fixed.pickle.gz"), &Default::default()).unwrap();
    let plan = ReplayPlan::from_trace(&trace).unwrap();
    let behind = ReplayOptions { gpu_lag_us: 5_000, ..ReplayOptions::default() };
    let run = |config: &str| replay(&plan, &PoolSpec::parse(config).unwrap(), &behind).unwrap();
    let aliasing = run("strategy=hybrid,page_size=16MiB");
    let waiting = run("strategy=hybrid,page_size=16MiB,alias_in_use=false");
    assert!(aliasing.stats.chunks_aliased > 0, "{:?}", aliasing.stats);
    assert_eq!(waiting.stats.chunks_aliased, 0);
    assert!(
        aliasing.host_blocked_us < waiting.host_blocked_us / 2.0,
        "blocked {} µs aliasing, {} µs waiting",
        aliasing.host_blocked_us,
        waiting.host_blocked_us
    );
    assert_eq!(aliasing.peak_reserved_bytes, waiting.peak_reserved_bytes);
}
