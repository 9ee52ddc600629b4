//! A thread slot's short list of the blocks it freed last, read and written by the thread holding the slot
//! alone, with plain loads and stores: the allocation that follows a free takes its block back without an
//! atomic read-modify-write on a shared stack.
//!
//! The list only names blocks; a block named here is the holder's only while its state word says it is
//! cached, and whoever takes it (the holder, or another thread that finds every stack empty and reads the
//! list) claims it with a compare-and-swap on that word. An entry whose block was claimed elsewhere is
//! stale and skipped, so no block is ever handed out twice and none is stranded in a list: every cached
//! block can be claimed by any thread.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::block_states::{BlockStates, LiveBlock};
use crate::error::Result;
use crate::stream_order::FreeTag;
use crate::thread_slot::{ALL_SLOTS, ThreadSlot, other_slots, slots_in};

/// Blocks a slot's list names at most.
pub(crate) const HOT_BLOCKS: usize = 8;

/// The list of one slot.
#[derive(Debug, Default)]
pub(crate) struct HotList {
    len: AtomicU32,
    items: [AtomicU32; HOT_BLOCKS],
}

impl HotList {
    /// Names block `index` as the newest entry; `false` when the list is full. Only the slot's holder calls
    /// it.
    #[inline]
    pub(crate) fn push(&self, index: u32) -> bool {
        let len = self.len.load(Ordering::Relaxed) as usize;
        if len == HOT_BLOCKS {
            return false;
        }
        self.items[len].store(index, Ordering::Relaxed);
        self.len.store(len as u32 + 1, Ordering::Release);
        true
    }

    /// Whether a [`HotList::push`] would find room. Only the slot's holder calls it.
    #[inline]
    pub(crate) fn has_room(&self) -> bool {
        (self.len.load(Ordering::Relaxed) as usize) < HOT_BLOCKS
    }

    /// Removes and returns the newest entry (which may be stale). Only the slot's holder calls it.
    #[inline]
    pub(crate) fn pop(&self) -> Option<u32> {
        let len = self.len.load(Ordering::Relaxed) as usize;
        if len == 0 {
            return None;
        }
        let index = self.items[len - 1].load(Ordering::Relaxed);
        self.len.store(len as u32 - 1, Ordering::Relaxed);
        Some(index)
    }

    /// The entries as another thread sees them now, without removing them (any may be stale).
    pub(crate) fn entries(&self) -> impl Iterator<Item = u32> + '_ {
        let len = (self.len.load(Ordering::Acquire) as usize).min(HOT_BLOCKS);
        self.items[..len].iter().map(|item| item.load(Ordering::Relaxed))
    }
}

/// The hot lists of every slot over one set of blocks (a slab's, a size class's).
#[derive(Debug)]
pub(crate) struct HotLists {
    lists: Box<[CachePadded<HotList>]>,
    /// A bit per slot whose list has ever named a block, set by the slot's holder at its first entry and
    /// never cleared: a thread looking for blocks in other lists reads only those (one cache line each),
    /// not all 64.
    used: AtomicU64,
}

impl Default for HotLists {
    fn default() -> Self {
        HotLists {
            lists: (0..ALL_SLOTS).map(|_| CachePadded::new(HotList::default())).collect(),
            used: AtomicU64::new(0),
        }
    }
}

impl HotLists {
    /// A block from the list of the thread in `slot` (where it holds the slot alone), claimed in `states`
    /// and made live for a request of `size` bytes on the stream with `stream_index`; returns its index and
    /// the tag it was freed with.
    #[inline]
    pub(crate) fn take(
        &self,
        states: &BlockStates,
        slot: ThreadSlot,
        stream_index: usize,
        size: u64,
    ) -> Option<(u32, FreeTag)> {
        if !slot.exclusive {
            return None;
        }
        let list = &self.lists[slot.index];
        while let Some(index) = list.pop() {
            if let Some(tag) = states.claim_cached(index, stream_index, size) {
                return Some((index, tag));
            }
        }
        None
    }

    /// As [`HotLists::take`], from the lists of the slots other than `slot`.
    #[cold]
    pub(crate) fn take_from_others(
        &self,
        states: &BlockStates,
        slot: usize,
        stream_index: usize,
        size: u64,
    ) -> Option<(u32, FreeTag)> {
        other_slots(self.used.load(Ordering::Acquire), slot).map(|other| &*self.lists[other]).find_map(|list| {
            list.entries().find_map(|index| states.claim_cached(index, stream_index, size).map(|tag| (index, tag)))
        })
    }

    /// Frees the live block `block` (at `addr`) with `tag` into the list of the thread in `slot`, where it
    /// holds the slot alone and the list has room: `Ok(false)`, with nothing changed, where it does not.
    /// Fails if another thread freed the block first.
    #[inline]
    pub(crate) fn free(
        &self,
        states: &BlockStates,
        slot: ThreadSlot,
        block: LiveBlock,
        tag: FreeTag,
        addr: u64,
    ) -> Result<bool> {
        if !slot.exclusive {
            return Ok(false);
        }
        let list = &self.lists[slot.index];
        if !list.has_room() || !states.release_cached(block, tag, addr)? {
            return Ok(false);
        }
        let pushed = list.push(block.index);
        debug_assert!(pushed, "only the slot's holder fills its list");
        let bit = 1 << slot.index;
        if self.used.load(Ordering::Relaxed) & bit == 0 {
            self.used.fetch_or(bit, Ordering::Release);
        }
        Ok(true)
    }

    /// Every entry of every list that has ever named a block (any may be stale).
    pub(crate) fn entries(&self) -> impl Iterator<Item = u32> + '_ {
        slots_in(self.used.load(Ordering::Acquire)).flat_map(|slot| self.lists[slot].entries())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_first_bounded_and_readable_by_others() {
        let list = HotList::default();
        assert_eq!(list.pop(), None);
        for index in 0..HOT_BLOCKS as u32 {
            assert!(list.push(index));
        }
        assert!(!list.has_room());
        assert!(!list.push(99), "full");
        assert_eq!(list.entries().collect::<Vec<_>>(), (0..HOT_BLOCKS as u32).collect::<Vec<_>>());
        assert_eq!(list.pop(), Some(HOT_BLOCKS as u32 - 1));
        assert!(list.has_room());
        assert_eq!(list.entries().count(), HOT_BLOCKS - 1, "entries() leaves the list as it is");
    }
}
