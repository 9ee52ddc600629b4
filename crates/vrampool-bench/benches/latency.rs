//! Latency of the three strategies on the simulated device, beside offset-allocator on the same patterns.
//!
//! `cargo bench -p vrampool-bench --bench latency`. Churn steps are one free plus one allocation.

use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use vrampool::{
    DynamicConfig, DynamicPool, FixedConfig, FixedPool, HybridConfig, HybridPool, KIB, MIB, Pool, SimDevice,
};
use vrampool_bench::{ChurnSequence, OffsetReference, Pattern, PoolChurn, run_pair};

fn fixed_pool(block_size: u64, count: u64) -> FixedPool {
    FixedPool::new(Arc::new(SimDevice::default()), FixedConfig::default().block_size(block_size).block_count(count))
        .unwrap()
}

fn dynamic_pool() -> DynamicPool {
    DynamicPool::new(Arc::new(SimDevice::default()), DynamicConfig::default()).unwrap()
}

/// A hybrid that learns its classes from what it is given until `freeze` (warm-up ends by that call only).
fn learning_hybrid() -> HybridPool {
    let config = HybridConfig::default().warmup_requests(u64::MAX).max_rounding_waste(0.125);
    HybridPool::new(Arc::new(SimDevice::default()), config).unwrap()
}

/// A hybrid that has learned its classes from the churn itself (8192 steps).
fn hybrid_pool() -> HybridPool {
    let pool = learning_hybrid();
    let mut warm = PoolChurn::new(&pool, ChurnSequence::standard());
    warm.run(8192);
    drop(warm);
    pool.freeze();
    pool
}

fn pairs(c: &mut Criterion) {
    let fixed = fixed_pool(4 * MIB, 2048);
    let dynamic = dynamic_pool();
    let hybrid = learning_hybrid();
    let sizes = [4 * KIB, 64 * KIB, MIB];
    // The hybrid learns a class for each pair size first.
    for size in sizes {
        run_pair(&hybrid, size, 2000);
    }
    hybrid.freeze();
    for size in sizes {
        let mut group = c.benchmark_group(Pattern::Pair { size }.name());
        group.bench_function("fixed", |b| b.iter(|| run_pair(&fixed, size, 1)));
        group.bench_function("dynamic", |b| b.iter(|| run_pair(&dynamic, size, 1)));
        group.bench_function("hybrid", |b| b.iter(|| run_pair(&hybrid, size, 1)));
        let mut reference = OffsetReference::default();
        group.bench_function("offset-allocator", |b| {
            b.iter_custom(|iters| {
                let ns = reference.run(Pattern::Pair { size }, 1, iters);
                std::time::Duration::from_nanos((ns * iters as f64) as u64)
            })
        });
        group.finish();
    }
}

fn churn(c: &mut Criterion) {
    let mut group = c.benchmark_group("churn");
    let fixed = fixed_pool(8 * MIB, 1024);
    let dynamic = dynamic_pool();
    let hybrid = hybrid_pool();
    let pools: [(&str, &dyn Pool); 3] = [("fixed", &fixed), ("dynamic", &dynamic), ("hybrid", &hybrid)];
    for (name, pool) in pools {
        let mut churn = PoolChurn::new(pool, ChurnSequence::standard());
        group.bench_function(name, |b| b.iter_batched(|| (), |()| churn.run(1), BatchSize::SmallInput));
    }
    let mut reference = OffsetReference::default();
    group.bench_function("offset-allocator", |b| {
        b.iter_custom(|iters| {
            let ns = reference.run(Pattern::STANDARD_CHURN, 1, iters.max(1));
            std::time::Duration::from_nanos((ns * iters as f64) as u64)
        })
    });
    group.finish();
}

criterion_group!(benches, pairs, churn);
criterion_main!(benches);
