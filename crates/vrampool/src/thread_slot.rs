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

/// A thread's slot, found once per pool operation and passed to everything the operation touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ThreadSlot {
    /// The slot's index, below [`ALL_SLOTS`].
    pub(crate) index: usize,
    /// Whether the calling thread holds the slot alone (its counters need no atomic read-modify-write).
    pub(crate) exclusive: bool,
}

impl ThreadSlot {
    /// Adds 1 to a count kept in this slot: a plain load and store when the calling thread holds the slot
    /// alone, an atomic add when it shares it.
    #[inline]
    pub(crate) fn bump(self, cell: &AtomicU64) {
        if self.exclusive {
            cell.store(cell.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        } else {
            cell.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The slots whose bits are set in `mask` (a bit per slot), lowest first.
pub(crate) fn slots_in(mask: u64) -> impl Iterator<Item = usize> {
    let mut rest = mask;
    std::iter::from_fn(move || {
        let slot = (rest != 0).then(|| rest.trailing_zeros() as usize)?;
        rest &= rest - 1;
        Some(slot)
    })
}

/// The calling thread's slot.
#[inline]
pub(crate) fn current() -> ThreadSlot {
    match HELD.try_with(|held| held.index.get()).ok().flatten() {
        Some(index) => ThreadSlot { index, exclusive: true },
        None => ThreadSlot { index: SHARED_SLOT, exclusive: false },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_in_a_mask_come_lowest_first() {
        assert_eq!(slots_in(0).count(), 0);
        assert_eq!(slots_in(0b1010_0001).collect::<Vec<_>>(), [0, 5, 7]);
        assert_eq!(slots_in(1 << SHARED_SLOT).collect::<Vec<_>>(), [SHARED_SLOT]);
    }

    #[test]
    fn threads_hold_distinct_slots_and_give_them_back() {
        let ThreadSlot { index: mine, exclusive } = current();
        assert!(exclusive);
        assert_eq!(current(), ThreadSlot { index: mine, exclusive: true }, "a thread keeps its slot");
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
        let others: Vec<_> = (0..4)
            .map(|_| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    let slot = current();
                    barrier.wait();
                    (slot.index, slot.exclusive)
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
