//! Runs one pattern on one strategy for a number of operations, untimed: for profilers
//! (`valgrind --tool=callgrind`, `perf`), which count what the pool does per operation.
//!
//! `cargo run --release -p vrampool-bench --example run_pattern -- fixed pair-4k 1000000`

use std::sync::Arc;

use vrampool::{
    AdaptiveConfig, AdaptivePool, DynamicConfig, DynamicPool, FixedConfig, FixedPool, HybridConfig, HybridPool, MIB,
    Pool, SimDevice,
};
use vrampool_bench::{ChurnSequence, PoolChurn, run_pair};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (strategy, pattern) = (args.first().map_or("fixed", |s| s), args.get(1).map_or("pair-4k", |s| s));
    let ops: u64 = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(1_000_000);
    let sim = || Arc::new(SimDevice::default());
    let pool: Box<dyn Pool> = match strategy {
        "fixed" => {
            Box::new(FixedPool::new(sim(), FixedConfig::default().block_size(64 * MIB).block_count(256)).unwrap())
        }
        "dynamic" => Box::new(DynamicPool::new(sim(), DynamicConfig::default()).unwrap()),
        "hybrid" => {
            let config = HybridConfig::default().warmup_requests(u64::MAX).max_rounding_waste(0.125);
            let pool = HybridPool::new(sim(), config).unwrap();
            run_pair(&pool, 4096, 500);
            run_pair(&pool, MIB, 500);
            PoolChurn::new(&pool, ChurnSequence::standard()).run(8192);
            pool.freeze();
            Box::new(pool)
        }
        "adaptive" => {
            let pool = AdaptivePool::new(sim(), AdaptiveConfig::default()).unwrap();
            PoolChurn::new(&pool, ChurnSequence::standard()).run(8192);
            run_pair(&pool, 4096, 500);
            run_pair(&pool, MIB, 500);
            Box::new(pool)
        }
        other => panic!("unknown strategy {other}"),
    };
    match pattern {
        "pair-4k" => run_pair(&*pool, 4096, ops),
        "pair-1m" => run_pair(&*pool, MIB, ops),
        "pair-64m" => run_pair(&*pool, 64 * MIB, ops),
        "churn" => PoolChurn::new(&*pool, ChurnSequence::standard()).run(ops),
        other => panic!("unknown pattern {other}"),
    }
    println!("{:?}", pool.stats());
}
