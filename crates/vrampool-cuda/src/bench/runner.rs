//! Running the latency bench: every method on every pattern, timed in rounds that take turns.
//!
//! For one pattern, every method's allocator is made and warmed up first; then their timed rounds
//! alternate, one round of each method in turn, until each has spent its budget. A method's figure and the
//! figures it is compared with are thus taken over the same stretch of time: on a shared host whose speed
//! drifts, cells timed one after the other would compare the drift as much as the methods
//! (docs/BENCHMARKS.md).

use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vrampool::{KIB, MIB};
use vrampool_bench::{Pattern, log_uniform};

use super::bench_device::BenchDevice;
use super::latency_report::{LatencyCell, LatencyReport, PoolWork};
use super::method::{Allocator, Method};
use crate::error::CudaError;

/// The patterns of the design: pairs at 4 KiB, 1 MiB and 64 MiB, and the standard churn over 1000 live
/// blocks of 256 B to 8 MiB.
pub fn default_patterns() -> Vec<Pattern> {
    vec![
        Pattern::Pair { size: 4 * KIB },
        Pattern::Pair { size: MIB },
        Pattern::Pair { size: 64 * MIB },
        Pattern::STANDARD_CHURN,
    ]
}

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
    /// Whether the methods' rounds of one pattern take turns (the default); `false` times each cell to the
    /// end before the next starts, for comparing the two ways on one host.
    pub take_turns: bool,
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
            take_turns: true,
        }
    }
}

/// The most operations a timed round runs.
const MAX_OPS_PER_ROUND: usize = 100_000;

/// Draws of the churn pattern, made before timing so that the random numbers cost nothing in the rounds.
const CHURN_DRAWS: usize = 1 << 16;

/// Where one allocator stands in its pattern between rounds.
enum Workload {
    /// Allocate and free one block of `size` bytes.
    Pair { size: u64 },
    /// Free a live block chosen at random and allocate one in its place.
    Churn { live: Vec<u64>, sizes: Vec<u64>, victims: Vec<usize>, step: usize },
}

impl Workload {
    /// The pattern's state on `allocator`: for churn, its live blocks allocated (those allocated are kept
    /// in the state even where one fails, so that [`Workload::release`] frees them).
    fn prepare(allocator: &mut dyn Allocator, pattern: &Pattern, seed: u64) -> (Self, Result<(), CudaError>) {
        match *pattern {
            Pattern::Pair { size } => (Workload::Pair { size }, Ok(())),
            Pattern::Churn { live: count, min_size, max_size } => {
                let mut rng = SmallRng::seed_from_u64(seed);
                let sizes: Vec<u64> = (0..CHURN_DRAWS).map(|_| log_uniform(rng.random(), min_size, max_size)).collect();
                let victims: Vec<usize> = (0..CHURN_DRAWS).map(|_| rng.random_range(0..count.max(1))).collect();
                let mut live = Vec::with_capacity(count);
                let outcome = (0..count).try_for_each(|i| {
                    live.push(allocator.allocate(sizes[i % CHURN_DRAWS])?);
                    Ok(())
                });
                (Workload::Churn { live, sizes, victims, step: 0 }, outcome)
            }
        }
    }

    /// Whether the pattern has nothing to do (a churn of no live blocks).
    fn is_empty(&self) -> bool {
        matches!(self, Workload::Churn { live, .. } if live.is_empty())
    }

    /// One operation: a pair, or a churn step.
    #[inline]
    fn op(&mut self, allocator: &mut dyn Allocator) -> Result<(), CudaError> {
        match self {
            Workload::Pair { size } => {
                let addr = allocator.allocate(*size)?;
                allocator.free(addr)
            }
            Workload::Churn { live, sizes, victims, step } => {
                let (size, victim) = (sizes[*step % CHURN_DRAWS], victims[*step % CHURN_DRAWS]);
                *step += 1;
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
            }
        }
    }

    /// Frees every block the pattern holds.
    fn release(&mut self, allocator: &mut dyn Allocator) {
        if let Workload::Churn { live, .. } = self {
            for addr in live.drain(..) {
                let _ = allocator.free(addr);
            }
        }
    }
}

/// One (method, pattern) cell while its rounds run.
struct Measurement {
    allocator: Box<dyn Allocator>,
    workload: Workload,
    ops_per_round: usize,
    per_op_ns: Vec<f64>,
    /// Time spent in timed rounds so far.
    measured: Duration,
    /// The pool's device work when timing began.
    before: Option<PoolWork>,
}

impl Measurement {
    /// Makes the allocator, prepares the pattern, warms up and sizes the rounds; ready for its first round.
    fn start(
        method: &Method,
        device: &BenchDevice,
        pattern: &Pattern,
        config: &BenchConfig,
    ) -> Result<Self, CudaError> {
        Self::prepare(method.make(device, pattern)?, pattern, config)
    }

    /// [`Measurement::start`] on an allocator made already.
    fn prepare(mut allocator: Box<dyn Allocator>, pattern: &Pattern, config: &BenchConfig) -> Result<Self, CudaError> {
        let (mut workload, prepared) = Workload::prepare(&mut *allocator, pattern, config.seed);
        let warmup = if matches!(pattern, Pattern::Pair { .. }) { config.warmup_ops } else { config.churn_warmup_ops };
        let ready = prepared
            .and_then(|()| {
                if workload.is_empty() {
                    return Ok(0);
                }
                (0..warmup).try_for_each(|_| workload.op(&mut *allocator))?;
                Ok(1)
            })
            .and_then(|ops| {
                let before = allocator.pool_work();
                let ops_per_round =
                    if ops == 0 { 0 } else { ops_per_round(&mut *allocator, &mut workload, config.round_target)? };
                Ok((before, ops_per_round))
            });
        match ready {
            Ok((before, ops_per_round)) => Ok(Measurement {
                allocator,
                workload,
                ops_per_round,
                per_op_ns: Vec::new(),
                measured: Duration::ZERO,
                before,
            }),
            Err(err) => {
                workload.release(&mut *allocator);
                Err(err)
            }
        }
    }

    /// Whether the cell has its rounds: none to run at all, the most rounds, or the least rounds and its
    /// budget.
    fn is_done(&self, config: &BenchConfig) -> bool {
        let rounds = self.per_op_ns.len();
        self.ops_per_round == 0
            || rounds >= config.max_rounds
            || (rounds >= config.min_rounds && self.measured >= config.budget_per_cell)
    }

    /// Runs and times one round.
    fn round(&mut self) -> Result<(), CudaError> {
        let start = Instant::now();
        for _ in 0..self.ops_per_round {
            self.workload.op(&mut *self.allocator)?;
        }
        let elapsed = start.elapsed();
        self.measured += elapsed;
        self.per_op_ns.push(elapsed.as_nanos() as f64 / self.ops_per_round as f64);
        Ok(())
    }

    /// The samples, with the device work done since timing began; frees what the pattern holds and drops
    /// the allocator.
    fn finish(mut self) -> Samples {
        let pool_work = self.allocator.pool_work().zip(self.before).map(|(after, before)| after.since(before));
        self.workload.release(&mut *self.allocator);
        drop(self.allocator);
        Samples { per_op_ns: self.per_op_ns, ops_per_round: self.ops_per_round, pool_work }
    }

    /// Frees what the pattern holds and drops the allocator, after a failed round.
    fn abandon(mut self) {
        self.workload.release(&mut *self.allocator);
    }
}

/// Nanoseconds per operation of each timed round, the operations per round, and what a pool did on the
/// device while timed.
struct Samples {
    per_op_ns: Vec<f64>,
    ops_per_round: usize,
    pool_work: Option<PoolWork>,
}

/// Operations in a round of about `target`, from batches of 8, 16, 32, ... operations timed until one lasts
/// an eighth of it: a single slow operation in a short batch (a driver call inside a pool) would have made
/// every round short, and the median of short rounds leaves out what such calls cost.
fn ops_per_round(allocator: &mut dyn Allocator, workload: &mut Workload, target: Duration) -> Result<usize, CudaError> {
    let mut batch = 8usize;
    let estimate = loop {
        let start = Instant::now();
        for _ in 0..batch {
            workload.op(allocator)?;
        }
        let elapsed = start.elapsed();
        if elapsed >= target / 8 || batch >= MAX_OPS_PER_ROUND {
            break elapsed.as_secs_f64() / batch as f64;
        }
        batch *= 2;
    };
    Ok((target.as_secs_f64() / estimate.max(1e-9)).clamp(1.0, MAX_OPS_PER_ROUND as f64) as usize)
}

/// Runs every method on every pattern of `config` on `device` and reports the median nanoseconds per
/// operation. For each pattern the methods' rounds take turns (see the module's note), unless
/// [`BenchConfig::take_turns`] is off. A cell that fails (a
/// method the device lacks, a request refused) is reported with its error; the others still run.
pub fn run(device: &BenchDevice, methods: &[Method], config: &BenchConfig) -> LatencyReport {
    let mut outcomes: Vec<Vec<Option<Result<Samples, CudaError>>>> =
        methods.iter().map(|_| config.patterns.iter().map(|_| None).collect()).collect();
    // The methods whose rounds take turns: all of them, or each alone.
    let groups: Vec<Vec<usize>> = if config.take_turns {
        vec![(0..methods.len()).collect()]
    } else {
        (0..methods.len()).map(|m| vec![m]).collect()
    };
    for (p, pattern) in config.patterns.iter().enumerate() {
        for group in &groups {
            let mut running: Vec<(usize, Measurement)> = Vec::new();
            for &m in group {
                match Measurement::start(&methods[m], device, pattern, config) {
                    Ok(measurement) => running.push((m, measurement)),
                    Err(err) => outcomes[m][p] = Some(Err(err)),
                }
            }
            while !running.is_empty() {
                let mut still = Vec::with_capacity(running.len());
                for (m, mut measurement) in running {
                    if measurement.is_done(config) {
                        outcomes[m][p] = Some(Ok(measurement.finish()));
                    } else if let Err(err) = measurement.round() {
                        measurement.abandon();
                        outcomes[m][p] = Some(Err(err));
                    } else {
                        still.push((m, measurement));
                    }
                }
                running = still;
            }
        }
    }
    let mut cells = Vec::new();
    for (method, row) in methods.iter().zip(outcomes) {
        for (pattern, outcome) in config.patterns.iter().zip(row) {
            let outcome = outcome.expect("every cell finishes");
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
        rounds_took_turns: config.take_turns,
        methods: methods.iter().map(|m| m.name.clone()).collect(),
        patterns: config.patterns.iter().map(Pattern::label).collect(),
        cells,
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::rc::Rc;

    use super::*;
    use crate::bench::method::default_methods;
    use crate::fake_driver::{FakeConfig, FakeDriver};

    #[test]
    fn the_default_patterns_are_the_designs() {
        let patterns = default_patterns();
        assert_eq!(patterns[0].label(), "pair 4 KiB");
        assert_eq!(patterns[3].label(), "churn 1000 x 256 B..8 MiB");
        assert_eq!((patterns[3].max_size(), patterns[3].max_live()), (8 * MIB, 1000));
        assert_eq!((patterns[2].max_size(), patterns[2].max_live()), (64 * MIB, 1));
    }

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
            take_turns: true,
        }
    }

    #[test]
    fn every_method_runs_every_pattern_and_gives_back_what_it_took() {
        // Every method of a pattern holds its memory at once: the pools' initial reservations need more
        // than the standard fake device's 1 GiB.
        let fake = FakeDriver::new(FakeConfig { capacity: 4 << 30, ..FakeConfig::default() });
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
        assert!(table.contains("the methods' rounds taking turns"), "{table}");
        let parsed: LatencyReport = serde_json::from_str(&report.to_json()).unwrap();
        assert!(parsed.rounds_took_turns);
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
        let mut allocator = StallsOnce { calls: 0 };
        let mut pairs = Workload::Pair { size: 1 };
        let ops = ops_per_round(&mut allocator, &mut pairs, Duration::from_millis(2)).unwrap();
        // Estimated from the stalled batch of 8 alone, a round would have been about 80 operations.
        assert!(ops > 800, "{ops}");
    }

    /// Counts operations; notes the count when the runner first asks for its work, which it does once
    /// warm-up is over.
    #[derive(Default)]
    struct CountsWarmUp {
        ops: u64,
        at_first_reading: Rc<Cell<Option<u64>>>,
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
        let pairs = CountsWarmUp::default();
        let seen = pairs.at_first_reading.clone();
        Measurement::prepare(Box::new(pairs), &Pattern::Pair { size: 4 * KIB }, &config).unwrap().finish();
        assert_eq!(seen.get(), Some(2 * config.warmup_ops as u64));
        let churn = CountsWarmUp::default();
        let seen = churn.at_first_reading.clone();
        let pattern = Pattern::Churn { live: 40, min_size: 256, max_size: MIB };
        Measurement::prepare(Box::new(churn), &pattern, &config).unwrap().finish();
        assert_eq!(seen.get(), Some(40 + 2 * config.churn_warmup_ops as u64));
    }

    /// Writes its name in a shared log at every allocation.
    struct Logs {
        name: usize,
        log: Rc<RefCell<Vec<usize>>>,
    }

    impl Allocator for Logs {
        fn allocate(&mut self, _size: u64) -> Result<u64, CudaError> {
            self.log.borrow_mut().push(self.name);
            Ok(1)
        }

        fn free(&mut self, _addr: u64) -> Result<(), CudaError> {
            Ok(())
        }
    }

    /// The methods of one pattern take turns round by round, so that they are timed over the same
    /// stretch; each still gets its own rounds.
    #[test]
    fn the_methods_rounds_take_turns() {
        let fake = FakeDriver::standard();
        let device = BenchDevice::with_driver(fake, "fake".into()).unwrap();
        let log = Rc::new(RefCell::new(Vec::new()));
        let methods: Vec<Method> = (0..2)
            .map(|name| {
                let log = log.clone();
                Method::new(format!("m{name}"), move |_, _| Ok(Box::new(Logs { name, log: log.clone() }) as _))
            })
            .collect();
        let config = BenchConfig { patterns: vec![Pattern::Pair { size: 4 * KIB }], ..quick() };
        let report = run(&device, &methods, &config);
        assert!(report.cells.iter().all(|c| c.rounds >= config.min_rounds), "{:?}", report.cells);
        let turns = log.borrow().windows(2).filter(|w| w[0] != w[1]).count();
        assert!(turns >= 2 * config.min_rounds - 1, "{turns} turns: the methods ran one after the other");
        log.borrow_mut().clear();
        run(&device, &methods, &BenchConfig { take_turns: false, ..config });
        let log = log.borrow();
        assert_eq!(log.windows(2).filter(|w| w[0] != w[1]).count(), 1, "one cell after the other when asked");
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
