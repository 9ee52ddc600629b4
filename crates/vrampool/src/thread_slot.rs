//! Per-thread slots: each thread that uses a pool holds one of [`SLOTS`] slots for its life, so that
//! its hot counters and its stack of free blocks sit in cache lines no other thread writes.
//!
//! A thread that finds every slot taken (more than [`SLOTS`] threads at once) shares the extra slot
//! [`SHARED_SLOT`], whose counters are updated with atomic read-modify-write instead. So does a thread
//! whose slot was given back as it ends (its other thread-locals' destructors may still free memory).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Slots held exclusively, one thread each.
pub(crate) const SLOTS: usize = 63;
/// The slot shared by threads that found no free slot.
pub(crate) const SHARED_SLOT: usize = SLOTS;
/// All slots, the shared one included.
pub(crate) const ALL_SLOTS: usize = SLOTS + 1;

static TAKEN: AtomicU64 = AtomicU64::new(0);

/// What [`HELD`] says before the thread has asked for a slot.
const UNASKED: usize = usize::MAX;

thread_local! {
    /// The slot this thread uses ([`SHARED_SLOT`] where it holds none), or [`UNASKED`]. Read by every pool
    /// operation: a constant-initialised cell without a destructor is read with no check of its state (a
    /// thread-local with a destructor is checked for being initialised, or destroyed, on every read).
    static HELD: Cell<usize> = const { Cell::new(UNASKED) };
    /// Gives the thread's slot back when the thread ends; set when the thread first takes one.
    static RETURN: SlotReturn = const { SlotReturn { index: Cell::new(None) } };
}

/// Takes a free slot for the life of the thread; `None` where all are taken.
fn take_free_slot() -> Option<usize> {
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

/// Gives a thread's slot back when the thread ends.
struct SlotReturn {
    index: Cell<Option<usize>>,
}

impl Drop for SlotReturn {
    fn drop(&mut self) {
        if let Some(index) = self.index.take() {
            // Whatever this thread still does (other thread-locals' destructors may free memory) it does in
            // the shared slot: the slot given back may be another thread's at once.
            let _ = HELD.try_with(|held| held.set(SHARED_SLOT));
            TAKEN.fetch_and(!(1 << index), Ordering::Release);
        }
    }
}

/// The slot of a thread that has not asked for one yet: a free slot, held until the thread ends, else the
/// shared slot.
#[cold]
fn first_slot() -> usize {
    let index = RETURN
        .try_with(|ret| {
            let index = take_free_slot()?;
            ret.index.set(Some(index));
            Some(index)
        })
        .ok()
        .flatten()
        // A thread past its thread-locals' destruction, or with every slot taken, shares.
        .unwrap_or(SHARED_SLOT);
    let _ = HELD.try_with(|held| held.set(index));
    index
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

/// The slots other than `slot` whose bits are set in `mask`, from the one after `slot` on, wrapping around:
/// threads that look through the others' slots each start at the next one, not all at the lowest.
pub(crate) fn other_slots(mask: u64, slot: usize) -> impl Iterator<Item = usize> {
    let shift = (slot + 1) % u64::BITS as usize;
    let others = mask & !(1 << slot);
    slots_in(others.rotate_right(shift as u32)).map(move |rotated| (rotated + shift) % u64::BITS as usize)
}

/// The calling thread's slot.
#[inline]
pub(crate) fn current() -> ThreadSlot {
    let index = match HELD.try_with(Cell::get) {
        Ok(UNASKED) => first_slot(),
        Ok(index) => index,
        Err(_) => SHARED_SLOT,
    };
    ThreadSlot { index, exclusive: index != SHARED_SLOT }
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
    fn other_slots_start_after_the_slot_wrap_around_and_leave_it_out() {
        let mask = 0b1010_0101;
        assert_eq!(other_slots(mask, 2).collect::<Vec<_>>(), [5, 7, 0]);
        assert_eq!(other_slots(mask, 3).collect::<Vec<_>>(), [5, 7, 0, 2]);
        assert_eq!(other_slots(mask, 7).collect::<Vec<_>>(), [0, 2, 5]);
        assert_eq!(other_slots(mask, 63).collect::<Vec<_>>(), [0, 2, 5, 7]);
        assert_eq!(other_slots(1 << 63 | 1 << 5 | 1, 0).collect::<Vec<_>>(), [5, 63]);
        assert_eq!(other_slots(1 << 63 | 1, 62).collect::<Vec<_>>(), [63, 0]);
        assert_eq!(other_slots(0, 5).count(), 0);
        assert_eq!(other_slots(1 << 5, 5).count(), 0);
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

    /// A thread-local whose destructor reads the slot once the thread's own slot may have been given back.
    struct LateReader(std::sync::mpsc::Sender<(ThreadSlot, bool)>);

    impl Drop for LateReader {
        fn drop(&mut self) {
            let slot = current();
            let still_taken = TAKEN.load(Ordering::Acquire) & (1 << slot.index) != 0;
            let _ = self.0.send((slot, still_taken));
        }
    }

    thread_local! {
        static LATE: std::cell::RefCell<Option<LateReader>> = const { std::cell::RefCell::new(None) };
    }

    #[test]
    fn a_slot_given_back_is_never_used_alone_again() {
        let (sender, received) = std::sync::mpsc::channel();
        let held = std::thread::spawn(move || {
            // Registered before the thread takes its slot, so its destructor runs after the slot's return.
            LATE.with(|late| *late.borrow_mut() = Some(LateReader(sender)));
            current()
        })
        .join()
        .unwrap();
        assert!(held.exclusive);
        let (late, still_taken) = received.recv().unwrap();
        assert!(!late.exclusive || still_taken, "{late:?} used alone after its slot was given back");
        assert!(!late.exclusive, "the slot's return runs first: the late read shares ({late:?})");
        assert_eq!(late.index, SHARED_SLOT);
    }
}
