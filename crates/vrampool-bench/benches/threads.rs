//! How throughput scales with threads: 1, 2, 4 and 8 threads on one pool, each thread its own churn of
//! 125 live blocks from 256 B to 1 MiB (so the fixed pool's 1 MiB blocks hold every size).
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
    let hybrid = HybridPool::new(sim(), HybridConfig::default().max_rounding_waste(0.125)).unwrap();
    // Let the hybrid learn its classes from the same pattern first.
    thread_throughput(&hybrid, 1, 125, MIB, Duration::from_millis(200));
    hybrid.freeze();
    let pools: [(&str, &dyn Pool); 3] = [("fixed", &fixed), ("dynamic", &dynamic), ("hybrid", &hybrid)];
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
