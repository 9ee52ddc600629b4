//! Throughput of a pool used by several threads at once.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use vrampool::Pool;

use crate::churn_sequence::ChurnSequence;
use crate::pool_runner::{PoolChurn, run_pair};

/// Throughput at one thread count.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct ThreadScaling {
    /// Threads running at once.
    pub threads: usize,
    /// Operations per second, all threads together.
    pub ops_per_second: f64,
}

/// Runs `threads` threads on `pool` for about `duration`, each its own churn (`live` blocks of log-uniform
/// sizes from 256 B to `max_size`) or, when `live` is 0, pairs of `max_size` bytes; returns the operations
/// per second of all threads together.
pub fn thread_throughput<P: Pool + ?Sized>(
    pool: &P,
    threads: usize,
    live: usize,
    max_size: u64,
    duration: Duration,
) -> ThreadScaling {
    const CHUNK: u64 = 1024;
    let (ops, longest) = on_threads(threads, |t, barrier| {
        let mut churn = (live > 0).then(|| PoolChurn::new(pool, ChurnSequence::new(live, 256, max_size, t as u64 + 1)));
        barrier.wait();
        let start = Instant::now();
        let mut ops = 0;
        while start.elapsed() < duration {
            match churn.as_mut() {
                Some(churn) => churn.run(CHUNK),
                None => run_pair(pool, max_size, CHUNK),
            }
            ops += CHUNK;
        }
        (ops, start.elapsed())
    });
    let total = (ops as f64 / longest.unwrap_or(duration).as_secs_f64()) as u64;
    ThreadScaling { threads, ops_per_second: total as f64 }
}

/// Runs `work(t, barrier)` on threads `0..threads` at once, each passing `barrier` once its setup is done,
/// and returns the operations all of them counted and the longest time one of them took (`None` for no
/// threads). `work` returns its operations and its time.
///
/// # Panics
/// Where a thread panics.
pub(crate) fn on_threads(
    threads: usize,
    work: impl Fn(usize, &Barrier) -> (u64, Duration) + Sync,
) -> (u64, Option<Duration>) {
    let barrier = Barrier::new(threads);
    let results: Vec<(u64, Duration)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, work) = (&barrier, &work);
                scope.spawn(move || work(t, barrier))
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("a bench thread")).collect()
    });
    (results.iter().map(|r| r.0).sum(), results.iter().map(|r| r.1).max())
}
