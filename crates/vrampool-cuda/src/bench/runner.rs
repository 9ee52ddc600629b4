//! Running the latency bench: every method on every pattern, timed in rounds.

use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::bench_device::BenchDevice;
use super::latency_report::{LatencyCell, LatencyReport, PoolWork};
use super::method::{Allocator, Method};
use super::pattern::{Pattern, default_patterns};
use crate::error::CudaError;

/// How the bench runs.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchConfig {
    /// The patterns, in column order. Default: [`default_patterns`].
    pub patterns: Vec<Pattern>,
    /// Time spent measuring one (method, pattern) cell, warm-up excluded. Default: 1 s (4 patterns and 8
    /// methods take about 35 s in all).
    pub budget_per_cell: Duration,
    /// The length a timed round aims at: rounds of fast operations batch many, so the clock's cost
    /// vanishes. Default: 2 ms.
    pub round_target: Duration,
    /// Rounds measured at least, even past the budget. Default: 5.
    pub min_rounds: usize,
    /// Rounds measured at most. Default: 1000.
    pub max_rounds: usize,
    /// Pairs run before timing a pair pattern. Default: 2000.
    pub warmup_ops: usize,
    /// Churn steps run before timing, after the churn's blocks are allocated: enough for the hybrid to learn
    /// its classes and for pools on virtual memory to settle, so that the rounds time the steady churn a
    /// long-running program sees rather than the pool still growing. Default: 20,000 (docs/BENCHMARKS.md
    /// lists the device work each pool still did while timed).
    pub churn_warmup_ops: usize,
    /// The seed of the churn pattern's sizes and choices. Default: 42.
    pub seed: u64,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            patterns: default_patterns(),
            budget_per_cell: Duration::from_secs(1),
            round_target: Duration::from_millis(2),
            min_rounds: 5,
            max_rounds: 1000,
            warmup_ops: 2000,
            churn_warmup_ops: 20_000,
            seed: 42,
        }
    }
}

/// Nanoseconds per operation of each timed round, the operations per round, and what a pool did on the
/// device while timed.
struct Samples {
    per_op_ns: Vec<f64>,
    ops_per_round: usize,
    pool_work: Option<PoolWork>,
}

/// Runs every method on every pattern of `config` on `device`, one cell after another, and reports the
/// median nanoseconds per operation. A cell that fails (a method the device lacks, a request refused)
/// is reported with its error; the others still run.
pub fn run(device: &BenchDevice, methods: &[Method], config: &BenchConfig) -> LatencyReport {
    let mut cells = Vec::new();
    for method in methods {
        for pattern in &config.patterns {
            let outcome = method.make(device, pattern).and_then(|mut allocator| {
                let samples = measure(&mut *allocator, pattern, config);
                drop(allocator);
                samples
            });
            let pool_work = outcome.as_ref().ok().and_then(|s| s.pool_work);
            let mut cell = LatencyCell::new(&method.name, pattern, outcome.map(|s| (s.per_op_ns, s.ops_per_round)));
            cell.pool_work_timed = pool_work;
            cells.push(cell);
        }
    }
    LatencyReport {
        device: device.name().to_string(),
        ordinal: device.ordinal(),
        total_memory: device.total_memory(),
        granularity: device.granularity(),
        budget_per_cell_ms: config.budget_per_cell.as_millis() as u64,
        methods: methods.iter().map(|m| m.name.clone()).collect(),
        patterns: config.patterns.iter().map(Pattern::name).collect(),
        cells,
    }
}

/// Times one pattern on one allocator; frees everything it allocated, whatever happens.
fn measure(allocator: &mut dyn Allocator, pattern: &Pattern, config: &BenchConfig) -> Result<Samples, CudaError> {
    let mut live = Vec::new();
    let outcome = match *pattern {
        Pattern::Pair { size } => measure_pairs(allocator, size, config),
        Pattern::Churn { live: count, min_size, max_size } => {
            measure_churn(allocator, &mut live, count, min_size, max_size, config)
        }
    };
    for addr in live {
        let _ = allocator.free(addr);
    }
    outcome
}

/// Rounds of `ops` operations each, timed, until the budget is spent; with what the pool did meanwhile.
fn timed_rounds(
    allocator: &mut dyn Allocator,
    config: &BenchConfig,
    mut op: impl FnMut(&mut dyn Allocator) -> Result<(), CudaError>,
) -> Result<Samples, CudaError> {
    let before = allocator.pool_work();
    // Estimate the cost of one operation from batches of 8, 16, 32, ... operations, until one lasts an
    // eighth of a round: a single slow operation in a short batch (a driver call inside a pool) would have
    // made every round short, and the median of short rounds leaves out what such calls cost.
    let estimate = {
        let mut batch = 8usize;
        loop {
            let start = Instant::now();
            for _ in 0..batch {
                op(allocator)?;
            }
            let elapsed = start.elapsed();
            if elapsed >= config.round_target / 8 || batch >= MAX_OPS_PER_ROUND {
                break elapsed.as_secs_f64() / batch as f64;
            }
            batch *= 2;
        }
    };
    let ops_per_round =
        (config.round_target.as_secs_f64() / estimate.max(1e-9)).clamp(1.0, MAX_OPS_PER_ROUND as f64) as usize;
    let mut per_op_ns = Vec::new();
    let budget = Instant::now();
    while per_op_ns.len() < config.max_rounds
        && (per_op_ns.len() < config.min_rounds || budget.elapsed() < config.budget_per_cell)
    {
        let start = Instant::now();
        for _ in 0..ops_per_round {
            op(allocator)?;
        }
        per_op_ns.push(start.elapsed().as_nanos() as f64 / ops_per_round as f64);
    }
    let pool_work = allocator.pool_work().zip(before).map(|(after, before)| after.since(before));
    Ok(Samples { per_op_ns, ops_per_round, pool_work })
}

fn measure_pairs(allocator: &mut dyn Allocator, size: u64, config: &BenchConfig) -> Result<Samples, CudaError> {
    let pair = |allocator: &mut dyn Allocator| {
        let addr = allocator.allocate(size)?;
        allocator.free(addr)
    };
    for _ in 0..config.warmup_ops {
        pair(allocator)?;
    }
    timed_rounds(allocator, config, pair)
}

/// The most operations a timed round runs.
const MAX_OPS_PER_ROUND: usize = 100_000;

/// Draws of the churn pattern, made before timing so that the random numbers cost nothing in the rounds.
const CHURN_DRAWS: usize = 1 << 16;

fn measure_churn(
    allocator: &mut dyn Allocator,
    live: &mut Vec<u64>,
    count: usize,
    min_size: u64,
    max_size: u64,
    config: &BenchConfig,
) -> Result<Samples, CudaError> {
    let mut rng = SmallRng::seed_from_u64(config.seed);
    let sizes: Vec<u64> = (0..CHURN_DRAWS).map(|_| Pattern::log_uniform(&mut rng, min_size, max_size)).collect();
    let victims: Vec<usize> = (0..CHURN_DRAWS).map(|_| rng.random_range(0..count.max(1))).collect();
    for i in 0..count {
        live.push(allocator.allocate(sizes[i % CHURN_DRAWS])?);
    }
    if live.is_empty() {
        return Ok(Samples { per_op_ns: Vec::new(), ops_per_round: 0, pool_work: None });
    }
    let mut step = 0usize;
    let mut churn = |allocator: &mut dyn Allocator| {
        let (size, victim) = (sizes[step % CHURN_DRAWS], victims[step % CHURN_DRAWS]);
        step += 1;
        allocator.free(live[victim])?;
        // The block is gone: if the allocation fails, nothing is left to free at `victim`.
        match allocator.allocate(size) {
            Ok(addr) => {
                live[victim] = addr;
                Ok(())
            }
            Err(err) => {
                live.swap_remove(victim);
                Err(err)
            }
        }
    };
    for _ in 0..config.churn_warmup_ops {
        churn(allocator)?;
    }
    timed_rounds(allocator, config, churn)
}

#[cfg(test)]
mod tests {
    use vrampool::{KIB, MIB};

    use super::*;
    use crate::bench::method::default_methods;
    use crate::fake_driver::FakeDriver;

    fn quick() -> BenchConfig {
        BenchConfig {
            patterns: vec![
                Pattern::Pair { size: 4 * KIB },
                Pattern::Pair { size: 3 * MIB },
                Pattern::Churn { live: 40, min_size: 256, max_size: MIB },
            ],
            budget_per_cell: Duration::from_millis(5),
            round_target: Duration::from_micros(200),
            min_rounds: 3,
            max_rounds: 50,
            warmup_ops: 10,
            churn_warmup_ops: 30,
            seed: 1,
        }
    }

    #[test]
    fn every_method_runs_every_pattern_and_gives_back_what_it_took() {
        let fake = FakeDriver::standard();
        let device = BenchDevice::with_driver(fake.clone(), "fake".into()).unwrap();
        let methods = default_methods();
        let report = run(&device, &methods, &quick());
        assert_eq!(report.cells.len(), methods.len() * 3);
        for cell in &report.cells {
            assert!(cell.error.is_none(), "{} / {}: {:?}", cell.method, cell.pattern, cell.error);
            assert!(cell.median_ns.is_some_and(|ns| ns > 0.0) && cell.rounds >= 3, "{cell:?}");
            assert_eq!(cell.pool_work_timed.is_some(), !cell.method.starts_with("cuMem"), "{cell:?}");
        }
        // The fixed pool reserved its slab when made (a backend call) and calls nothing while timed: the cell
        // counts the timed rounds only.
        let fixed = report.cell("fixed / CudaDevice", "pair 4 KiB").unwrap();
        assert_eq!(fixed.pool_work_timed, Some(PoolWork::default()), "{fixed:?}");
        assert!(fake.default_pool_kept(), "CUDA's pool keeps its memory");
        assert!(fake.count("cuMemAllocAsync") > 0 && fake.count("cuMemAlloc") > 0);
        assert_eq!(fake.allocation_count(), 0, "every allocation was freed");
        assert_eq!((fake.mapping_count(), fake.reservation_count()), (0, 0), "every pool was dropped");
        let table = report.to_markdown();
        for name in ["cuMemAlloc", "cuMemAllocAsync (CUDA pool)", "fixed / CudaDevice", "hybrid / CudaVirtual"] {
            assert!(table.contains(&format!("| {name} |")), "{table}");
        }
        assert!(table.contains("churn 40 x 256 B..1 MiB"), "{table}");
        let parsed: LatencyReport = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!((&parsed.methods, &parsed.patterns, parsed.cells.len()), (&report.methods, &report.patterns, 24));
        for (read, written) in parsed.cells.iter().zip(&report.cells) {
            let (a, b) = (read.median_ns.unwrap(), written.median_ns.unwrap());
            assert!((a - b).abs() <= 1e-9 * b, "{a} != {b}");
        }
        drop(device);
        assert_eq!(fake.used(), 0);
    }

    /// An allocator whose second operation stalls (as a driver call inside a pool does) and the rest cost
    /// next to nothing.
    struct StallsOnce {
        calls: u64,
    }

    impl Allocator for StallsOnce {
        fn allocate(&mut self, _size: u64) -> Result<u64, CudaError> {
            self.calls += 1;
            if self.calls == 2 {
                let start = Instant::now();
                while start.elapsed() < Duration::from_micros(200) {}
            }
            Ok(self.calls)
        }

        fn free(&mut self, _addr: u64) -> Result<(), CudaError> {
            Ok(())
        }
    }

    #[test]
    fn one_stalled_operation_does_not_make_every_round_short() {
        let config = BenchConfig { round_target: Duration::from_millis(2), ..quick() };
        let mut allocator = StallsOnce { calls: 0 };
        let samples = timed_rounds(&mut allocator, &config, |a| a.allocate(1).map(drop)).unwrap();
        // Estimated from the stalled batch of 8 alone, a round would have been about 80 operations.
        assert!(samples.ops_per_round > 800, "{}", samples.ops_per_round);
        assert_eq!(samples.pool_work, None, "not a pool");
    }

    /// Counts operations; reads them when the runner asks for its work, which it does once warm-up is over.
    #[derive(Default)]
    struct CountsWarmUp {
        ops: u64,
        at_first_reading: std::cell::Cell<Option<u64>>,
    }

    impl Allocator for CountsWarmUp {
        fn allocate(&mut self, _size: u64) -> Result<u64, CudaError> {
            self.ops += 1;
            Ok(self.ops)
        }

        fn free(&mut self, _addr: u64) -> Result<(), CudaError> {
            self.ops += 1;
            Ok(())
        }

        fn pool_work(&self) -> Option<PoolWork> {
            if self.at_first_reading.get().is_none() {
                self.at_first_reading.set(Some(self.ops));
            }
            None
        }
    }

    #[test]
    fn pairs_and_churn_each_warm_up_for_their_own_count() {
        let config = quick();
        let mut pairs = CountsWarmUp::default();
        measure_pairs(&mut pairs, 4 * KIB, &config).unwrap();
        assert_eq!(pairs.at_first_reading.get(), Some(2 * config.warmup_ops as u64));
        let mut churn = CountsWarmUp::default();
        measure_churn(&mut churn, &mut Vec::new(), 40, 256, MIB, &config).unwrap();
        assert_eq!(churn.at_first_reading.get(), Some(40 + 2 * config.churn_warmup_ops as u64));
    }

    #[test]
    fn a_failing_cell_is_reported_and_the_rest_still_run() {
        let fake = FakeDriver::standard();
        let device = BenchDevice::with_driver(fake.clone(), "fake".into()).unwrap();
        let config =
            BenchConfig { patterns: vec![Pattern::Pair { size: 2 << 30 }, Pattern::Pair { size: 4 * KIB }], ..quick() };
        let methods = vec![Method::new("cuMemAlloc", |device, _| device.driver_allocator())];
        let report = run(&device, &methods, &config);
        let too_big = report.cell("cuMemAlloc", "pair 2 GiB").unwrap();
        assert!(too_big.error.as_deref().is_some_and(|e| e.contains("CUDA_ERROR_OUT_OF_MEMORY")), "{too_big:?}");
        assert!(report.cell("cuMemAlloc", "pair 4 KiB").unwrap().median_ns.is_some());
        assert!(
            report.to_markdown().contains("- cuMemAlloc, pair 2 GiB: cuMemAlloc failed"),
            "{}",
            report.to_markdown()
        );
        assert_eq!(fake.allocation_count(), 0);
    }
}
