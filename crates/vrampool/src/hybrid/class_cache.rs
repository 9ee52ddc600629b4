//! One size class of the hybrid core: up to a fixed number of equal blocks, carved from the dynamic region
//! on first need and then kept, free ones on lock-free stacks, so that most requests of the class are served
//! in O(1) without a lock.
//!
//! Each block has an index below the class's capacity. An index is either empty (no block carved for it),
//! cached (a free carved block, on a thread slot's stack), or live. Empty indices wait on their own stack
//! for the next carve. The dynamic region takes every cached block back when it needs memory
//! ([`ClassCache::drain`]); their indices become empty again.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::block_stack::BlockStack;
use crate::block_states::{BlockStates, LiveBlock};
use crate::error::Result;
use crate::stream_order::FreeTag;
use crate::thread_slot::{ALL_SLOTS, ThreadSlot};

/// The blocks of one size class.
#[derive(Debug)]
pub(crate) struct ClassCache {
    block_size: u64,
    capacity: u32,
    /// Each block's record: state, free tag, stack link and address.
    states: BlockStates,
    cached: Box<[CachePadded<BlockStack>]>,
    /// Which slots' stacks may hold blocks (a bit per slot), so a thread with an empty stack looks only
    /// where blocks may be.
    cached_slots: AtomicU64,
    empty: BlockStack,
}

impl ClassCache {
    /// A class of blocks of `block_size` bytes, at most `capacity` of them, none carved yet.
    pub(crate) fn new(block_size: u64, capacity: u32) -> Self {
        let states = BlockStates::new(capacity);
        let empty = BlockStack::default();
        for index in (0..capacity).rev() {
            empty.push(&states, index);
        }
        ClassCache {
            block_size,
            capacity,
            states,
            cached: (0..ALL_SLOTS).map(|_| CachePadded::new(BlockStack::default())).collect(),
            cached_slots: AtomicU64::new(0),
            empty,
        }
    }

    /// Bytes per block.
    pub(crate) fn block_size(&self) -> u64 {
        self.block_size
    }

    /// The most blocks the class holds.
    pub(crate) fn capacity(&self) -> u32 {
        self.capacity
    }

    /// A cached block for the thread in `slot`: its own stack first, then the others'.
    #[inline]
    pub(crate) fn take_cached(&self, slot: ThreadSlot) -> Option<u32> {
        if let Some(index) = self.cached[slot.index].pop(&self.states) {
            return Some(index);
        }
        self.steal(slot.index)
    }

    #[cold]
    fn steal(&self, slot: usize) -> Option<u32> {
        let mut candidates = self.cached_slots.load(Ordering::Acquire) & !(1 << slot);
        while candidates != 0 {
            let other = candidates.trailing_zeros() as usize;
            candidates &= candidates - 1;
            if let Some(index) = self.cached[other].pop(&self.states) {
                return Some(index);
            }
            if self.cached[other].is_empty() {
                // A push after this clear sets the bit again.
                self.cached_slots.fetch_and(!(1 << other), Ordering::AcqRel);
                if !self.cached[other].is_empty() {
                    self.cached_slots.fetch_or(1 << other, Ordering::AcqRel);
                }
            }
        }
        None
    }

    /// An index with no block, to carve one for; `None` when the class holds its capacity.
    pub(crate) fn take_empty(&self) -> Option<u32> {
        self.empty.pop(&self.states)
    }

    /// Returns an index whose carve failed.
    pub(crate) fn give_back_empty(&self, index: u32) {
        self.empty.push(&self.states, index);
    }

    /// Keeps the free block `index` for the thread in `slot`.
    #[inline]
    pub(crate) fn cache(&self, slot: ThreadSlot, index: u32) {
        self.cached[slot.index].push(&self.states, index);
        let bit = 1 << slot.index;
        if self.cached_slots.load(Ordering::Relaxed) & bit == 0 {
            self.cached_slots.fetch_or(bit, Ordering::AcqRel);
        }
    }

    /// The address of block `index` (0 when none is carved).
    #[inline]
    pub(crate) fn addr(&self, index: u32) -> u64 {
        self.states.addr(index)
    }

    /// Records the block carved for `index`.
    pub(crate) fn set_addr(&self, index: u32, addr: u64) {
        self.states.set_addr(index, addr);
    }

    /// The tag of the stream that last freed block `index`.
    #[inline]
    pub(crate) fn free_tag(&self, index: u32) -> FreeTag {
        self.states.free_tag(index)
    }

    /// Marks block `index` live for a request of `size` bytes on the stream with `stream_index`.
    #[inline]
    pub(crate) fn mark_live(&self, index: u32, stream_index: usize, size: u64) {
        self.states.mark_live(index, stream_index, size);
    }

    /// Block `index` at `addr` if it is live.
    #[inline]
    pub(crate) fn live(&self, index: u32, addr: u64) -> Result<LiveBlock> {
        self.states.live(index, addr)
    }

    /// Marks a live block free with `tag`; fails if another thread freed it first.
    #[inline]
    pub(crate) fn release(&self, block: LiveBlock, tag: FreeTag, addr: u64) -> Result<()> {
        self.states.release(block, tag, addr)
    }

    /// Every live block: `(index, requested size, stream index)`.
    pub(crate) fn live_blocks(&self) -> impl Iterator<Item = (u32, u64, usize)> + '_ {
        self.states.live_blocks()
    }

    /// Takes every cached block: `(index, address, tag)`; their indices become empty.
    pub(crate) fn drain(&self, out: &mut Vec<(u32, u64, FreeTag)>) {
        for stack in self.cached.iter() {
            while let Some(index) = stack.pop(&self.states) {
                let addr = self.states.take_addr(index);
                out.push((index, addr, self.states.free_tag(index)));
                self.empty.push(&self.states, index);
            }
        }
    }

    /// Whether no block is cached (racy).
    pub(crate) fn nothing_cached(&self) -> bool {
        let slots = self.cached_slots.load(Ordering::Acquire);
        (0..ALL_SLOTS).filter(|s| slots & (1 << s) != 0).all(|s| self.cached[s].is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thread_slot;

    #[test]
    fn indices_move_between_empty_cached_and_live() {
        let class = ClassCache::new(4096, 2);
        let slot = thread_slot::current();
        assert_eq!(class.take_cached(slot), None);
        let a = class.take_empty().unwrap();
        let b = class.take_empty().unwrap();
        assert_eq!(class.take_empty(), None, "capacity reached");
        class.set_addr(a, 0x1000);
        class.set_addr(b, 0x3000);
        class.mark_live(a, 0, 100);
        let live = class.live(a, 0x1000).unwrap();
        class.release(live, FreeTag::freed(0, 1), 0x1000).unwrap();
        class.cache(slot, a);
        assert!(!class.nothing_cached());
        assert_eq!(class.take_cached(slot), Some(a));
        class.cache(slot, a);
        let mut drained = Vec::new();
        class.drain(&mut drained);
        assert_eq!(drained, vec![(a, 0x1000, FreeTag::freed(0, 1))]);
        assert_eq!(class.addr(a), 0);
        assert!(class.nothing_cached());
        assert_eq!(class.take_empty(), Some(a));
    }
}
