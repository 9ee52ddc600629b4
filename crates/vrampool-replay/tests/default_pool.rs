//! The default pool on every bundled trace, with nothing tuned: on a simulated GPU that runs 5 ms behind the
//! program, as a training GPU does, it reserves at most 1/0.97 of the peak of live bytes, and no more than
//! PyTorch's expandable segments would for the same requests (as modelled).

use std::path::PathBuf;

use vrampool::{CostModel, PoolSpec, Strategy};
use vrampool_replay::{ReplayOptions, ReplayPlan, expandable_segments, replay};

/// The utilization the default reaches on every trace, at least.
const UTILIZATION: f64 = 0.97;

#[test]
fn the_default_reaches_the_target_utilization_and_reserves_less_than_expandable_segments_on_every_bundled_trace() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../traces");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().ends_with(".pickle.gz"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 6, "the six bundled traces: {paths:?}");
    let spec = PoolSpec::default();
    assert_eq!(spec.strategy, Strategy::Adaptive);
    let options = ReplayOptions { gpu_lag_us: 5_000, ..ReplayOptions::default() };
    let mut short = Vec::new();
    let mut over = Vec::new();
    for path in paths {
        let trace = vrampool_trace::read_trace(&path, &Default::default()).unwrap();
        let plan = ReplayPlan::from_trace(&trace).unwrap();
        let result = replay(&plan, &spec, &options).unwrap();
        assert_eq!(result.ooms, 0, "{}", trace.name);
        if result.utilization < UTILIZATION {
            short.push(format!("{}: {:.4}", trace.name, result.utilization));
        }
        let expandable = expandable_segments(&plan, &CostModel::default());
        assert_eq!(expandable.peak_live_bytes, result.peak_live_bytes, "{}", trace.name);
        if result.peak_reserved_bytes > expandable.peak_reserved_bytes {
            over.push(format!("{}: {} > {}", trace.name, result.peak_reserved_bytes, expandable.peak_reserved_bytes));
        }
    }
    assert!(short.is_empty(), "below {UTILIZATION}: {short:?}");
    assert!(over.is_empty(), "more reserved than expandable segments: {over:?}");
}
