//! The allocation counters behind [`crate::PoolStats`]: allocated bytes (now and at the peak), allocations
//! and frees. (Reserved bytes and device events: [`ReservedCounters`](super::ReservedCounters).)
//!
//! Each thread slot keeps, in a cache line only its own thread writes (plain loads and stores when the
//! slot is the thread's alone), its counts of allocations and frees and the allocated bytes it has not yet
//! added to the pool-wide sum. It adds them when they reach [`FLUSH_BYTES`] either way, except right after
//! an allocation larger than that, which may stay pending up to twice its size: the pool-wide sum is
//! written about once per 16 MiB allocated or freed, and a pair of one large size (64 MiB allocated, then
//! freed) never writes it (with a fixed bound, each allocation and free larger than it would be an atomic
//! read-modify-write on the shared line).
//!
//! - Allocated bytes now (the pool-wide sum plus every slot's pending bytes) are exact when read.
//! - The peak: each slot keeps the highest its pending bytes reached since its last hand-over, in its own
//!   cache line; a hand-over raises the pool-wide peak to the sum before it plus that high mark, and a
//!   reading takes the largest of the pool-wide peak and the sum plus each slot's high mark. No allocation
//!   reads a shared line for it. Exact while one thread uses the pool. Under several threads a slot's
//!   high mark is added to the sum as it is when read, not as it was when the mark was set: the peak can
//!   exceed the true one by at most one slot's high mark (below [`FLUSH_BYTES`], or twice that slot's
//!   latest allocation if that is larger) per other thread, and fall short of it by at most the other
//!   threads' pending bytes. Only allocations may stay pending past [`FLUSH_BYTES`]: a free's bytes are
//!   handed over at it, which keeps the peak read while another thread frees near the true one.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::thread_slot::{ALL_SLOTS, ThreadSlot};

/// Allocated bytes a slot keeps to itself before adding them to the pool-wide sum.
pub(crate) const FLUSH_BYTES: i64 = 16 << 20;

/// One slot's counts, pending bytes and their high mark.
#[derive(Debug, Default)]
struct SlotCounts {
    allocations: AtomicU64,
    frees: AtomicU64,
    pending: AtomicI64,
    /// The most `pending` reached since the slot last handed its bytes over (0 right after).
    high: AtomicI64,
}

/// Allocated bytes (live and peak) and the allocations and frees of one pool, counted per thread slot.
#[derive(Debug)]
pub(crate) struct StatsCounters {
    allocated: CachePadded<AtomicI64>,
    allocated_peak: CachePadded<AtomicU64>,
    slots: Box<[CachePadded<SlotCounts>]>,
}

impl Default for StatsCounters {
    fn default() -> Self {
        StatsCounters {
            allocated: CachePadded::new(AtomicI64::new(0)),
            allocated_peak: CachePadded::new(AtomicU64::new(0)),
            slots: (0..ALL_SLOTS).map(|_| CachePadded::new(SlotCounts::default())).collect(),
        }
    }
}

/// A reading of a pool's allocation counts ([`StatsCounters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CounterReading {
    pub(crate) allocated: u64,
    pub(crate) allocated_peak: u64,
    pub(crate) allocations: u64,
    pub(crate) frees: u64,
}

impl StatsCounters {
    /// Counts an allocation of `bytes` requested bytes by the thread in `slot`.
    #[inline(always)]
    pub(crate) fn on_allocate(&self, slot: ThreadSlot, bytes: u64) {
        let counts = &self.slots[slot.index];
        slot.bump(&counts.allocations);
        let delta = bytes as i64;
        if !slot.exclusive {
            let now = self.allocated.fetch_add(delta, Ordering::Relaxed) + delta;
            self.raise_peak(now);
            return;
        }
        // Pending bytes were above -FLUSH_BYTES before, so only the upper bound can be passed.
        let pending = counts.pending.load(Ordering::Relaxed) + delta;
        if pending >= FLUSH_BYTES.max(delta.saturating_mul(2)) {
            return self.hand_over(counts, pending);
        }
        counts.pending.store(pending, Ordering::Relaxed);
        // Stored whether or not it rose, without a branch: the slot's line is written either way, and whether
        // a churn's pending bytes reach a new high follows no pattern a branch predictor learns
        // (docs/BENCHMARKS.md).
        let high = counts.high.load(Ordering::Relaxed);
        counts.high.store(high.max(pending), Ordering::Relaxed);
    }

    /// Counts a free of an allocation of `bytes` requested bytes by the thread in `slot`.
    #[inline(always)]
    pub(crate) fn on_free(&self, slot: ThreadSlot, bytes: u64) {
        let counts = &self.slots[slot.index];
        slot.bump(&counts.frees);
        if !slot.exclusive {
            self.allocated.fetch_sub(bytes as i64, Ordering::Relaxed);
            return;
        }
        // Pending bytes were below the upper bound before, so only -FLUSH_BYTES can be passed.
        let pending = counts.pending.load(Ordering::Relaxed) - bytes as i64;
        if pending <= -FLUSH_BYTES {
            return self.hand_over(counts, pending);
        }
        counts.pending.store(pending, Ordering::Relaxed);
    }

    /// Adds an exclusive slot's `pending` bytes (its stored ones plus the operation's) to the pool-wide
    /// sum, first raising the peak to the sum plus the slot's high mark.
    #[cold]
    fn hand_over(&self, counts: &SlotCounts, pending: i64) {
        let high = counts.high.load(Ordering::Relaxed).max(pending);
        // The bytes enter the sum before they leave the slot: a reader at that instant counts them twice,
        // never misses them.
        let before = self.allocated.fetch_add(pending, Ordering::Relaxed);
        self.raise_peak(before + high);
        counts.pending.store(0, Ordering::Relaxed);
        counts.high.store(0, Ordering::Relaxed);
    }

    /// Raises the pool-wide peak of allocated bytes to `now`.
    fn raise_peak(&self, now: i64) {
        let now = now.max(0) as u64;
        if now > self.allocated_peak.load(Ordering::Relaxed) {
            self.allocated_peak.fetch_max(now, Ordering::Relaxed);
        }
    }

    /// Starts the peak again from the bytes live now: the pool-wide peak becomes the bytes live, and each
    /// slot's high mark all slots' pending bytes, so that a reading (the sum plus the highest mark) gives the
    /// bytes live until an allocation raises it. An operation running meanwhile on another thread may raise
    /// the new peak by its own bytes, as a reading taken then would.
    pub(crate) fn reset_peak(&self) {
        let pending: i64 = self.slots.iter().map(|c| c.pending.load(Ordering::Relaxed)).sum();
        for counts in self.slots.iter() {
            counts.high.store(pending, Ordering::Relaxed);
        }
        self.allocated_peak.store(self.allocated(), Ordering::Relaxed);
    }

    /// Bytes live now.
    pub(crate) fn allocated(&self) -> u64 {
        let pending: i64 = self.slots.iter().map(|c| c.pending.load(Ordering::Relaxed)).sum();
        (self.allocated.load(Ordering::Relaxed) + pending).max(0) as u64
    }

    /// How many thread slots have counted an allocation: about the threads that have used the pool (a
    /// slot one thread gave back and another took counts once).
    pub(crate) fn slots_counted(&self) -> usize {
        self.slots.iter().filter(|counts| counts.allocations.load(Ordering::Relaxed) > 0).count()
    }

    /// Reads every counter.
    pub(crate) fn read(&self) -> CounterReading {
        let mut reading = CounterReading::default();
        for counts in self.slots.iter() {
            reading.allocations += counts.allocations.load(Ordering::Relaxed);
            reading.frees += counts.frees.load(Ordering::Relaxed);
        }
        reading.allocated = self.allocated();
        let sum = self.allocated.load(Ordering::Relaxed);
        let highest = self.slots.iter().map(|c| c.high.load(Ordering::Relaxed)).max().unwrap_or(0);
        reading.allocated_peak =
            self.allocated_peak.load(Ordering::Relaxed).max(reading.allocated).max((sum + highest).max(0) as u64);
        reading
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn on_allocate(c: &StatsCounters, bytes: u64) {
        c.on_allocate(crate::thread_slot::current(), bytes);
    }

    fn on_free(c: &StatsCounters, bytes: u64) {
        c.on_free(crate::thread_slot::current(), bytes);
    }

    #[test]
    fn one_thread_is_exact() {
        let c = StatsCounters::default();
        on_allocate(&c, 100);
        on_allocate(&c, 50);
        on_free(&c, 100);
        on_allocate(&c, 10);
        let r = c.read();
        assert_eq!((r.allocated, r.allocated_peak, r.allocations, r.frees), (60, 150, 3, 1));
    }

    proptest::proptest! {
        /// Any sequence of allocations and frees on one thread, small and large, reads the exact live
        /// bytes and peak after every operation, across hand-overs in both directions.
        #[test]
        fn one_thread_reads_the_exact_peak_after_every_operation(
            ops in proptest::collection::vec((proptest::bool::ANY, 1u64..(40 << 20)), 1..300)
        ) {
            let c = StatsCounters::default();
            let mut live: Vec<u64> = Vec::new();
            let (mut now, mut peak) = (0u64, 0u64);
            for (allocate, bytes) in ops {
                if allocate || live.is_empty() {
                    on_allocate(&c, bytes);
                    live.push(bytes);
                    now += bytes;
                    peak = peak.max(now);
                } else {
                    let freed = live.swap_remove(bytes as usize % live.len());
                    on_free(&c, freed);
                    now -= freed;
                }
                let r = c.read();
                proptest::prop_assert_eq!((r.allocated, r.allocated_peak), (now, peak));
            }
        }
    }

    /// Two threads alternating, as PyTorch's main and autograd threads do: the peak misses at most the
    /// other thread's pending bytes.
    #[test]
    fn threads_taking_turns_are_within_the_flush_bound() {
        let c = Arc::new(StatsCounters::default());
        let big = 3 * FLUSH_BYTES as u64;
        for round in 0..50u64 {
            on_allocate(&c, 10 + round);
            let other = c.clone();
            std::thread::spawn(move || {
                on_allocate(&other, big);
                on_free(&other, big);
            })
            .join()
            .unwrap();
            on_free(&c, 10 + round);
        }
        let r = c.read();
        assert_eq!(r.allocated, 0);
        assert!(r.allocated_peak >= big && r.allocated_peak <= big + 59, "{}", r.allocated_peak);
        assert_eq!((r.allocations, r.frees), (100, 100));
    }

    #[test]
    fn pending_bytes_reach_the_sum_and_the_reading() {
        let c = StatsCounters::default();
        for _ in 0..100 {
            on_allocate(&c, 1 << 20);
        }
        assert_eq!(c.read().allocated, 100 << 20);
        assert_eq!(c.read().allocated_peak, 100 << 20);
        assert!(c.allocated.load(Ordering::Relaxed) >= (100 << 20) - FLUSH_BYTES, "most bytes were handed over");
        for _ in 0..100 {
            on_free(&c, 1 << 20);
        }
        assert_eq!(c.read().allocated, 0);
    }

    /// Pairs of one size above the flush bound stay in the slot: the shared sum is never written, and the
    /// reading and the peak stay exact.
    #[test]
    fn large_pairs_leave_the_shared_sum_alone() {
        let c = StatsCounters::default();
        let big = 4 * FLUSH_BYTES as u64;
        for _ in 0..100 {
            on_allocate(&c, big);
            assert_eq!(c.read().allocated, big);
            on_free(&c, big);
        }
        assert_eq!(c.allocated.load(Ordering::Relaxed), 0, "no flush");
        assert_eq!((c.read().allocated, c.read().allocated_peak), (0, big));
        // Growing allocations still reach the sum: pending stays below twice the latest operation.
        for _ in 0..10 {
            on_allocate(&c, big);
        }
        assert!(c.slots.iter().all(|s| s.pending.load(Ordering::Relaxed) < 2 * big as i64));
        assert_eq!(c.read().allocated, 10 * big);
        assert_eq!(c.read().allocated_peak, 10 * big);
    }

    /// Large blocks allocated on one thread and freed on another, as PyTorch's forward and backward passes
    /// do: the other thread's frees reach the sum, so the peak exceeds the true one by at most the bound.
    #[test]
    fn large_frees_on_another_thread_do_not_inflate_the_peak() {
        let c = Arc::new(StatsCounters::default());
        let mib = 1u64 << 20;
        for _ in 0..10 {
            on_allocate(&c, 100 * mib);
        }
        let other = c.clone();
        std::thread::spawn(move || {
            for _ in 0..3 {
                on_free(&other, 100 * mib);
            }
        })
        .join()
        .unwrap();
        // 700 MiB live; 350 more make 1050, above the 1000 of before.
        on_allocate(&c, 350 * mib);
        let r = c.read();
        assert_eq!(r.allocated, 1050 * mib);
        let true_peak = 1050 * mib;
        assert!(
            (true_peak..=true_peak + FLUSH_BYTES as u64).contains(&r.allocated_peak),
            "peak {} MiB, true {} MiB",
            r.allocated_peak / mib,
            true_peak / mib
        );
    }

    #[test]
    fn frees_on_another_thread_keep_the_sum() {
        let c = Arc::new(StatsCounters::default());
        on_allocate(&c, 1000);
        let other = c.clone();
        std::thread::spawn(move || on_free(&other, 1000)).join().unwrap();
        on_allocate(&c, 10);
        assert_eq!(c.read().allocated, 10);
        // The other thread's free is still pending in its slot: the peak may be off by it, no more.
        let peak = c.read().allocated_peak;
        assert!((1000..=1010).contains(&peak), "{peak}");
    }
}
