//! The dynamic pool's live bytes, their peak, and its counts of allocations and frees.
//!
//! Every allocation and free of the dynamic pool holds its lock, so these are written by one thread at a
//! time: a plain load and store each, in one cache line, with no thread slot to look up (the per-slot
//! counters of [`StatsCounters`](super::StatsCounters) serve the paths that take no lock; here their
//! thread-local read and their slot's line would be a second set of counts on every request the hybrid
//! sends to its region).
//! Read at any time without the lock, a reading may be one operation behind.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use super::stats_counters::CounterReading;

/// Live bytes, their peak, allocations and frees, written only under the owner's lock.
#[derive(Debug, Default)]
pub(crate) struct LiveTally {
    counts: CachePadded<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    allocated: AtomicU64,
    allocated_peak: AtomicU64,
    allocations: AtomicU64,
    frees: AtomicU64,
}

/// Adds `delta` to a counter that only the holder of the owner's lock writes.
#[inline(always)]
fn add(counter: &AtomicU64, delta: u64) -> u64 {
    let now = counter.load(Ordering::Relaxed).wrapping_add(delta);
    counter.store(now, Ordering::Relaxed);
    now
}

impl LiveTally {
    /// Counts an allocation of `bytes` requested bytes. The caller holds the owner's lock.
    #[inline]
    pub(crate) fn on_allocate(&self, bytes: u64) {
        let c = &*self.counts;
        add(&c.allocations, 1);
        let now = add(&c.allocated, bytes);
        if now > c.allocated_peak.load(Ordering::Relaxed) {
            c.allocated_peak.store(now, Ordering::Relaxed);
        }
    }

    /// Counts a free of an allocation of `bytes` requested bytes. The caller holds the owner's lock.
    #[inline]
    pub(crate) fn on_free(&self, bytes: u64) {
        let c = &*self.counts;
        add(&c.frees, 1);
        add(&c.allocated, bytes.wrapping_neg());
    }

    /// Starts the peak again from the bytes live now. The caller holds the owner's lock.
    pub(crate) fn reset_peak(&self) {
        let c = &*self.counts;
        c.allocated_peak.store(c.allocated.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// Bytes live now.
    pub(crate) fn allocated(&self) -> u64 {
        self.counts.allocated.load(Ordering::Relaxed)
    }

    /// Every count, as the per-slot counters read theirs.
    pub(crate) fn read(&self) -> CounterReading {
        let c = &*self.counts;
        CounterReading {
            allocated: c.allocated.load(Ordering::Relaxed),
            allocated_peak: c.allocated_peak.load(Ordering::Relaxed),
            allocations: c.allocations.load(Ordering::Relaxed),
            frees: c.frees.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_bytes_their_peak_and_operations() {
        let tally = LiveTally::default();
        tally.on_allocate(100);
        tally.on_allocate(50);
        tally.on_free(100);
        tally.on_allocate(20);
        assert_eq!(
            tally.read(),
            CounterReading { allocated: 70, allocated_peak: 150, allocations: 3, frees: 1 },
            "the peak is the most live at once, not the most allocated"
        );
        assert_eq!(tally.allocated(), 70);
        tally.on_free(50);
        tally.on_free(20);
        assert_eq!(tally.read().allocated, 0);
        assert_eq!(tally.read().allocated_peak, 150);
    }
}
