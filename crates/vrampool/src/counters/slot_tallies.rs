//! Event counts kept per thread slot and summed when read: counting an event writes only the calling
//! thread's cache line, with a plain load and store when the thread holds its slot alone.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::thread_slot::{ALL_SLOTS, ThreadSlot};

/// `N` counts, one set per thread slot.
#[derive(Debug)]
pub(crate) struct SlotTallies<const N: usize> {
    slots: Box<[CachePadded<[AtomicU64; N]>]>,
}

impl<const N: usize> Default for SlotTallies<N> {
    fn default() -> Self {
        SlotTallies {
            slots: (0..ALL_SLOTS).map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0)))).collect(),
        }
    }
}

impl<const N: usize> SlotTallies<N> {
    /// Counts one event of kind `kind` (below `N`) by the thread in `slot`.
    #[inline]
    pub(crate) fn count(&self, slot: ThreadSlot, kind: usize) {
        slot.bump(&self.slots[slot.index][kind]);
    }

    /// Events of kind `kind` counted so far, by every thread.
    pub(crate) fn total(&self, kind: usize) -> u64 {
        self.slots.iter().map(|slot| slot[kind].load(Ordering::Relaxed)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_every_thread_add_up() {
        let tallies = std::sync::Arc::new(SlotTallies::<2>::default());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let tallies = tallies.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        tallies.count(crate::thread_slot::current(), t % 2);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        // A thread without a slot of its own counts in the shared one, with atomic adds.
        tallies.count(ThreadSlot { index: crate::thread_slot::SHARED_SLOT, exclusive: false }, 1);
        assert_eq!((tallies.total(0), tallies.total(1)), (2000, 2001));
    }
}
