//! Eight threads, a hundred thousand mixed operations each, on host memory with canaries; blocks are
//! handed between threads so that frees happen away from their allocations. Eighty threads, more than
//! there are thread slots (63), so that some share a slot and take its shared paths. And eight threads on
//! four streams, so that blocks freed on one stream are reused on another while the others run.

mod common;

use std::sync::{Arc, Barrier, Mutex};

use common::{Device, Shape, canary_words};
use vrampool::{Allocation, Error, StreamId};

const THREADS: usize = 8;
const OPS: usize = 100_000;
/// More threads than thread slots, fewer operations each.
const MANY_THREADS: usize = 80;
const MANY_OPS: usize = 10_000;

/// A small deterministic generator, one per thread.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

fn stress(shape: Shape) {
    stress_with(shape, THREADS, OPS, 1);
}

/// `threads` threads of `ops` operations each on `shape`; thread `t` allocates on stream `t % streams`.
fn stress_with(shape: Shape, threads: usize, ops: usize, streams: u64) {
    let device = Device::host(shape.granularity());
    let pool = shape.build(&device);
    let exchange: Arc<Mutex<Vec<(Allocation, u64)>>> = Arc::default();
    let barrier = Arc::new(Barrier::new(threads));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (pool, device, exchange, barrier) = (pool.clone(), device.clone(), exchange.clone(), barrier.clone());
            std::thread::spawn(move || {
                let host = device.host_memory().unwrap();
                let mut rng = Lcg(t as u64 + 1);
                let mut held: Vec<(Allocation, u64)> = Vec::new();
                let check = |(a, canary): &(Allocation, u64)| {
                    for word in canary_words(a) {
                        host.check(word, 8, *canary).unwrap_or_else(|e| panic!("thread {t}: {a:?}: {e}"));
                    }
                };
                barrier.wait();
                for op in 0..ops {
                    let roll = rng.next() % 100;
                    if roll < 50 && held.len() < 48 {
                        let size = match rng.next() % 20 {
                            0 => 256 * 1024 + rng.next() % (1 << 20),
                            1..=4 => 4096 + rng.next() % 60_000,
                            _ => 1 + rng.next() % 4096,
                        };
                        match pool.allocate(size, 256, StreamId(t as u64 % streams)) {
                            Ok(a) => {
                                let canary = ((t as u64) << 56) | op as u64;
                                for word in canary_words(&a) {
                                    host.fill(word, 8, canary).unwrap();
                                }
                                held.push((a, canary));
                            }
                            Err(Error::OutOfMemory { .. } | Error::BlockTooSmall { .. }) => {}
                            Err(err) => panic!("thread {t}: {err}"),
                        }
                    } else if roll < 55 && !held.is_empty() {
                        let block = held.swap_remove(rng.next() as usize % held.len());
                        exchange.lock().unwrap().push(block);
                    } else if roll < 60 {
                        let taken = exchange.lock().unwrap().pop();
                        if let Some(block) = taken {
                            held.push(block);
                        }
                    } else if !held.is_empty() {
                        let block = held.swap_remove(rng.next() as usize % held.len());
                        check(&block);
                        pool.free(block.0.addr).unwrap_or_else(|e| panic!("thread {t}: {e}"));
                    }
                }
                for block in held {
                    check(&block);
                    pool.free(block.0.addr).unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    for (block, canary) in exchange.lock().unwrap().drain(..) {
        let host = device.host_memory().unwrap();
        for word in canary_words(&block) {
            host.check(word, 8, canary).unwrap();
        }
        pool.free(block.addr).unwrap();
    }
    let stats = pool.stats();
    assert_eq!(stats.allocated_bytes.current, 0, "{shape:?}: {stats:?}");
    assert_eq!(stats.active_allocations, 0);
    assert_eq!(stats.allocations, stats.frees);
    assert!(stats.allocations > (threads * ops / 4) as u64, "{shape:?}: {stats:?}");
    assert!(pool.report().blocks.is_empty());
    pool.trim().unwrap();
    drop(pool);
    assert_eq!(device.used_bytes(), 0, "{shape:?}: all memory returned");
}

#[test]
fn fixed_pool_under_eight_threads() {
    stress(Shape::FixedBackendFallback);
}

#[test]
fn dynamic_pool_on_segments_under_eight_threads() {
    stress(Shape::DynamicSegments);
}

#[test]
fn dynamic_pool_on_virtual_memory_under_eight_threads() {
    stress(Shape::DynamicVirtual);
}

#[test]
fn hybrid_pool_learning_on_virtual_memory_under_eight_threads() {
    stress(Shape::HybridLearnedVirtual);
}

#[test]
fn hybrid_pool_with_given_classes_under_eight_threads() {
    stress(Shape::HybridGivenSegments);
}

#[test]
fn hybrid_pool_draining_its_classes_under_eight_threads() {
    stress(Shape::HybridDraining);
}

#[test]
fn adaptive_pool_under_eight_threads() {
    stress(Shape::Adaptive);
}

#[test]
fn hybrid_pool_over_adaptive_pages_under_eight_threads() {
    stress(Shape::HybridAdaptivePages);
}

#[test]
fn adaptive_pool_on_four_streams_under_eight_threads() {
    stress_with(Shape::Adaptive, THREADS, OPS, 4);
}

#[test]
fn fixed_pool_under_more_threads_than_slots() {
    stress_with(Shape::FixedBackendFallback, MANY_THREADS, MANY_OPS, 1);
}

#[test]
fn hybrid_pool_under_more_threads_than_slots() {
    stress_with(Shape::HybridLearnedVirtual, MANY_THREADS, MANY_OPS, 1);
}

/// Eight threads on four streams (thread `t` on stream `t % 4`), blocks freed by other threads than theirs:
/// reuse across streams is ordered by events, concurrently with everything else.
#[test]
fn hybrid_pool_on_four_streams_under_eight_threads() {
    stress_with(Shape::HybridDraining, THREADS, OPS, 4);
}

#[test]
fn dynamic_pool_on_four_streams_under_eight_threads() {
    stress_with(Shape::DynamicVirtual, THREADS, OPS, 4);
}
