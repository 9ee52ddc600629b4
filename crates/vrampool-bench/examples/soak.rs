//! A long churn of every strategy, to show that nothing grows that should not: threads allocate and free
//! blocks of log-uniform sizes on several streams, hand blocks to each other so that frees happen away
//! from their allocations, ask for more than the device holds (out-of-memory refusals), and trim the pool
//! as they go. The run is cut into rounds; after each, every block is freed and the pool trimmed, and the
//! process's resident memory (RSS) and the pool's live and reserved bytes are read.
//!
//! ```sh
//! cargo run -p vrampool-bench --release --example soak [-- --ops 2000000 --threads 4 --rounds 5]
//! ```
//!
//! `--ops` is the operations per strategy (all threads and rounds together). The run fails (status 1) when
//! a round ends with live bytes, when the bytes a trimmed pool keeps grow from the first round to the last,
//! or when the process's RSS grows from the first round to the last by more than [`RSS_SLACK_BYTES`] (heap
//! fragmentation; the pools' own tables are full size after the first round).

use std::process::ExitCode;
use std::sync::{Arc, Barrier, Mutex};

use vrampool::{Allocation, Error, Pool, PoolSpec, SimDevice, SimDeviceConfig, StreamId};

/// The pools soaked: each strategy, the dynamic pool on segments and on virtual memory, the hybrid with
/// each drain policy.
const SPECS: [&str; 6] = [
    "strategy=fixed,block_size=1MiB,block_count=1024",
    "strategy=fixed,block_size=64KiB,block_count=4096,fallback=reject",
    "strategy=dynamic,virtual_memory=off",
    "strategy=dynamic,growth_factor=1.05",
    "strategy=hybrid",
    "strategy=hybrid,drain_before_growth=true",
];

/// The simulated device's memory.
const CAPACITY: u64 = 16 << 30;
/// Blocks a thread keeps live at most.
const LIVE_PER_THREAD: usize = 256;
/// Streams the threads allocate on.
const STREAMS: u64 = 4;
/// One operation in this many asks for more than the device holds.
const OOM_EVERY: u64 = 997;
/// Thread 0 trims the pool once every this many of its operations.
const TRIM_EVERY: u64 = 20_011;
/// How much the process's RSS may grow from the first round's end to the last's.
const RSS_SLACK_BYTES: u64 = 8 << 20;

/// What the command line asks for.
struct Args {
    ops: u64,
    threads: usize,
    rounds: usize,
}

impl Args {
    fn parse() -> Result<Args, String> {
        let mut args = Args { ops: 2_000_000, threads: 4, rounds: 5 };
        let mut words = std::env::args().skip(1);
        while let Some(flag) = words.next() {
            let value = words.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let number = |what: &str| value.parse::<u64>().map_err(|_| format!("{what} `{value}` is not a count"));
            match flag.as_str() {
                "--ops" => args.ops = number("--ops")?,
                "--threads" => args.threads = number("--threads")?.clamp(1, 64) as usize,
                "--rounds" => args.rounds = number("--rounds")?.clamp(2, 1000) as usize,
                other => return Err(format!("unknown argument {other} (--ops, --threads, --rounds)")),
            }
        }
        Ok(args)
    }
}

/// A small deterministic generator, one per thread.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    /// A size from 256 B to 8 MiB, log-uniform.
    fn size(&mut self) -> u64 {
        let bits = 8 + self.next() % 15;
        (1 << bits) + self.next() % (1 << bits)
    }
}

/// The process's resident memory, in bytes (Linux: `VmRSS` of `/proc/self/status`; 0 elsewhere).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// What one round of one pool did, and what was held after it.
#[derive(Clone, Copy, Default)]
struct Round {
    ops: u64,
    ooms: u64,
    trims: u64,
    live_after: u64,
    reserved_after_trim: u64,
    rss_after: u64,
}

/// Counts of one thread's operations.
#[derive(Default)]
struct Counts {
    ops: u64,
    ooms: u64,
    trims: u64,
}

/// One thread's share of a round: `ops` operations on `pool`, then every block it holds freed.
fn churn(pool: &dyn Pool, thread: usize, round: usize, ops: u64, exchange: &Mutex<Vec<Allocation>>) -> Counts {
    let mut rng = Lcg((thread as u64 + 1) * 0x9E37_79B9 + round as u64);
    let mut live: Vec<Allocation> = Vec::with_capacity(LIVE_PER_THREAD);
    let mut counts = Counts::default();
    for op in 0..ops {
        counts.ops += 1;
        if thread == 0 && op % TRIM_EVERY == TRIM_EVERY - 1 {
            pool.trim().expect("trim");
            counts.trims += 1;
        }
        if op % OOM_EVERY == 0 {
            let error = pool.allocate(2 * CAPACITY, 256, StreamId(0)).expect_err("more than the device holds");
            assert!(error.is_out_of_memory(), "{error}");
            counts.ooms += 1;
            continue;
        }
        // Between half and all of the thread's blocks stay live.
        let free = live.len() == LIVE_PER_THREAD || (live.len() > LIVE_PER_THREAD / 2 && rng.next() % 2 == 0);
        if free {
            let block = live.swap_remove((rng.next() as usize) % live.len());
            if rng.next() % 8 == 0 {
                // Another thread frees it.
                exchange.lock().expect("no thread panics holding the exchange").push(block);
            } else {
                pool.free(block.addr).expect("free of a live block");
            }
        } else if rng.next() % 8 == 0
            && let Some(block) = exchange.lock().expect("no thread panics holding the exchange").pop()
        {
            pool.free(block.addr).expect("free of a block another thread allocated");
        } else {
            match pool.allocate(rng.size(), 256, StreamId(rng.next() % STREAMS)) {
                Ok(block) => live.push(block),
                // A fixed pool that takes no fallback refuses a request larger than its blocks.
                Err(error) if error.is_out_of_memory() || matches!(error, Error::BlockTooSmall { .. }) => {
                    counts.ooms += 1
                }
                Err(error) => panic!("allocation: {error}"),
            }
        }
    }
    for block in live {
        pool.free(block.addr).expect("free at the round's end");
    }
    counts
}

/// What a soak of one pool saw.
struct Soaked {
    /// The bytes the pool reserved when made.
    reserved_at_start: u64,
    /// The most it reserved.
    peak_reserved: u64,
    /// The figures after each round.
    rounds: Vec<Round>,
}

/// Soaks the pool of `spec`.
fn soak(spec: &str, args: &Args) -> Soaked {
    let device = Arc::new(SimDevice::new(SimDeviceConfig::default().capacity(CAPACITY)));
    let pool = PoolSpec::parse(spec).and_then(|spec| spec.build(device)).expect("the soak's configs build");
    let reserved_at_start = pool.stats().reserved_bytes.current;
    let per_thread = args.ops / (args.rounds * args.threads) as u64;
    let mut rounds = Vec::new();
    for round in 0..args.rounds {
        let exchange = Mutex::new(Vec::new());
        let barrier = Barrier::new(args.threads);
        let counts: Vec<Counts> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..args.threads)
                .map(|thread| {
                    let (pool, exchange, barrier) = (&*pool, &exchange, &barrier);
                    scope.spawn(move || {
                        barrier.wait();
                        churn(pool, thread, round, per_thread, exchange)
                    })
                })
                .collect();
            workers.into_iter().map(|worker| worker.join().expect("a soak thread panicked")).collect()
        });
        for block in exchange.into_inner().expect("no thread panicked") {
            pool.free(block.addr).expect("free of a block left in the exchange");
        }
        pool.trim().expect("trim");
        let stats = pool.stats();
        rounds.push(Round {
            ops: counts.iter().map(|c| c.ops).sum(),
            ooms: counts.iter().map(|c| c.ooms).sum(),
            trims: counts.iter().map(|c| c.trims).sum::<u64>() + 1,
            live_after: stats.allocated_bytes.current,
            reserved_after_trim: stats.reserved_bytes.current,
            rss_after: rss_bytes(),
        });
    }
    Soaked { reserved_at_start, peak_reserved: pool.stats().reserved_bytes.peak, rounds }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

fn main() -> ExitCode {
    let args = match Args::parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("soak: {message}");
            return ExitCode::FAILURE;
        }
    };
    let start_rss = rss_bytes();
    println!(
        "soak: {} operations per pool, {} threads on {STREAMS} streams, {} rounds; device {} GiB; RSS at start {}",
        args.ops,
        args.threads,
        args.rounds,
        CAPACITY >> 30,
        mib(start_rss)
    );
    println!(
        "{:<66} {:>9} {:>7} {:>6} {:>11} {:>11} {:>11} {:>23} {:>21}",
        "pool",
        "ops",
        "refused",
        "trims",
        "reserved 0",
        "peak",
        "live after",
        "kept after trim (1st/last)",
        "RSS after (1st/last)"
    );
    let mut failures = Vec::new();
    for spec in SPECS {
        let Soaked { reserved_at_start, peak_reserved, rounds } = soak(spec, &args);
        let (first, last) = (rounds[0], rounds[rounds.len() - 1]);
        let ops: u64 = rounds.iter().map(|r| r.ops).sum();
        let ooms: u64 = rounds.iter().map(|r| r.ooms).sum();
        let trims: u64 = rounds.iter().map(|r| r.trims).sum();
        let live = rounds.iter().map(|r| r.live_after).max().unwrap_or(0);
        println!(
            "{spec:<66} {ops:>9} {ooms:>7} {trims:>6} {:>11} {:>11} {:>11} {:>23} {:>21}",
            mib(reserved_at_start),
            mib(peak_reserved),
            mib(live),
            format!("{} / {}", mib(first.reserved_after_trim), mib(last.reserved_after_trim)),
            format!("{} / {}", mib(first.rss_after), mib(last.rss_after)),
        );
        if live > 0 {
            failures.push(format!("{spec}: {live} bytes live after a round that freed every block"));
        }
        if last.reserved_after_trim > first.reserved_after_trim {
            failures.push(format!(
                "{spec}: a trimmed pool keeps {} after the last round, {} after the first",
                mib(last.reserved_after_trim),
                mib(first.reserved_after_trim)
            ));
        }
        if last.rss_after > first.rss_after + RSS_SLACK_BYTES {
            failures.push(format!(
                "{spec}: RSS grew from {} after the first round to {} after the last",
                mib(first.rss_after),
                mib(last.rss_after)
            ));
        }
    }
    println!("RSS at end {} (pools dropped)", mib(rss_bytes()));
    if failures.is_empty() {
        println!("nothing grew: no live bytes after any round, trimmed pools and RSS as after the first round");
        ExitCode::SUCCESS
    } else {
        failures.iter().for_each(|failure| eprintln!("soak: {failure}"));
        ExitCode::FAILURE
    }
}
