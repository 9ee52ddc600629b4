//! How throughput scales with threads: 1, 2, 4 and 8 threads on one pool, each thread its own churn of
//! 125 live blocks from 256 B to 1 MiB (so the fixed pool's 1 MiB blocks hold every size).
//!
//! The hybrid runs twice: with its classes learned from one thread's churn (their capacities sized for 125
//! live blocks, so that with more threads the requests past them go to the region: a workload that grows
//! after its warm-up), and learned from eight threads' (sized for all of them).
//!
//! `cargo bench -p vrampool-bench --bench threads` prints operations per second and the ratio to one thread.

use std::sync::Arc;
use std::time::Duration;

use vrampool::{DynamicConfig, DynamicPool, FixedConfig, FixedPool, HybridConfig, HybridPool, MIB, Pool, SimDevice};
use vrampool_bench::thread_throughput;

fn main() {
    let duration =
        Duration::from_millis(std::env::var("VRAMPOOL_BENCH_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000));
    let sim = || Arc::new(SimDevice::default());
    let fixed = FixedPool::new(sim(), FixedConfig::default().block_size(MIB).block_count(2048)).unwrap();
    let dynamic = DynamicPool::new(sim(), DynamicConfig::default()).unwrap();
    // Each hybrid learns its classes from the same pattern first, on one thread or on eight.
    let learned_on = |threads: usize| {
        let hybrid = HybridPool::new(sim(), HybridConfig::default().max_rounding_waste(0.125)).unwrap();
        thread_throughput(&hybrid, threads, 125, MIB, Duration::from_millis(200));
        hybrid.freeze();
        hybrid
    };
    let hybrid = learned_on(1);
    let hybrid_eight = learned_on(8);
    let pools: [(&str, &dyn Pool); 4] = [
        ("fixed", &fixed),
        ("dynamic", &dynamic),
        ("hybrid", &hybrid),
        ("hybrid, classes learned on 8 threads", &hybrid_eight),
    ];
    println!("| strategy | threads | ops/s | vs 1 thread |");
    println!("| --- | --- | --- | --- |");
    for (name, pool) in pools {
        let mut one = 0.0;
        for threads in [1, 2, 4, 8] {
            let result = thread_throughput(pool, threads, 125, MIB, duration);
            if threads == 1 {
                one = result.ops_per_second;
            }
            println!("| {name} | {threads} | {:.3e} | {:.2} |", result.ops_per_second, result.ops_per_second / one);
        }
    }
}
