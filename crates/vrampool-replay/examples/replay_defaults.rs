//! Replays each bundled trace through each strategy's default configuration and prints the figures.
//!
//! `cargo run --release -p vrampool-replay --example replay_defaults [TRACE...]`

use std::time::Instant;

use vrampool::{PoolSpec, Strategy};
use vrampool_replay::{ComparisonRow, ReplayOptions, ReplayPlan, replay};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut paths: Vec<String> = std::env::args().skip(1).collect();
    if paths.is_empty() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../traces");
        for name in ["resnet_train_fixed", "gpt_train_varlen", "gpt_serve"] {
            paths.push(format!("{dir}/{name}.pickle.gz"));
        }
    }
    for path in paths {
        let trace = vrampool_trace::read_trace(&path, &Default::default())?;
        let plan = ReplayPlan::from_trace(&trace)?;
        let pytorch = ComparisonRow::pytorch(&trace).map_or_else(
            || "no PyTorch figures".into(),
            |p| {
                format!(
                    "pytorch utilization {:.3} ({} MiB reserved)",
                    p.utilization.unwrap_or(0.0),
                    p.peak_reserved_bytes >> 20
                )
            },
        );
        println!("{}: {} events, {pytorch}", trace.name, trace.events.len());
        for strategy in Strategy::ALL {
            let spec = PoolSpec { strategy, ..PoolSpec::default() };
            let started = Instant::now();
            let r = replay(&plan, &spec, &ReplayOptions::default())?;
            println!(
                "  {:8} util {:.3} live {:>6} MiB reserved {:>6} MiB fallbacks {:>7} ooms {} calls {:>6} driver {:>9.1} us  {:>6.1} ns/event  ({:.2} s)",
                strategy.name(),
                r.utilization,
                r.peak_live_bytes >> 20,
                r.peak_reserved_bytes >> 20,
                r.fallbacks,
                r.ooms,
                r.backend_calls,
                r.driver_time_us,
                r.replay_ns_per_event,
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}
