//! The shards of a dynamic pool: independent regions, each behind its own lock, that threads contending
//! for one spread over.
//!
//! A pool starts with one shard, and every thread allocates there. A thread that keeps finding its shard's
//! lock taken ([`MOVE_AFTER`] times within [`WINDOW`]) while other threads allocate there too moves to
//! another, opened for it where every open one already has threads: so a program whose threads take turns
//! (one thread at a time, or a second thread that rarely meets the first) keeps all its memory in one shard,
//! and only threads that really allocate at once pay for a shard each, in memory one shard cannot lend
//! another. A block is freed in the shard that holds it, found by its address.

use std::ops::Range;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};

use crate::thread_slot::ALL_SLOTS;

/// The most shards a pool may open ([`crate::DynamicConfig::shards`]).
pub const MAX_SHARDS: usize = 64;

/// A thread moves to another shard once it has found its shard's lock taken this many times within
/// [`WINDOW`]. Counted in time rather than against the acquisitions that found the lock free: threads
/// that contend for a lock take turns in long runs, each parked while the other runs, so that a thread
/// finds the lock taken once per run of hundreds of acquisitions, and each time waits for a wake (the lock
/// hands itself over fairly about every half millisecond).
const MOVE_AFTER: u32 = 8;

/// The window [`MOVE_AFTER`] contended acquisitions must fall in: a program whose threads meet only now
/// and then never moves.
const WINDOW: Duration = Duration::from_millis(10);

/// A home not chosen yet: the thread has not allocated from the pool.
const NO_HOME: usize = usize::MAX;

/// One shard: its state behind a lock, and the addresses it holds.
#[derive(Debug)]
struct Shard<S> {
    state: CachePadded<Mutex<S>>,
    /// The addresses the shard's blocks lie in (every address where it is the only shard possible).
    addresses: Range<u64>,
}

/// A thread slot's shard, and how often it found that shard's lock taken lately.
#[derive(Debug)]
struct Home {
    shard: AtomicUsize,
    /// Contended acquisitions since `since`.
    contended: AtomicU32,
    /// When the current window of contended acquisitions began, in nanoseconds from the set's start.
    since: AtomicU64,
}

/// Up to a configured number of shards of state `S`, opened as contention asks for them, and the shard
/// each thread slot allocates in.
///
/// Costs: choosing a thread's shard is a read of its slot's line and a `try_lock`; finding a block's
/// shard, one comparison per open shard.
#[derive(Debug)]
pub(super) struct ShardSet<S> {
    shards: Box<[OnceLock<Shard<S>>]>,
    /// Shards open: those at indices below it.
    open: AtomicUsize,
    /// Per thread slot, its shard and contention score, each in a line of its own.
    homes: Box<[CachePadded<Home>]>,
    /// Per shard, the thread slots that chose it as their home.
    residents: Box<[AtomicU32]>,
    /// Held while a shard is opened.
    opening: Mutex<()>,
    /// The set's start, the origin of [`Home::since`].
    start: Instant,
}

impl<S> ShardSet<S> {
    /// A set of at most `most` shards (at least 1, at most [`MAX_SHARDS`]) whose first is `first`, holding
    /// the addresses `addresses`.
    pub(super) fn new(first: S, addresses: Range<u64>, most: usize) -> Self {
        let most = most.clamp(1, MAX_SHARDS);
        let shards: Box<[OnceLock<Shard<S>>]> = (0..most).map(|_| OnceLock::new()).collect();
        let _ = shards[0].set(Shard { state: CachePadded::new(Mutex::new(first)), addresses });
        ShardSet {
            shards,
            open: AtomicUsize::new(1),
            homes: (0..ALL_SLOTS)
                .map(|_| {
                    CachePadded::new(Home {
                        shard: AtomicUsize::new(NO_HOME),
                        contended: AtomicU32::new(0),
                        since: AtomicU64::new(0),
                    })
                })
                .collect(),
            residents: (0..most).map(|_| AtomicU32::new(0)).collect(),
            opening: Mutex::new(()),
            start: Instant::now(),
        }
    }

    /// The shards open now.
    pub(super) fn open_count(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// The lock of open shard `index`.
    ///
    /// # Panics
    /// Where shard `index` is not open.
    pub(super) fn lock_of(&self, index: usize) -> &Mutex<S> {
        &self.shards[index].get().expect("an open shard").state
    }

    /// Shard `index`'s lock, taken for a free. A free of a block another thread's shard holds finds that
    /// lock taken nearly always, by a thread that holds it for one operation at a time and takes it again at
    /// once: the free tries it again for a few microseconds before it waits to be woken, a park and a wake
    /// that cost both threads more than the wait (docs/BENCHMARKS.md).
    ///
    /// # Panics
    /// Where shard `index` is not open.
    #[inline]
    pub(super) fn lock_for_free(&self, index: usize) -> MutexGuard<'_, S> {
        let lock = self.lock_of(index);
        match lock.try_lock() {
            Some(guard) => guard,
            None => spin_then_lock(lock),
        }
    }

    /// Every open shard's lock, by index.
    pub(super) fn locks(&self) -> impl Iterator<Item = &Mutex<S>> {
        self.shards[..self.open_count()].iter().filter_map(|shard| shard.get().map(|shard| &*shard.state))
    }

    /// Every open shard's lock, for dropping the set.
    pub(super) fn locks_mut(&mut self) -> impl Iterator<Item = &mut Mutex<S>> {
        self.shards.iter_mut().filter_map(|shard| shard.get_mut().map(|shard| &mut *shard.state))
    }

    /// The shard whose addresses hold `addr`; the first where none does (its error then says why).
    #[inline]
    pub(super) fn owner_of(&self, addr: u64) -> usize {
        let open = self.open_count();
        if open > 1 {
            for (index, shard) in self.shards[..open].iter().enumerate().skip(1) {
                if shard.get().is_some_and(|shard| shard.addresses.contains(&addr)) {
                    return index;
                }
            }
        }
        0
    }

    /// The shard thread slot `slot` allocates in, locked: its home, where the lock is free or the thread
    /// has not contended for it lately; else, once it has, another shard (`open` makes a new one, with its
    /// addresses, where every open shard has threads and fewer than the most are open; `None` where it
    /// cannot, and the thread stays). Returns the shard's index and its guard.
    #[inline]
    pub(super) fn lock_home(
        &self,
        slot: usize,
        open: impl FnOnce() -> Option<(S, Range<u64>)>,
    ) -> (usize, MutexGuard<'_, S>) {
        let index = self.home_of(slot);
        let lock = self.lock_of(index);
        if let Some(guard) = lock.try_lock() {
            return (index, guard);
        }
        self.contended(slot, index, open)
    }

    /// Thread slot `slot`'s shard: the first, counted among its residents, where the slot has none yet.
    #[inline]
    fn home_of(&self, slot: usize) -> usize {
        let home = &self.homes[slot].shard;
        match home.load(Ordering::Relaxed) {
            NO_HOME => {
                home.store(0, Ordering::Relaxed);
                self.residents[0].fetch_add(1, Ordering::Relaxed);
                0
            }
            index => index,
        }
    }

    /// Moves thread slot `slot` from shard `from` to shard `to`, its residents counted there.
    fn rehome(&self, slot: usize, from: usize, to: usize) {
        self.residents[from].fetch_sub(1, Ordering::Relaxed);
        self.residents[to].fetch_add(1, Ordering::Relaxed);
        self.homes[slot].shard.store(to, Ordering::Relaxed);
    }

    /// The slow path of [`ShardSet::lock_home`]: the home's lock was taken.
    #[cold]
    fn contended(
        &self,
        slot: usize,
        mut index: usize,
        open: impl FnOnce() -> Option<(S, Range<u64>)>,
    ) -> (usize, MutexGuard<'_, S>) {
        let home = &self.homes[slot];
        let now = self.start.elapsed().as_nanos() as u64;
        let count = if now.saturating_sub(home.since.load(Ordering::Relaxed)) > WINDOW.as_nanos() as u64 {
            home.since.store(now, Ordering::Relaxed);
            1
        } else {
            home.contended.load(Ordering::Relaxed) + 1
        };
        // A thread alone in its shard contends only with frees of the shard's blocks by other threads, which
        // follow the blocks wherever it goes: it stays.
        let alone = self.residents[index].load(Ordering::Relaxed) <= 1;
        if count < MOVE_AFTER || self.shards.len() == 1 || alone {
            home.contended.store(count, Ordering::Relaxed);
        } else {
            home.contended.store(0, Ordering::Relaxed);
            if let Some(target) = self.new_home(index, open) {
                self.rehome(slot, index, target);
                index = target;
            }
        }
        (index, self.lock_of(index).lock())
    }

    /// Moves thread slot `slot` as contention would, at once: to a shard no thread has chosen, opened by
    /// `open` where none is; returns its new shard.
    #[cfg(test)]
    pub(super) fn move_home(&self, slot: usize, open: impl FnOnce() -> Option<(S, Range<u64>)>) -> usize {
        let current = self.home_of(slot);
        let target = self.new_home(current, open).unwrap_or(current);
        self.rehome(slot, current, target);
        target
    }

    /// The shard a thread contending in shard `current` moves to: an open one no thread has chosen, else a
    /// new one, else the open one with the fewest threads where that is fewer than `current` has besides
    /// the mover; `None` to stay.
    fn new_home(&self, current: usize, open: impl FnOnce() -> Option<(S, Range<u64>)>) -> Option<usize> {
        let _opening = self.opening.lock();
        let count = self.open_count();
        let residents = |i: usize| self.residents[i].load(Ordering::Relaxed);
        let fewest = (0..count).filter(|&i| i != current).min_by_key(|&i| residents(i));
        if let Some(empty) = fewest.filter(|&i| residents(i) == 0) {
            return Some(empty);
        }
        if count < self.shards.len()
            && let Some((state, addresses)) = open()
        {
            let _ = self.shards[count].set(Shard { state: CachePadded::new(Mutex::new(state)), addresses });
            self.open.store(count + 1, Ordering::Release);
            return Some(count);
        }
        fewest.filter(|&i| residents(i) + 1 < residents(current))
    }
}

/// Tries `lock` up to [`FREE_TRIES`] times, a pause or two apart, then waits for it.
#[cold]
fn spin_then_lock<S>(lock: &Mutex<S>) -> MutexGuard<'_, S> {
    for _ in 0..FREE_TRIES {
        std::hint::spin_loop();
        std::hint::spin_loop();
        if let Some(guard) = lock.try_lock() {
            return guard;
        }
    }
    lock.lock()
}

/// The tries of a contended lock a free makes before it waits to be woken ([`ShardSet::lock_for_free`]):
/// a few microseconds' worth.
const FREE_TRIES: u32 = 4096;

#[cfg(test)]
mod tests {
    use std::sync::Barrier;

    use super::*;
    use crate::thread_slot;

    #[test]
    fn a_lone_thread_stays_in_the_first_shard() {
        let set = ShardSet::new(0u64, 0..100, 8);
        let slot = thread_slot::current().index;
        for _ in 0..10_000 {
            let (index, mut guard) = set.lock_home(slot, || panic!("no shard is opened without contention"));
            assert_eq!(index, 0);
            *guard += 1;
        }
        assert_eq!(set.open_count(), 1);
        assert_eq!(*set.lock_of(0).lock(), 10_000);
    }

    #[test]
    fn contending_threads_spread_over_new_shards_and_addresses_find_theirs() {
        let set = ShardSet::new(0u64, 0..100, 4);
        let opened = AtomicUsize::new(0);
        let threads = 4;
        let barrier = Barrier::new(threads);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let done: u64 = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| {
                        let slot = thread_slot::current().index;
                        barrier.wait();
                        let mut done = 0;
                        // Until contention has opened a second shard (or the deadline, on a host too
                        // busy to run two of them at once).
                        while set.open_count() < 2 && std::time::Instant::now() < deadline {
                            for _ in 0..1000 {
                                let (_, mut guard) = set.lock_home(slot, || {
                                    let n = opened.fetch_add(1, Ordering::Relaxed) as u64 + 1;
                                    Some((0, n * 100..(n + 1) * 100))
                                });
                                // Work under the lock long enough that a second thread finds it taken.
                                for _ in 0..50 {
                                    *guard = std::hint::black_box(*guard + 1);
                                }
                                done += 50;
                            }
                        }
                        done
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).sum()
        });
        let total: u64 = set.locks().map(|lock| *lock.lock()).sum();
        assert_eq!(total, done, "every increment landed in one shard or another");
        assert_eq!(set.open_count(), 1 + opened.load(Ordering::Relaxed));
        assert!(set.open_count() > 1, "threads contending for one lock opened no other shard");
        assert!(set.open_count() <= 4, "at most the configured shards");
        for index in 0..set.open_count() {
            assert_eq!(set.owner_of(index as u64 * 100 + 7), index);
        }
        assert_eq!(set.owner_of(10_000), 0, "an address no shard holds goes to the first");
    }

    #[test]
    fn a_thread_alone_in_its_shard_stays_however_often_frees_take_the_lock() {
        let set = ShardSet::new(0u64, 0..100, 4);
        let done = std::sync::atomic::AtomicBool::new(false);
        let asked_to_open = std::sync::atomic::AtomicBool::new(false);
        let barrier = Barrier::new(2);
        std::thread::scope(|scope| {
            // Frees of the shard's blocks by another thread: the lock taken, no home chosen.
            scope.spawn(|| {
                barrier.wait();
                while !done.load(Ordering::Relaxed) {
                    let mut guard = set.lock_of(0).lock();
                    for _ in 0..200 {
                        *guard = std::hint::black_box(*guard + 1);
                    }
                }
            });
            scope.spawn(|| {
                let slot = thread_slot::current().index;
                barrier.wait();
                let start = std::time::Instant::now();
                while start.elapsed() < std::time::Duration::from_millis(300) {
                    let (index, mut guard) = set.lock_home(slot, || {
                        asked_to_open.store(true, Ordering::Relaxed);
                        None
                    });
                    assert_eq!(index, 0);
                    *guard += 1;
                }
                done.store(true, Ordering::Relaxed);
            });
        });
        assert!(!asked_to_open.load(Ordering::Relaxed), "a thread alone in its shard asked for another");
        assert_eq!(set.open_count(), 1);
    }

    #[test]
    fn a_free_gets_a_lock_held_long_past_its_tries() {
        let set = ShardSet::new(0u64, 0..100, 2);
        let held = set.lock_of(0).lock();
        let barrier = Barrier::new(2);
        std::thread::scope(|scope| {
            let freer = scope.spawn(|| {
                barrier.wait();
                *set.lock_for_free(0) += 1;
            });
            barrier.wait();
            // Longer than the tries take: the free waits to be woken.
            std::thread::sleep(std::time::Duration::from_millis(50));
            drop(held);
            freer.join().unwrap();
        });
        assert_eq!(*set.lock_of(0).lock(), 1);
        assert_eq!(*set.lock_for_free(0), 1, "a free lock is taken at once");
    }

    #[test]
    fn one_shard_at_most_never_moves_a_thread() {
        let set = ShardSet::new((), 0..u64::MAX, 1);
        std::thread::scope(|scope| {
            for _ in 0..3 {
                scope.spawn(|| {
                    let slot = thread_slot::current().index;
                    for _ in 0..20_000 {
                        let (index, _guard) = set.lock_home(slot, || panic!("the one shard is the most"));
                        assert_eq!(index, 0);
                    }
                });
            }
        });
        assert_eq!(set.open_count(), 1);
    }
}
