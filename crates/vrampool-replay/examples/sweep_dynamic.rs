//! Prints the dynamic pool's figures on each bundled trace across growth factors and idle-chunk reclaim.
//!
//! `cargo run --release -p vrampool-replay --example sweep_dynamic`

use vrampool::{PoolSpec, Strategy};
use vrampool_replay::{ReplayOptions, ReplayPlan, replay};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../traces");
    for name in ["resnet_train_fixed", "gpt_train_varlen", "gpt_serve"] {
        let trace = vrampool_trace::read_trace(format!("{dir}/{name}.pickle.gz"), &Default::default())?;
        let plan = ReplayPlan::from_trace(&trace)?;
        println!("{name}");
        for growth in [1.01, 1.05, 1.1, 1.25, 1.5] {
            for reclaim in [true, false] {
                for initial in ["2MiB", "256MiB"] {
                    let text = format!(
                        "strategy=dynamic,growth_factor={growth},reclaim_idle={reclaim},initial_size={initial}"
                    );
                    let spec = PoolSpec::parse(&text)?;
                    assert_eq!(spec.strategy, Strategy::Dynamic);
                    let r = replay(&plan, &spec, &ReplayOptions::default())?;
                    println!(
                        "  growth {growth:<5} reclaim {reclaim:<5} initial {initial:<7} util {:.4} reserved {:>6} MiB calls {:>6} moved {:>6} driver {:>9.1} us",
                        r.utilization,
                        r.peak_reserved_bytes >> 20,
                        r.backend_calls,
                        r.stats.chunks_moved,
                        r.driver_time_us
                    );
                }
            }
        }
    }
    Ok(())
}
