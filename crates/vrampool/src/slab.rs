//! A slab: a run of equal blocks at one base address, handed out in O(1) without a lock.
//!
//! Each thread pops and pushes blocks on a lock-free stack of its own slot (taking from the shared stack,
//! then from other slots, when its own is empty), so threads rarely touch the same cache line. A block's
//! index is `(addr - base) / block_size`. Each block has a state word (live bit, stream index, requested
//! size), so a second free, or an address inside a block, is an error and never touches the stacks.

use crossbeam_utils::CachePadded;

use crate::block_stack::BlockStack;
use crate::block_states::{BlockStates, LiveBlock};
use crate::error::{Error, Result};
use crate::stream_order::FreeTag;
use crate::thread_slot::{ALL_SLOTS, SHARED_SLOT, ThreadSlot};

/// Equal blocks at one base address.
#[derive(Debug)]
pub(crate) struct Slab {
    base: u64,
    block_size: u64,
    count: u32,
    block_shift: Option<u32>,
    block_align: u64,
    states: BlockStates,
    stacks: Box<[CachePadded<BlockStack>]>,
}

impl Slab {
    /// `count` free blocks of `block_size` bytes from `base`.
    pub(crate) fn new(base: u64, block_size: u64, count: u32) -> Self {
        let states = BlockStates::new(count);
        let stacks: Box<[CachePadded<BlockStack>]> =
            (0..ALL_SLOTS).map(|_| CachePadded::new(BlockStack::default())).collect();
        for index in (0..count).rev() {
            stacks[SHARED_SLOT].push(&states, index);
        }
        Slab {
            base,
            block_size,
            count,
            block_shift: block_size.is_power_of_two().then(|| block_size.trailing_zeros()),
            block_align: 1u64 << base.trailing_zeros().min(block_size.trailing_zeros()),
            states,
            stacks,
        }
    }

    /// The first address.
    pub(crate) fn base(&self) -> u64 {
        self.base
    }

    /// Bytes spanned.
    pub(crate) fn len(&self) -> u64 {
        self.block_size * u64::from(self.count)
    }

    /// Whether `addr` lies inside the slab.
    #[inline]
    pub(crate) fn contains(&self, addr: u64) -> bool {
        addr.wrapping_sub(self.base) < self.len()
    }

    /// The largest alignment every block has.
    pub(crate) fn block_alignment(&self) -> u64 {
        self.block_align
    }

    /// The address of block `index`.
    #[inline]
    pub(crate) fn block_addr(&self, index: u32) -> u64 {
        self.base + u64::from(index) * self.block_size
    }

    /// Takes a free block for the thread in `slot`, or `None` when every block is live.
    #[inline]
    pub(crate) fn pop(&self, slot: ThreadSlot) -> Option<u32> {
        if let Some(index) = self.stacks[slot.index].pop(&self.states) {
            return Some(index);
        }
        self.steal(slot.index)
    }

    #[cold]
    fn steal(&self, slot: usize) -> Option<u32> {
        if let Some(index) = self.stacks[SHARED_SLOT].pop(&self.states) {
            return Some(index);
        }
        (1..ALL_SLOTS)
            .map(|k| (slot + k) % ALL_SLOTS)
            .filter(|&other| other != SHARED_SLOT && !self.stacks[other].is_empty())
            .find_map(|other| self.stacks[other].pop(&self.states))
    }

    /// Gives a block back to the stack of the thread in `slot`.
    #[inline]
    pub(crate) fn push(&self, slot: ThreadSlot, index: u32) {
        self.stacks[slot.index].push(&self.states, index);
    }

    /// The tag of the stream that last freed block `index`.
    #[inline]
    pub(crate) fn free_tag(&self, index: u32) -> FreeTag {
        self.states.free_tag(index)
    }

    /// Marks a popped block live for a request of `size` bytes on the stream with `stream_index`.
    #[inline]
    pub(crate) fn mark_live(&self, index: u32, stream_index: usize, size: u64) {
        self.states.mark_live(index, stream_index, size);
    }

    /// The live block that starts at `addr` (inside the slab), or the error a free of `addr` gets.
    #[inline]
    pub(crate) fn live_block(&self, addr: u64) -> Result<LiveBlock> {
        let offset = addr - self.base;
        let (index, within) = match self.block_shift {
            Some(shift) => (offset >> shift, offset & (self.block_size - 1)),
            None => (offset / self.block_size, offset % self.block_size),
        };
        if within != 0 {
            return Err(Error::InteriorAddress { addr, block: addr - within });
        }
        self.states.live(index as u32, addr)
    }

    /// Marks a live block free with `tag` and gives it back; fails if another thread freed it first.
    #[inline]
    pub(crate) fn release(&self, slot: ThreadSlot, block: LiveBlock, tag: FreeTag) -> Result<()> {
        self.states.release(block, tag, self.block_addr(block.index))?;
        self.push(slot, block.index);
        Ok(())
    }

    /// Every live block: `(index, requested size, stream index)`.
    pub(crate) fn live_blocks(&self) -> impl Iterator<Item = (u32, u64, usize)> + '_ {
        self.states.live_blocks()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_come_out_once_and_go_back() {
        let slab = Slab::new(1 << 30, 768, 4);
        let slot = crate::thread_slot::current();
        assert_eq!(slab.block_alignment(), 256);
        let blocks: Vec<u32> = (0..4).map(|_| slab.pop(slot).unwrap()).collect();
        assert_eq!(blocks, vec![0, 1, 2, 3]);
        assert!(slab.pop(slot).is_none());
        slab.mark_live(2, 1, 500);
        let live = slab.live_block(slab.block_addr(2)).unwrap();
        assert_eq!((live.size(), live.stream_index()), (500, 1));
        assert!(matches!(slab.live_block(slab.block_addr(2) + 256), Err(Error::InteriorAddress { .. })));
        assert!(matches!(slab.live_block(slab.block_addr(1)), Err(Error::NotLive { .. })));
        slab.release(slot, live, FreeTag::freed(1, 3)).unwrap();
        assert!(slab.release(slot, live, FreeTag::FRESH).is_err(), "a second release fails");
        assert_eq!(slab.pop(slot), Some(2));
        assert_eq!(slab.free_tag(2), FreeTag::freed(1, 3));
    }
}
