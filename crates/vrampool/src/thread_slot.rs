//! Per-thread slots: each thread that uses a pool holds one of [`SLOTS`] slots for its life, so that
//! its hot counters and its stack of free blocks sit in cache lines no other thread writes.
//!
//! A thread that finds every slot taken (more than [`SLOTS`] threads at once) shares the extra slot
//! [`SHARED_SLOT`], whose counters are updated with atomic read-modify-write instead.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Slots held exclusively, one thread each.
pub(crate) const SLOTS: usize = 63;
/// The slot shared by threads that found no free slot.
pub(crate) const SHARED_SLOT: usize = SLOTS;
/// All slots, the shared one included.
pub(crate) const ALL_SLOTS: usize = SLOTS + 1;

static TAKEN: AtomicU64 = AtomicU64::new(0);

/// The slot a thread holds; given back when the thread ends.
struct HeldSlot {
    index: Cell<Option<usize>>,
}

impl HeldSlot {
    fn take() -> Option<usize> {
        let mut taken = TAKEN.load(Ordering::Relaxed);
        loop {
            let free = !taken & ((1u64 << SLOTS) - 1);
            if free == 0 {
                return None;
            }
            let index = free.trailing_zeros() as usize;
            match TAKEN.compare_exchange_weak(taken, taken | (1 << index), Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Some(index),
                Err(current) => taken = current,
            }
        }
    }
}

impl Drop for HeldSlot {
    fn drop(&mut self) {
        if let Some(index) = self.index.get() {
            TAKEN.fetch_and(!(1 << index), Ordering::Release);
        }
    }
}

thread_local! {
    static HELD: HeldSlot = HeldSlot { index: Cell::new(HeldSlot::take()) };
}

/// The calling thread's slot and whether it holds it alone.
#[inline]
pub(crate) fn current() -> (usize, bool) {
    HELD.try_with(|held| held.index.get()).ok().flatten().map_or((SHARED_SLOT, false), |index| (index, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_hold_distinct_slots_and_give_them_back() {
        let (mine, exclusive) = current();
        assert!(exclusive);
        assert_eq!(current(), (mine, true), "a thread keeps its slot");
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
        let others: Vec<_> = (0..4)
            .map(|_| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    let slot = current();
                    barrier.wait();
                    slot
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        for (slot, exclusive) in &others {
            if *exclusive {
                assert_ne!(*slot, mine);
            }
        }
        let mut exclusive_slots: Vec<_> = others.iter().filter(|s| s.1).map(|s| s.0).collect();
        let held = exclusive_slots.len();
        exclusive_slots.dedup();
        assert_eq!(exclusive_slots.len(), held, "slots held at once are distinct");
    }
}
