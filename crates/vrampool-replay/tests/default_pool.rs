//! The default pool on every bundled trace, with nothing tuned: on a simulated GPU that runs 5 ms behind the
//! program, as a training GPU does, it reserves at most 1/0.97 of the peak of live bytes.

use std::path::PathBuf;

use vrampool::{PoolSpec, Strategy};
use vrampool_replay::{ReplayOptions, ReplayPlan, replay};

/// The utilization the default reaches on every trace, at least.
const UTILIZATION: f64 = 0.97;

#[test]
fn the_default_reaches_the_target_utilization_on_every_bundled_trace() {
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
    for path in paths {
        let trace = vrampool_trace::read_trace(&path, &Default::default()).unwrap();
        let plan = ReplayPlan::from_trace(&trace).unwrap();
        let result = replay(&plan, &spec, &options).unwrap();
        assert_eq!(result.ooms, 0, "{}", trace.name);
        if result.utilization < UTILIZATION {
            short.push(format!("{}: {:.4}", trace.name, result.utilization));
        }
    }
    assert!(short.is_empty(), "below {UTILIZATION}: {short:?}");
}
