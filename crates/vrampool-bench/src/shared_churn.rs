//! Throughput of a pool that several threads churn at once, each on a stream of its own, freeing blocks the
//! others made.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use vrampool::{DEFAULT_ALIGNMENT, Pool, StreamId};

use crate::churn_sequence::ChurnSequence;
use crate::thread_scaling::{ThreadScaling, on_threads};

/// One step in this many hands the block it would free to the next thread, which frees it.
pub const HANDOFF_EVERY: usize = 8;

/// Steps between two looks at a thread's mailbox (and between two looks at the clock).
const CHUNK: u64 = 256;

/// The most blocks a mailbox holds: a thread whose next thread has not yet emptied its mailbox of two looks'
/// worth frees the blocks it would hand over itself, so that the blocks live stay bounded however the
/// threads are scheduled (a thread descheduled for a while would otherwise let its mailbox grow without
/// bound, and the pool hold blocks the churn never meant to keep).
pub const MAILBOX_MOST: usize = 2 * (CHUNK as usize).div_ceil(HANDOFF_EVERY);

/// Runs `threads` threads on `pool` for about `duration`. Thread `t` allocates on stream `t + 1` a churn of
/// `live` blocks of log-uniform sizes from 256 B to `max_size` (its own sequence); each step frees one of its
/// blocks and allocates one, except that one step in [`HANDOFF_EVERY`] hands its block to the next thread
/// instead, which frees it (on the block's stream, from another thread) at its next look at its mailbox,
/// unless that mailbox already holds [`MAILBOX_MOST`] blocks (the thread then frees them itself).
/// Returns the operations per second of all threads together, an operation being one allocation or one
/// free; every block is freed before it returns.
///
/// # Panics
/// Where the pool refuses an allocation or a free of the churn.
pub fn shared_churn_throughput<P: Pool + ?Sized>(
    pool: &P,
    threads: usize,
    live: usize,
    max_size: u64,
    duration: Duration,
) -> ThreadScaling {
    churn_on_pools(&[pool], threads, live, max_size, duration)
}

/// [`shared_churn_throughput`] with thread `t` allocating from `pools[t % pools.len()]`: with a pool per
/// thread, the same churn and the same blocks handed over (each freed into the pool it came from) with
/// nothing of a pool shared between the threads that allocate from it, the ceiling a shared pool is
/// measured against.
///
/// # Panics
/// Where `pools` is empty, or a pool refuses an allocation or a free of the churn.
pub fn churn_on_pools<P: Pool + ?Sized>(
    pools: &[&P],
    threads: usize,
    live: usize,
    max_size: u64,
    duration: Duration,
) -> ThreadScaling {
    assert!(!pools.is_empty(), "a churn needs a pool");
    let threads = threads.max(1);
    // Blocks handed over, with the index of the pool each came from.
    let mailboxes: Vec<Mutex<Vec<(usize, u64)>>> = (0..threads).map(|_| Mutex::new(Vec::new())).collect();
    let free = |(pool, addr): (usize, u64)| pools[pool].free(addr).expect("a handed block frees");
    let (ops, longest) = on_threads(threads, |t, barrier| {
        let stream = StreamId(t as u64 + 1);
        let home = t % pools.len();
        let pool = pools[home];
        let sequence = ChurnSequence::new(live, 256, max_size, t as u64 + 1);
        let allocate = |size: u64| pool.allocate(size, DEFAULT_ALIGNMENT, stream).expect("the pool holds the churn");
        let mut blocks: Vec<u64> = sequence.initial.iter().map(|&size| allocate(size).addr).collect();
        let next = &mailboxes[(t + 1) % threads];
        let mut handed = Vec::new();
        let mut step = 0;
        barrier.wait();
        let start = Instant::now();
        let mut ops = 0;
        while start.elapsed() < duration {
            for _ in 0..CHUNK {
                let (victim, size) = sequence.steps[step % sequence.steps.len()];
                if step % HANDOFF_EVERY == 0 {
                    handed.push((home, blocks[victim]));
                } else {
                    pool.free(blocks[victim]).expect("a live block frees");
                    ops += 1;
                }
                blocks[victim] = allocate(size).addr;
                ops += 1;
                step += 1;
            }
            {
                let mut mailbox = next.lock().expect("a mailbox");
                if mailbox.len() < MAILBOX_MOST {
                    mailbox.append(&mut handed);
                }
            }
            // Where the next thread's mailbox was full, the blocks are still here.
            for block in handed.drain(..) {
                free(block);
                ops += 1;
            }
            let mine = std::mem::take(&mut *mailboxes[t].lock().expect("a mailbox"));
            for block in mine {
                free(block);
                ops += 1;
            }
        }
        let took = start.elapsed();
        for addr in blocks {
            pool.free(addr).expect("a live block frees");
        }
        (ops, took)
    });
    for mailbox in &mailboxes {
        std::mem::take(&mut *mailbox.lock().expect("a mailbox")).into_iter().for_each(free);
    }
    ThreadScaling { threads, ops_per_second: ops as f64 / longest.unwrap_or(duration).as_secs_f64() }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use vrampool::{AdaptiveConfig, AdaptivePool, SimDevice};

    use super::*;

    #[test]
    fn threads_free_each_others_blocks_and_leave_the_pool_empty() {
        let pool = AdaptivePool::new(Arc::new(SimDevice::default()), AdaptiveConfig::default()).unwrap();
        for threads in [1, 3] {
            let result = shared_churn_throughput(&pool, threads, 50, 1 << 20, Duration::from_millis(30));
            assert_eq!(result.threads, threads);
            assert!(result.ops_per_second > 0.0);
            assert_eq!(pool.stats().allocated_bytes.current, 0, "{threads} threads left blocks live");
        }
        assert!(pool.stats().allocations > 3 * 50, "{:?}", pool.stats());
    }

    #[test]
    fn with_a_pool_per_thread_each_handed_block_goes_back_to_its_own_pool() {
        let pools: Vec<AdaptivePool> = (0..3)
            .map(|_| AdaptivePool::new(Arc::new(SimDevice::default()), AdaptiveConfig::default()).unwrap())
            .collect();
        let refs: Vec<&AdaptivePool> = pools.iter().collect();
        let result = churn_on_pools(&refs, 3, 50, 1 << 20, Duration::from_millis(30));
        assert!(result.ops_per_second > 0.0);
        for pool in &pools {
            let stats = pool.stats();
            assert!(stats.allocations > 50, "each thread allocated from its own pool: {stats:?}");
            assert_eq!(stats.allocated_bytes.current, 0, "every block went back to its pool");
            assert_eq!(stats.frees, stats.allocations, "{stats:?}");
        }
    }
}
