//! `vrampool bench`: the CPU latency of the strategies and of the default on the simulated device, beside
//! offset-allocator on the same patterns, in one run.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use vrampool::{
    AdaptiveConfig, AdaptivePool, DynamicConfig, DynamicPool, FixedConfig, FixedPool, HybridConfig, HybridPool, MIB,
    Pool, SimDevice,
};
use vrampool_bench::{
    ChurnSequence, HANDOFF_EVERY, OffsetReference, Pattern, PoolChurn, churn_on_pools, run_pair, run_pool,
};

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

/// Runs every pattern on every pool and on offset-allocator, and prints the medians; with `--threads`, the
/// churn on several threads at once ([`run_threads`]).
pub fn run(args: &BenchArgs, out: &mut dyn Write) -> Result<()> {
    if let Some(threads) = args.threads {
        return run_threads(args, usize::from(threads), out);
    }
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

/// Live blocks per thread of the churn on several threads: 125, so that sixteen threads hold about as many
/// blocks (and bytes) as the one-thread churn's 1000 live blocks, twice over.
const LIVE_PER_THREAD: usize = 125;

/// Rounds of every thread count with `--threads`, taking turns, so that a slow spell of the machine falls on
/// one round of each count rather than on one count: the median round is reported.
const THREAD_ROUNDS: usize = 3;

/// One thread count of one pool, with `--threads`: its median throughput over the rounds, and what the pool
/// did meanwhile in that round.
#[derive(Clone, Debug, Serialize)]
struct Scaling {
    strategy: String,
    threads: usize,
    /// The median over the rounds.
    ops_per_second: f64,
    /// Each round's, in the order they ran.
    rounds_ops_per_second: Vec<f64>,
    /// The median over the rounds against the median of one thread's rounds.
    vs_one_thread: f64,
    /// The share of the timed allocations that the dynamic pool or region served (the hybrid's requests no
    /// class served from a cached block or a new one; the fixed pool's fallbacks).
    region_share: f64,
    /// Events recorded to order a block's reuse on another stream, per 1,000 timed allocations.
    events_per_1000: f64,
    /// The dynamic pool's or region's shards open at the end (none for the fixed pool).
    shards: Option<usize>,
    /// The most bytes the pool reserved, warm-up and timed run together, against the most bytes live.
    peak_reserved_bytes: u64,
    /// The most bytes live at once.
    peak_live_bytes: u64,
}

/// The thread counts timed up to `most`: the powers of two below it, and it.
fn thread_counts(most: usize) -> Vec<usize> {
    let mut counts: Vec<usize> =
        std::iter::successors(Some(1usize), |n| n.checked_mul(2)).take_while(|&n| n < most).collect();
    counts.push(most);
    counts
}

/// One round of the churn on `threads` threads of a new pool of strategy `name` (a new pool per thread for
/// [`APART`]), warmed by a short run first.
fn thread_round(name: &str, threads: usize, per_measurement: Duration) -> Result<Scaling> {
    let pool = ThreadsPool::new(name, threads)?;
    let pools = pool.pools();
    churn_on_pools(&pools, threads, LIVE_PER_THREAD, 8 * MIB, per_measurement / 4);
    let before = pool.stats();
    let result = churn_on_pools(&pools, threads, LIVE_PER_THREAD, 8 * MIB, per_measurement);
    let after = pool.stats();
    let allocations = (after.allocations - before.allocations).max(1) as f64;
    let in_region = match pool {
        ThreadsPool::Dynamic(_) => allocations,
        _ => (after.fallbacks - before.fallbacks) as f64,
    };
    Ok(Scaling {
        strategy: name.into(),
        threads,
        ops_per_second: result.ops_per_second,
        rounds_ops_per_second: Vec::new(),
        vs_one_thread: 1.0,
        region_share: in_region / allocations,
        events_per_1000: 1000.0 * (after.events_recorded - before.events_recorded) as f64 / allocations,
        shards: pool.shards(),
        peak_reserved_bytes: after.peak_reserved_bytes,
        peak_live_bytes: after.peak_live_bytes,
    })
}

/// The round of median throughput among `rounds` (not empty), with every round's throughput.
fn median_round(mut rounds: Vec<Scaling>) -> Scaling {
    let all: Vec<f64> = rounds.iter().map(|r| r.ops_per_second).collect();
    rounds.sort_by(|a, b| a.ops_per_second.total_cmp(&b.ops_per_second));
    let mut median = rounds.swap_remove(rounds.len() / 2);
    median.rounds_ops_per_second = all;
    median
}

/// Times the churn on 1, 2, 4, ... up to `most` threads at once on each strategy and the default
/// ([`vrampool_bench::shared_churn_throughput`]: each thread on a stream of its own, `LIVE_PER_THREAD` live
/// blocks of 256 B to 8 MiB, one free in eight done by the next thread), [`THREAD_ROUNDS`] rounds of every
/// thread count taking turns, and prints the median operations per second and its ratio to one thread's.
/// Each round's pool is new, and warmed by a short run first.
fn run_threads(args: &BenchArgs, most: usize, out: &mut dyn Write) -> Result<()> {
    let started = Instant::now();
    let counts = thread_counts(most);
    let names = ["fixed", "dynamic", "hybrid", "adaptive", APART];
    let measurements = names.len() * counts.len() * THREAD_ROUNDS;
    let per_measurement = Duration::from_secs_f64((args.seconds * 0.8 / measurements as f64).max(0.02));
    let mut results: Vec<Scaling> = Vec::new();
    for name in names {
        let mut rounds: Vec<Vec<Scaling>> = vec![Vec::new(); counts.len()];
        for _ in 0..THREAD_ROUNDS {
            for (i, &threads) in counts.iter().enumerate() {
                rounds[i].push(thread_round(name, threads, per_measurement)?);
            }
        }
        let medians: Vec<Scaling> = rounds.into_iter().map(median_round).collect();
        let one = medians[0].ops_per_second;
        results.extend(medians.into_iter().map(|m| Scaling { vs_one_thread: m.ops_per_second / one, ..m }));
    }
    if args.json {
        outln!(out, "{}", serde_json::to_string_pretty(&results).expect("plain data"))?;
        return Ok(());
    }
    let mut table = Table::new(&[
        "strategy",
        "threads",
        "M ops/s",
        "rounds",
        "vs 1 thread",
        "in region",
        "events/1k",
        "shards",
        "peak live MiB",
        "peak reserved MiB",
    ]);
    for r in &results {
        table.row(vec![
            r.strategy.clone(),
            r.threads.to_string(),
            format!("{:.2}", r.ops_per_second / 1e6),
            r.rounds_ops_per_second.iter().map(|ops| format!("{:.1}", ops / 1e6)).collect::<Vec<_>>().join(" "),
            format!("{:.2}x", r.vs_one_thread),
            format!("{:.1}%", 100.0 * r.region_share),
            format!("{:.1}", r.events_per_1000),
            r.shards.map_or("-".into(), |n| n.to_string()),
            (r.peak_live_bytes / MIB).to_string(),
            (r.peak_reserved_bytes / MIB).to_string(),
        ]);
    }
    outln!(out, "{}", table.render())?;
    outln!(
        out,
        "a churn on each thread at once, each on a stream of its own ({LIVE_PER_THREAD} live blocks of 256 B to 8 \
         MiB, one free in {HANDOFF_EVERY} done by the next thread); operations (allocations and frees) per second \
         of all threads together, the median of {THREAD_ROUNDS} rounds of every thread count taking turns (rounds: \
         each round's, in order), against one thread's median; in region: the share of allocations the dynamic pool or region served (the \
         fixed pool's: its fallbacks); events/1k: events recorded to reuse a block on another stream, per 1,000 \
         allocations; shards: the dynamic pool's or region's shards open; peak live and reserved: the most bytes \
         live and reserved at once over the warm-up and the timed run (these four of the median round); {APART}: the \
         hybrid with a pool per thread, each handed block freed into its own pool, nothing of a pool shared \
         between the threads that allocate from it (its peaks: the sum of the pools'); {} CPUs; simulated device; {:.1} s",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        started.elapsed().as_secs_f64()
    )?;
    Ok(())
}

/// The row of the hybrid pool with a pool per thread: the same churn with nothing of a pool shared between
/// the threads that allocate from it (the blocks handed over are freed into their own pool), what the
/// machine gives where nothing is shared.
const APART: &str = "hybrid, a pool per thread";

/// A pool of the churn on several threads, of its own type, so that its shards can be read.
enum ThreadsPool {
    Fixed(Box<FixedPool>),
    Dynamic(DynamicPool),
    Hybrid(HybridPool),
    Adaptive(AdaptivePool),
    /// A hybrid pool per thread.
    Apart(Vec<HybridPool>),
}

/// What the churn's pools did, summed over them.
#[derive(Clone, Copy, Debug, Default)]
struct ChurnCounts {
    allocations: u64,
    fallbacks: u64,
    events_recorded: u64,
    /// The sum of the pools' peaks (each pool's own, not necessarily at once).
    peak_reserved_bytes: u64,
    peak_live_bytes: u64,
}

impl ThreadsPool {
    /// A new pool of strategy `name` on a simulated H200 (for [`APART`], one for each of `threads` threads,
    /// each on a simulated device of its own): the fixed pool's blocks of 8 MiB hold every size; the others
    /// as configured by default.
    fn new(name: &str, threads: usize) -> Result<Self> {
        let sim = || Arc::new(SimDevice::default());
        Ok(match name {
            "fixed" => {
                let config = FixedConfig::default().block_size(8 * MIB).block_count(4096);
                ThreadsPool::Fixed(Box::new(FixedPool::new(sim(), config)?))
            }
            "dynamic" => ThreadsPool::Dynamic(DynamicPool::new(sim(), DynamicConfig::default())?),
            "hybrid" => ThreadsPool::Hybrid(HybridPool::new(sim(), HybridConfig::default())?),
            APART => ThreadsPool::Apart(
                (0..threads.max(1))
                    .map(|_| HybridPool::new(sim(), HybridConfig::default()))
                    .collect::<vrampool::Result<_>>()?,
            ),
            _ => ThreadsPool::Adaptive(AdaptivePool::new(sim(), AdaptiveConfig::default())?),
        })
    }

    /// The pools, thread `t` allocating from the pool `t` modulo their number.
    fn pools(&self) -> Vec<&dyn Pool> {
        match self {
            ThreadsPool::Fixed(pool) => vec![&**pool],
            ThreadsPool::Dynamic(pool) => vec![pool],
            ThreadsPool::Hybrid(pool) => vec![pool],
            ThreadsPool::Adaptive(pool) => vec![pool],
            ThreadsPool::Apart(pools) => pools.iter().map(|pool| pool as &dyn Pool).collect(),
        }
    }

    /// What the pools did so far, summed.
    fn stats(&self) -> ChurnCounts {
        self.pools().iter().map(|pool| pool.stats()).fold(ChurnCounts::default(), |sum, stats| ChurnCounts {
            allocations: sum.allocations + stats.allocations,
            fallbacks: sum.fallbacks + stats.fallbacks,
            events_recorded: sum.events_recorded + stats.events_recorded,
            peak_reserved_bytes: sum.peak_reserved_bytes + stats.reserved_bytes.peak,
            peak_live_bytes: sum.peak_live_bytes + stats.allocated_bytes.peak,
        })
    }

    /// The dynamic pool's or region's shards open now (summed over the pools); `None` for the fixed pool.
    fn shards(&self) -> Option<usize> {
        match self {
            ThreadsPool::Fixed(_) => None,
            ThreadsPool::Dynamic(pool) => Some(pool.shards_open()),
            ThreadsPool::Hybrid(pool) => Some(pool.dynamic_region().shards_open()),
            ThreadsPool::Adaptive(pool) => Some(pool.region().shards_open()),
            ThreadsPool::Apart(pools) => Some(pools.iter().map(|pool| pool.dynamic_region().shards_open()).sum()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_are_powers_of_two_up_to_the_most() {
        assert_eq!(thread_counts(1), vec![1]);
        assert_eq!(thread_counts(8), vec![1, 2, 4, 8]);
        assert_eq!(thread_counts(12), vec![1, 2, 4, 8, 12]);
    }

    #[test]
    fn every_strategy_runs_on_several_threads_and_prints_a_row_each() {
        let args = BenchArgs { json: true, seconds: 0.2, threads: Some(3) };
        let mut out = Vec::new();
        run(&args, &mut out).unwrap();
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&out).unwrap();
        assert_eq!(rows.len(), 5 * 3, "{rows:?}");
        for row in &rows {
            assert!(row["ops_per_second"].as_f64().unwrap() > 0.0, "{row}");
            assert!((0.0..=1.0).contains(&row["region_share"].as_f64().unwrap()), "{row}");
            assert!(row["events_per_1000"].as_f64().unwrap() >= 0.0, "{row}");
            let (live, reserved) =
                (row["peak_live_bytes"].as_u64().unwrap(), row["peak_reserved_bytes"].as_u64().unwrap());
            assert!(live > 0 && reserved >= live, "the pool reserved what it held live: {row}");
            match row["strategy"].as_str().unwrap() {
                "fixed" => assert!(row["shards"].is_null(), "{row}"),
                _ => assert!(row["shards"].as_u64().unwrap() >= 1, "{row}"),
            }
        }
        let apart: Vec<_> = rows.iter().filter(|r| r["strategy"] == APART).collect();
        assert_eq!(apart.iter().map(|r| r["shards"].as_u64().unwrap()).collect::<Vec<_>>()[0], 1, "one pool");
        assert!(apart[2]["shards"].as_u64().unwrap() >= 3, "a pool, and a region, per thread: {:?}", apart[2]);
        let dynamic = rows.iter().find(|r| r["strategy"] == "dynamic").unwrap();
        assert_eq!(dynamic["region_share"], 1.0, "the dynamic pool serves every request itself");
        assert!(rows.iter().filter(|r| r["threads"] == 1).all(|r| r["vs_one_thread"] == 1.0));
        for row in &rows {
            let rounds: Vec<f64> =
                row["rounds_ops_per_second"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
            assert_eq!(rounds.len(), THREAD_ROUNDS, "{row}");
            let below = rounds.iter().filter(|&&ops| ops < row["ops_per_second"].as_f64().unwrap()).count();
            assert_eq!(below, THREAD_ROUNDS / 2, "the median round is reported: {row}");
        }
    }
}
