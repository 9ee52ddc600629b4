//! The counters behind [`crate::PoolStats`].
//!
//! Allocated bytes are one pool-wide atomic, so that the current value and the peak are exact whatever
//! the threads do (a pool used from PyTorch's main and autograd threads, say). The counts of allocations
//! and frees are kept per thread slot, in cache lines only their own thread writes (with plain loads and
//! stores when the slot is the thread's alone), and summed when read.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::thread_slot::{ALL_SLOTS, ThreadSlot};

/// One slot's counts.
#[derive(Debug, Default)]
struct SlotCounts {
    allocations: AtomicU64,
    frees: AtomicU64,
}

/// Adds 1 to a count: a plain load and store when the slot is the thread's alone.
#[inline]
fn bump(cell: &AtomicU64, exclusive: bool) {
    if exclusive {
        cell.store(cell.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    } else {
        cell.fetch_add(1, Ordering::Relaxed);
    }
}

/// Rare events, counted with plain atomics.
#[derive(Debug, Default)]
pub(crate) struct RareCounters {
    pub(crate) fallbacks: AtomicU64,
    pub(crate) ooms: AtomicU64,
    pub(crate) growths: AtomicU64,
    pub(crate) backend_calls: AtomicU64,
    pub(crate) chunks_moved: AtomicU64,
    pub(crate) trimmed_bytes: AtomicU64,
    pub(crate) pre_expansions: AtomicU64,
}

/// Live, peak, reserved and event counters of one pool.
#[derive(Debug)]
pub(crate) struct StatsCounters {
    allocated: CachePadded<AtomicI64>,
    allocated_peak: CachePadded<AtomicU64>,
    slots: Box<[CachePadded<SlotCounts>]>,
    reserved: AtomicU64,
    reserved_peak: AtomicU64,
    pub(crate) rare: RareCounters,
}

impl Default for StatsCounters {
    fn default() -> Self {
        StatsCounters {
            allocated: CachePadded::new(AtomicI64::new(0)),
            allocated_peak: CachePadded::new(AtomicU64::new(0)),
            slots: (0..ALL_SLOTS).map(|_| CachePadded::new(SlotCounts::default())).collect(),
            reserved: AtomicU64::new(0),
            reserved_peak: AtomicU64::new(0),
            rare: RareCounters::default(),
        }
    }
}

/// A reading of the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CounterReading {
    pub(crate) allocated: u64,
    pub(crate) allocated_peak: u64,
    pub(crate) reserved: u64,
    pub(crate) reserved_peak: u64,
    pub(crate) allocations: u64,
    pub(crate) frees: u64,
}

impl StatsCounters {
    /// Counts an allocation of `bytes` requested bytes by the thread in `slot`.
    #[inline]
    pub(crate) fn on_allocate(&self, slot: ThreadSlot, bytes: u64) {
        let now = (self.allocated.fetch_add(bytes as i64, Ordering::Relaxed) + bytes as i64).max(0) as u64;
        if now > self.allocated_peak.load(Ordering::Relaxed) {
            self.allocated_peak.fetch_max(now, Ordering::Relaxed);
        }
        bump(&self.slots[slot.index].allocations, slot.exclusive);
    }

    /// Counts a free of an allocation of `bytes` requested bytes by the thread in `slot`.
    #[inline]
    pub(crate) fn on_free(&self, slot: ThreadSlot, bytes: u64) {
        self.allocated.fetch_sub(bytes as i64, Ordering::Relaxed);
        bump(&self.slots[slot.index].frees, slot.exclusive);
    }

    /// Adds `bytes` to the reserved bytes.
    pub(crate) fn add_reserved(&self, bytes: u64) {
        let now = self.reserved.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.reserved_peak.fetch_max(now, Ordering::Relaxed);
    }

    /// Takes `bytes` from the reserved bytes.
    pub(crate) fn sub_reserved(&self, bytes: u64) {
        self.reserved.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Bytes reserved now.
    pub(crate) fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Relaxed)
    }

    /// Bytes live now.
    pub(crate) fn allocated(&self) -> u64 {
        self.allocated.load(Ordering::Relaxed).max(0) as u64
    }

    /// Counts one backend call.
    pub(crate) fn count_call(&self) {
        self.rare.backend_calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads every counter.
    pub(crate) fn read(&self) -> CounterReading {
        let mut reading = CounterReading::default();
        for counts in self.slots.iter() {
            reading.allocations += counts.allocations.load(Ordering::Relaxed);
            reading.frees += counts.frees.load(Ordering::Relaxed);
        }
        reading.allocated = self.allocated();
        reading.allocated_peak = self.allocated_peak.load(Ordering::Relaxed).max(reading.allocated);
        reading.reserved = self.reserved();
        reading.reserved_peak = self.reserved_peak.load(Ordering::Relaxed);
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

    /// Two threads alternating, as PyTorch's main and autograd threads do: the peak is the true one.
    #[test]
    fn threads_taking_turns_are_exact() {
        let c = Arc::new(StatsCounters::default());
        for round in 0..50u64 {
            on_allocate(&c, 10 + round);
            let other = c.clone();
            std::thread::spawn(move || {
                on_allocate(&other, 1000);
                on_free(&other, 1000);
            })
            .join()
            .unwrap();
            on_free(&c, 10 + round);
        }
        let r = c.read();
        assert_eq!((r.allocated, r.allocated_peak), (0, 1000 + 59));
        assert_eq!((r.allocations, r.frees), (100, 100));
    }

    #[test]
    fn frees_on_another_thread_keep_the_sum() {
        let c = Arc::new(StatsCounters::default());
        on_allocate(&c, 1000);
        let other = c.clone();
        std::thread::spawn(move || on_free(&other, 1000)).join().unwrap();
        on_allocate(&c, 10);
        assert_eq!(c.read().allocated, 10);
        assert_eq!(c.read().allocated_peak, 1000);
    }
}
