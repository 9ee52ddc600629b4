//! The watermark: when the core's share of blocks in use passes it, the dynamic region is grown ahead of
//! need by a background worker, once per crossing, never on the allocation path.
//!
//! Each thread slot counts the core blocks it took and gave back. A check sums the slots that have ever
//! counted (a bitmask names them, so a check reads a cache line per thread that used the pool, not one per
//! possible slot) and compares the share in use with the watermark. Passing it while armed disarms it and
//! sends one request to the worker; falling back below re-arms it.
//!
//! A slot checks every [`check_interval`] core operations (a 32nd of the core's blocks, 1 to
//! [`MAX_CHECK_INTERVAL`]) times the number of slots that have counted: all threads together check about
//! once per interval, however many they are. A check reads a line each other thread last wrote, so that a
//! thread pays about one such line per interval of its own operations whatever the number of threads;
//! were each slot to check every interval, a thread's cost per operation would grow with the threads.
//! A thread that runs alone after others have counted checks less often than one that never shared the
//! pool (at most [`MAX_CHECK_INTERVAL`] times 64 of its operations apart): the watermark only grows the
//! region ahead of need, which a late check delays, and the region still grows on demand.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::thread::JoinHandle;

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

use crate::dynamic::DynamicPool;
use crate::thread_slot::{ALL_SLOTS, ThreadSlot, slots_in};

/// The most core operations between two checks of the watermark, all threads together (a slot's own
/// interval is this times the slots that have counted).
pub(crate) const MAX_CHECK_INTERVAL: u32 = 64;

/// Core operations between two checks of the watermark, all threads together, for a core of `total_blocks`
/// blocks: a 32nd of them, so that the count is checked within 3% of the core's size, at least every
/// operation and at most every [`MAX_CHECK_INTERVAL`]. A shorter interval costs every step instructions for
/// checks that find nothing (docs/BENCHMARKS.md).
pub(crate) fn check_interval(total_blocks: u64) -> u32 {
    (total_blocks / 32).clamp(1, u64::from(MAX_CHECK_INTERVAL)) as u32
}

/// One slot's count of core blocks it took minus those it gave back, its countdown to the next check, and
/// whether it has been named in the watermark's mask of slots in use.
#[derive(Debug, Default)]
struct SlotUse {
    live: AtomicI64,
    countdown: AtomicU32,
    named: AtomicBool,
}

/// Grows the dynamic region ahead of need on a thread of its own, until dropped.
#[derive(Debug)]
struct Worker {
    requests: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Closing the channel ends the worker's loop once it has finished what it was doing.
        self.requests.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The watermark over the core's blocks.
#[derive(Debug)]
pub(crate) struct Watermark {
    threshold: f64,
    armed: AtomicBool,
    crossings: AtomicU64,
    slots: Box<[CachePadded<SlotUse>]>,
    /// A bit per slot that has ever counted: a check sums those slots only.
    used_slots: AtomicU64,
    dynamic: Arc<DynamicPool>,
    worker: Mutex<Option<Worker>>,
}

impl Watermark {
    /// A watermark at `threshold` that grows `dynamic`; on a worker thread unless `inline`.
    pub(crate) fn new(threshold: f64, dynamic: Arc<DynamicPool>, inline: bool) -> std::io::Result<Self> {
        let worker = if inline {
            None
        } else {
            let (requests, received) = mpsc::channel::<()>();
            let region = dynamic.clone();
            let thread = std::thread::Builder::new().name("vrampool-watermark".into()).spawn(move || {
                for () in received {
                    // A failed pre-expansion is not an error of any allocation: the region grows on demand.
                    let _ = region.grow_ahead();
                }
            })?;
            Some(Worker { requests: Some(requests), thread: Some(thread) })
        };
        Ok(Watermark {
            threshold,
            armed: AtomicBool::new(true),
            crossings: AtomicU64::new(0),
            slots: (0..ALL_SLOTS).map(|_| CachePadded::new(SlotUse::default())).collect(),
            used_slots: AtomicU64::new(0),
            dynamic,
            worker: Mutex::new(worker),
        })
    }

    /// Times the watermark was passed while armed.
    pub(crate) fn crossings(&self) -> u64 {
        self.crossings.load(Ordering::Relaxed)
    }

    /// Counts a core block taken (`+1`) or given back (`-1`) by the thread in `slot`; checks the watermark
    /// when due.
    #[inline]
    pub(crate) fn count(&self, slot: ThreadSlot, delta: i64, total_blocks: u64) {
        let slot_use = &self.slots[slot.index];
        if slot.exclusive {
            // A slot's countdown starts at 0: its first count takes the due path, which names the slot.
            let countdown = slot_use.countdown.load(Ordering::Relaxed);
            if countdown > 0 {
                slot_use.live.store(slot_use.live.load(Ordering::Relaxed) + delta, Ordering::Relaxed);
                slot_use.countdown.store(countdown - 1, Ordering::Relaxed);
                return;
            }
        }
        self.count_and_check(slot, delta, total_blocks);
    }

    /// [`Watermark::count`] when a check is due (or the slot is shared): names the slot before its first
    /// count lands, so that no check misses it, counts, checks, and for a slot its thread holds alone sets
    /// the countdown to the next check: the interval times the slots that have counted.
    #[cold]
    fn count_and_check(&self, slot: ThreadSlot, delta: i64, total_blocks: u64) {
        let slot_use = &self.slots[slot.index];
        if !slot_use.named.load(Ordering::Relaxed) {
            self.used_slots.fetch_or(1 << slot.index, Ordering::AcqRel);
            slot_use.named.store(true, Ordering::Release);
        }
        if slot.exclusive {
            slot_use.live.store(slot_use.live.load(Ordering::Relaxed) + delta, Ordering::Relaxed);
            let counting = self.used_slots.load(Ordering::Relaxed).count_ones().max(1);
            slot_use.countdown.store(check_interval(total_blocks) * counting - 1, Ordering::Relaxed);
        } else {
            slot_use.live.fetch_add(delta, Ordering::Relaxed);
        }
        self.check(total_blocks);
    }

    #[cold]
    fn check(&self, total_blocks: u64) {
        let live: i64 =
            slots_in(self.used_slots.load(Ordering::Acquire)).map(|s| self.slots[s].live.load(Ordering::Relaxed)).sum();
        let share = live.max(0) as f64 / total_blocks.max(1) as f64;
        if share > self.threshold {
            if self.armed.swap(false, Ordering::AcqRel) {
                self.crossings.fetch_add(1, Ordering::Relaxed);
                self.expand();
            }
        } else if !self.armed.load(Ordering::Relaxed) {
            self.armed.store(true, Ordering::Release);
        }
    }

    fn expand(&self) {
        let worker = self.worker.lock();
        match worker.as_ref().and_then(|w| w.requests.as_ref()) {
            Some(requests) => {
                let _ = requests.send(());
            }
            None => {
                drop(worker);
                let _ = self.dynamic.grow_ahead();
            }
        }
    }

    /// Stops the worker, waiting for what it is doing (when the pool is dropped).
    pub(crate) fn stop(&self) {
        self.worker.lock().take();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backend::SimDevice;
    use crate::dynamic::DynamicConfig;
    use crate::thread_slot;

    #[test]
    fn checks_come_every_32nd_of_the_core_within_bounds() {
        assert_eq!(check_interval(0), 1);
        assert_eq!(check_interval(10), 1, "a small core is checked at every operation");
        assert_eq!(check_interval(100), 3);
        assert_eq!(check_interval(1828), 57);
        assert_eq!(check_interval(1 << 40), MAX_CHECK_INTERVAL);
    }

    /// A slot's operations between two checks grow with the slots that have counted, so that all threads
    /// together check about once per interval.
    #[test]
    fn a_slot_checks_less_often_as_more_slots_count() {
        let dynamic = Arc::new(DynamicPool::new(Arc::new(SimDevice::default()), DynamicConfig::default()).unwrap());
        let watermark = Watermark::new(2.0, dynamic, true).unwrap();
        let total = 32 * 4;
        let interval = check_interval(total);
        assert_eq!(interval, 4);
        let mine = ThreadSlot { index: 0, exclusive: true };
        let countdown = |slot: ThreadSlot| watermark.slots[slot.index].countdown.load(Ordering::Relaxed);
        watermark.count(mine, 1, total);
        assert_eq!(countdown(mine), interval - 1, "one slot counts: every interval");
        for index in 1..3 {
            watermark.count(ThreadSlot { index, exclusive: true }, 1, total);
        }
        for _ in 0..interval - 1 {
            watermark.count(mine, 1, total);
        }
        assert_eq!(countdown(mine), 0, "a check is due at the interval's end");
        watermark.count(mine, 1, total);
        assert_eq!(countdown(mine), 3 * interval - 1, "three slots count: every three intervals");
        let live: i64 = (0..3).map(|s| watermark.slots[s].live.load(Ordering::Relaxed)).sum();
        assert_eq!(live, i64::from(interval) + 1 + 2, "every count landed");
    }

    #[test]
    fn a_check_sums_the_counts_of_every_thread_that_counted() {
        let dynamic = Arc::new(DynamicPool::new(Arc::new(SimDevice::default()), DynamicConfig::default()).unwrap());
        let watermark = Watermark::new(0.5, dynamic, true).unwrap();
        // Three threads take two blocks each: 6 of 10 in use, past the 0.5 watermark only when all three
        // threads' slots are summed.
        std::thread::scope(|scope| {
            for _ in 0..3 {
                scope.spawn(|| {
                    let slot = thread_slot::current();
                    watermark.count(slot, 1, u64::MAX);
                    watermark.count(slot, 1, u64::MAX);
                });
            }
        });
        assert_eq!(watermark.crossings(), 0, "no check came due against 10 blocks yet");
        watermark.check(12);
        assert_eq!(watermark.crossings(), 0, "6 of 12 is 0.5: not past it");
        watermark.check(10);
        assert_eq!(watermark.crossings(), 1, "6 of 10 is past 0.5");
    }
}
