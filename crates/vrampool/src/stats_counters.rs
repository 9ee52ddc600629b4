//! The counters behind [`crate::PoolStats`], kept per thread slot so that the allocation fast path
//! writes only cache lines its own thread owns.
//!
//! Allocated bytes are exact: each slot keeps its running sum, and the total is their sum. For the peak,
//! after each allocation a thread adds its own sum to a snapshot of the other slots' sums. The snapshot
//! is taken again whenever another thread has taken the turn (the pool-wide "turn" word names the slot
//! that used the pool last), and at least every [`PEAK_REFRESH`] operations. A thread writes the turn word
//! at most once per [`PEAK_REFRESH`] of its operations, so threads running at once do not fight over it.
//! The peak is therefore exact while threads use the pool one at a time in turns of at least
//! [`PEAK_REFRESH`] operations (a single thread, always); under concurrent use it can miss the other
//! threads' most recent operations.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::thread_slot::{ALL_SLOTS, ThreadSlot};

/// Operations between refreshes of a slot's snapshot of the other slots.
pub(crate) const PEAK_REFRESH: u32 = 256;

/// One slot's counters.
#[derive(Debug)]
struct SlotCounters {
    allocated: AtomicI64,
    allocations: AtomicU64,
    frees: AtomicU64,
    others: AtomicI64,
    countdown: AtomicU32,
    seen_turn: AtomicU64,
    ops_since_turn: AtomicU32,
}

impl Default for SlotCounters {
    fn default() -> Self {
        SlotCounters {
            allocated: AtomicI64::new(0),
            allocations: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            others: AtomicI64::new(0),
            countdown: AtomicU32::new(0),
            seen_turn: AtomicU64::new(NO_TURN),
            ops_since_turn: AtomicU32::new(PEAK_REFRESH),
        }
    }
}

/// The turn word before any thread took a turn.
const NO_TURN: u64 = u64::MAX;

/// Adds `v` to a counter: a plain load and store when the slot is the thread's alone.
#[inline]
fn add_u64(cell: &AtomicU64, v: u64, exclusive: bool) {
    if exclusive {
        cell.store(cell.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
    } else {
        cell.fetch_add(v, Ordering::Relaxed);
    }
}

#[inline]
fn add_i64(cell: &AtomicI64, v: i64, exclusive: bool) -> i64 {
    if exclusive {
        let new = cell.load(Ordering::Relaxed).wrapping_add(v);
        cell.store(new, Ordering::Relaxed);
        new
    } else {
        cell.fetch_add(v, Ordering::Relaxed).wrapping_add(v)
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
    slots: Box<[CachePadded<SlotCounters>]>,
    turn: CachePadded<AtomicU64>,
    allocated_peak: CachePadded<AtomicU64>,
    reserved: AtomicU64,
    reserved_peak: AtomicU64,
    pub(crate) rare: RareCounters,
}

impl Default for StatsCounters {
    fn default() -> Self {
        StatsCounters {
            slots: (0..ALL_SLOTS).map(|_| CachePadded::new(SlotCounters::default())).collect(),
            turn: CachePadded::new(AtomicU64::new(NO_TURN)),
            allocated_peak: CachePadded::new(AtomicU64::new(0)),
            reserved: AtomicU64::new(0),
            reserved_peak: AtomicU64::new(0),
            rare: RareCounters::default(),
        }
    }
}

/// A consistent-enough reading of the counters.
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
        let ThreadSlot { index: slot, exclusive } = slot;
        let counters = &self.slots[slot];
        let mine = add_i64(&counters.allocated, bytes as i64, exclusive);
        add_u64(&counters.allocations, 1, exclusive);
        let others = if exclusive { self.others_for(slot, counters) } else { self.sum_except(slot) };
        let total = (mine + others).max(0) as u64;
        if total > self.allocated_peak.load(Ordering::Relaxed) {
            self.allocated_peak.fetch_max(total, Ordering::Relaxed);
        }
    }

    /// Counts a free of an allocation of `bytes` requested bytes by the thread in `slot`.
    #[inline]
    pub(crate) fn on_free(&self, slot: ThreadSlot, bytes: u64) {
        let ThreadSlot { index: slot, exclusive } = slot;
        let counters = &self.slots[slot];
        add_i64(&counters.allocated, -(bytes as i64), exclusive);
        add_u64(&counters.frees, 1, exclusive);
        if exclusive {
            self.note_turn(slot, counters);
        }
    }

    /// The exclusive slot's snapshot of the other slots' sums, taken again when another thread has
    /// taken the turn or every [`PEAK_REFRESH`] operations.
    #[inline]
    fn others_for(&self, slot: usize, counters: &SlotCounters) -> i64 {
        let turn_moved = self.note_turn(slot, counters);
        let countdown = counters.countdown.load(Ordering::Relaxed);
        if countdown > 0 && !turn_moved {
            counters.countdown.store(countdown - 1, Ordering::Relaxed);
            return counters.others.load(Ordering::Relaxed);
        }
        counters.countdown.store(PEAK_REFRESH, Ordering::Relaxed);
        let others = self.sum_except(slot);
        counters.others.store(others, Ordering::Relaxed);
        others
    }

    /// Takes the turn when it is another slot's and this slot has not taken it for [`PEAK_REFRESH`]
    /// operations; returns whether the turn moved since this slot last looked.
    #[inline]
    fn note_turn(&self, slot: usize, counters: &SlotCounters) -> bool {
        let turn = self.turn.load(Ordering::Relaxed);
        let ops = counters.ops_since_turn.load(Ordering::Relaxed).saturating_add(1);
        if turn & 0xff == slot as u64 {
            // The turn is this slot's: only count operations while they can matter.
            if ops < PEAK_REFRESH {
                counters.ops_since_turn.store(ops, Ordering::Relaxed);
            }
            return false;
        }
        counters.ops_since_turn.store(ops, Ordering::Relaxed);
        let moved = turn != counters.seen_turn.load(Ordering::Relaxed);
        let mut seen = turn;
        if ops >= PEAK_REFRESH {
            let version = if turn == NO_TURN { 0 } else { (turn >> 8) + 1 };
            seen = (version << 8) | slot as u64;
            self.turn.store(seen, Ordering::Relaxed);
            counters.ops_since_turn.store(0, Ordering::Relaxed);
        }
        counters.seen_turn.store(seen, Ordering::Relaxed);
        moved
    }

    fn sum_except(&self, slot: usize) -> i64 {
        self.slots
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != slot)
            .map(|(_, c)| c.allocated.load(Ordering::Relaxed))
            .sum()
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
        self.slots.iter().map(|c| c.allocated.load(Ordering::Relaxed)).sum::<i64>().max(0) as u64
    }

    /// Counts one backend call.
    pub(crate) fn count_call(&self) {
        self.rare.backend_calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads every counter.
    pub(crate) fn read(&self) -> CounterReading {
        let mut reading = CounterReading::default();
        for counters in self.slots.iter() {
            reading.allocations += counters.allocations.load(Ordering::Relaxed);
            reading.frees += counters.frees.load(Ordering::Relaxed);
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

    #[test]
    fn frees_on_another_thread_keep_the_sum() {
        let c = std::sync::Arc::new(StatsCounters::default());
        on_allocate(&c, 1000);
        let other = c.clone();
        std::thread::spawn(move || on_free(&other, 1000)).join().unwrap();
        on_allocate(&c, 10);
        assert_eq!(c.read().allocated, 10);
        assert_eq!(c.read().allocated_peak, 1000);
    }

    #[test]
    fn threads_taking_turns_are_exact() {
        let c = std::sync::Arc::new(StatsCounters::default());
        for _ in 0..300 {
            on_allocate(&c, 1);
        }
        let other = c.clone();
        std::thread::spawn(move || {
            for _ in 0..300 {
                on_allocate(&other, 2);
            }
            for _ in 0..300 {
                on_free(&other, 2);
            }
        })
        .join()
        .unwrap();
        assert_eq!(c.read().allocated_peak, 900);
        for _ in 0..300 {
            on_free(&c, 1);
        }
        on_allocate(&c, 5);
        assert_eq!(c.read().allocated, 5);
        assert_eq!(c.read().allocated_peak, 900);
    }
}
