//! The churn of the PyTorch latency script (`scripts/torch_latency/run.py`) on the simulated H200, round by
//! round: 1000 live blocks of 256 B to 8 MiB, 5000 untimed steps, then 31 rounds of 2000 steps (one step frees
//! a block and allocates one). Per round it prints the CPU time per step and the driver time per step the
//! simulated device models, so that what a short churn pays the driver (mapping and moving pages while the
//! pool settles) shows apart from the pool's own work.
//!
//! `cargo run --release -p vrampool-bench --example churn_rounds -- [CONFIG] [ROUNDS]`, where CONFIG is a
//! config string (default: the default pool, the adaptive pool), ROUNDS the number of timed rounds (default 31).

use std::sync::Arc;
use std::time::Instant;

use vrampool::{GIB, Pool, PoolSpec, SimDevice, SimDeviceConfig, StreamId};
use vrampool_bench::ChurnSequence;

/// Untimed steps before the first round.
const WARMUP_STEPS: usize = 5000;
/// Steps per timed round.
const ROUND_STEPS: usize = 2000;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = args.first().map_or("strategy=hybrid", String::as_str);
    let rounds: usize = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(31);
    let spec = PoolSpec::parse(config).unwrap_or_else(|err| panic!("config `{config}`: {err}"));
    let device = Arc::new(SimDevice::new(SimDeviceConfig::default().capacity(141 * GIB)));
    let pool = spec.build(device.clone()).unwrap_or_else(|err| panic!("config `{config}`: {err}"));
    let sequence = ChurnSequence::standard();
    let stream = StreamId(0);
    let mut live: Vec<u64> =
        sequence.initial.iter().map(|&size| pool.allocate(size, 256, stream).expect("initial block").addr).collect();
    let mut next = 0;
    let mut step = |pool: &dyn Pool| {
        let (victim, size) = sequence.steps[next % sequence.steps.len()];
        next += 1;
        pool.free(live[victim]).expect("a live block");
        live[victim] = pool.allocate(size, 256, stream).expect("room for the churn").addr;
    };
    for _ in 0..WARMUP_STEPS {
        step(&*pool);
    }
    println!("round  cpu ns/step  driver ns/step  page maps  page moves");
    let (mut cpu, mut driver) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let before = device.counters();
        let start = Instant::now();
        for _ in 0..ROUND_STEPS {
            step(&*pool);
        }
        let cpu_ns = start.elapsed().as_nanos() as u64 / ROUND_STEPS as u64;
        let after = device.counters();
        let driver_ns = (after.driver_time_ns - before.driver_time_ns) / ROUND_STEPS as u64;
        println!(
            "{round:>5}  {cpu_ns:>11}  {driver_ns:>14}  {:>9}  {:>10}",
            after.map_calls - before.map_calls,
            after.remap_calls - before.remap_calls
        );
        cpu.push(cpu_ns);
        driver.push(driver_ns);
    }
    cpu.sort_unstable();
    driver.sort_unstable();
    let stats = pool.stats();
    println!(
        "median: cpu {} ns/step, driver {} ns/step; reserved {} MiB for a peak of {} MiB allocated; fallbacks {:?}",
        cpu[cpu.len() / 2],
        driver[driver.len() / 2],
        stats.reserved_bytes.current >> 20,
        stats.allocated_bytes.peak >> 20,
        stats.fallback_reasons
    );
}
