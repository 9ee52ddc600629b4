//! `vrampool bench`: the CPU latency of the strategies and of the default on the simulated device, beside
//! offset-allocator on the same patterns, in one run.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use vrampool::{
    AdaptiveConfig, AdaptivePool, DynamicConfig, DynamicPool, FixedConfig, FixedPool, HybridConfig, HybridPool, MIB,
    Pool, SimDevice,
};
use vrampool_bench::{ChurnSequence, OffsetReference, Pattern, PoolChurn, run_pair, run_pool};

use crate::cli::BenchArgs;
use crate::error::Result;
use crate::table::Table;

/// Batches per measurement; the median is reported.
const BATCHES: usize = 11;

/// One measurement.
#[derive(Debug, Serialize)]
struct Measurement {
    strategy: String,
    pattern: String,
    ns_per_op: f64,
}

/// Operations per batch so that a measurement takes about `seconds`, from a short trial at `trial_ns`.
fn ops_for(seconds: f64, trial_ns: f64) -> u64 {
    ((seconds * 1e9 / BATCHES as f64 / trial_ns.max(1.0)) as u64).clamp(100, 5_000_000)
}

/// Runs every pattern on every pool and on offset-allocator, and prints the medians.
pub fn run(args: &BenchArgs, out: &mut dyn Write) -> Result<()> {
    let started = Instant::now();
    let sim = || Arc::new(SimDevice::default());
    // Blocks of 8 MiB hold every size of every pattern.
    let fixed = FixedPool::new(sim(), FixedConfig::default().block_size(8 * MIB).block_count(2048))?;
    let dynamic = DynamicPool::new(sim(), DynamicConfig::default())?;
    // The bound on rounding waste that lets 128 classes cover log-uniform churn sizes; warm-up ends at
    // `freeze` below, after every pattern has been seen.
    let hybrid = HybridPool::new(sim(), HybridConfig::default().warmup_requests(u64::MAX).max_rounding_waste(0.125))?;
    // The hybrid learns its classes from the patterns themselves, as it would live.
    run_pair(&hybrid, 4096, 500);
    run_pair(&hybrid, MIB, 500);
    PoolChurn::new(&hybrid, ChurnSequence::standard()).run(8192);
    hybrid.freeze();
    // The default, as it is: it learns its classes from its first requests, at its own bounds, here those of
    // the churn.
    let adaptive = AdaptivePool::new(sim(), AdaptiveConfig::default())?;
    PoolChurn::new(&adaptive, ChurnSequence::standard()).run(8192);
    run_pair(&adaptive, 4096, 500);
    run_pair(&adaptive, MIB, 500);
    let pools: [(&str, &dyn Pool); 4] =
        [("fixed", &fixed), ("dynamic", &dynamic), ("hybrid", &hybrid), ("adaptive", &adaptive)];
    let per_measurement = (args.seconds * 0.9 / (Pattern::REPORTED.len() * 5) as f64).max(0.01);
    let mut results = Vec::new();
    let mut reference = OffsetReference::default();
    for pattern in Pattern::REPORTED {
        for (name, pool) in pools {
            let trial = run_pool(pool, pattern, 1, 1000);
            let ns = run_pool(pool, pattern, BATCHES, ops_for(per_measurement, trial));
            results.push(Measurement { strategy: name.into(), pattern: pattern.name(), ns_per_op: ns });
        }
        let trial = reference.run(pattern, 1, 1000);
        let ns = reference.run(pattern, BATCHES, ops_for(per_measurement, trial));
        results.push(Measurement { strategy: "offset-allocator".into(), pattern: pattern.name(), ns_per_op: ns });
    }
    if args.json {
        outln!(out, "{}", serde_json::to_string_pretty(&results).expect("plain data"))?;
        return Ok(());
    }
    let mut table = Table::new(&["strategy", "pair-4k ns", "pair-1m ns", "churn ns"]);
    for name in ["fixed", "dynamic", "hybrid", "adaptive", "offset-allocator"] {
        let cell = |pattern: Pattern| {
            results
                .iter()
                .find(|m| m.strategy == name && m.pattern == pattern.name())
                .map_or("-".into(), |m| format!("{:.1}", m.ns_per_op))
        };
        table.row(vec![
            name.into(),
            cell(Pattern::REPORTED[0]),
            cell(Pattern::REPORTED[1]),
            cell(Pattern::REPORTED[2]),
        ]);
    }
    outln!(out, "{}", table.render())?;
    outln!(
        out,
        "median ns per operation over {BATCHES} batches (pair: allocate+free; churn: one free and one allocation, \
         1000 live blocks of 256 B to 8 MiB); simulated device; {:.1} s",
        started.elapsed().as_secs_f64()
    )?;
    Ok(())
}
