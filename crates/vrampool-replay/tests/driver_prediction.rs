//! The simulated device predicts what the H200's driver reports.
//!
//! Each bundled trace was replayed through a fixed pool on an H200 (driver 580.159.04) with
//! `vrampool replay TRACE --strategy fixed --config CONFIG --on cuda-vm --check-against-sim`, and the
//! driver's peak used bytes (`cuMemGetInfo`, beyond those in use before the replay) were read at every new
//! high of the pool's reserved bytes. The fixed pool's peaks are its fallback segments, whose sizes are
//! not whole 2 MiB pages; `cuMemAlloc` rounds them up. A replay on the simulated device must predict those
//! readings to the byte, with the configs `vrampool compare` chose for the run.

use std::path::PathBuf;

use vrampool::PoolSpec;
use vrampool_replay::{ReplayOptions, ReplayPlan, replay};

fn bundled(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../traces").join(name)
}

#[test]
fn fixed_pool_replays_predict_the_drivers_peak_to_the_byte() {
    let measured = [
        ("resnet_train_fixed.pickle.gz", "strategy=fixed,block_size=104973056,block_count=854", 92_023_029_760u64),
        ("gpt_train_varlen.pickle.gz", "strategy=fixed,block_size=64224KiB,block_count=962", 99_736_354_816),
        ("gpt_serve.pickle.gz", "strategy=fixed,block_size=6096KiB,block_count=196", 1_809_842_176),
    ];
    for (trace, config, driver_peak) in measured {
        let trace_data = vrampool_trace::read_trace(bundled(trace), &Default::default()).unwrap();
        let plan = ReplayPlan::from_trace(&trace_data);
        let result = replay(&plan, &PoolSpec::parse(config).unwrap(), &ReplayOptions::default()).unwrap();
        assert_eq!(result.peak_reserved_bytes, driver_peak, "{trace} with {config}");
    }
}
