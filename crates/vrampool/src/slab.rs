//! A slab: a run of equal blocks at one base address, handed out in O(1) without a lock.
//!
//! A thread that holds its slot alone keeps the blocks it frees last in its slot's [`HotList`](crate::hot_list::HotList), and takes
//! them back with one compare-and-swap on the block's state word: a free and an allocation each cost one
//! atomic read-modify-write. Other blocks sit on lock-free stacks, one per slot (taking from the shared
//! stack, then from other slots, then from other slots' hot lists, when its own are empty), so threads
//! rarely touch the same cache line. A block's index is `(addr - base) / block_size`. Each block has a
//! state word (live bit, stream index, requested size; or cached, with the tag it was freed with), so a
//! second free, or an address inside a block, is an error and never touches the stacks or lists.

use crossbeam_utils::CachePadded;

use crate::block_stack::BlockStack;
use crate::block_states::{BlockStates, LiveBlock};
use crate::error::{Error, Result};
use crate::hot_list::HotLists;
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
    hot: HotLists,
}

impl Slab {
    /// `count` free blocks of `block_size` bytes from `base`; [`Error::HostOutOfMemory`] when the host has
    /// no room for their records.
    pub(crate) fn new(base: u64, block_size: u64, count: u32) -> Result<Self> {
        let states = BlockStates::new(count)?;
        let stacks: Box<[CachePadded<BlockStack>]> =
            (0..ALL_SLOTS).map(|_| CachePadded::new(BlockStack::default())).collect();
        for index in (0..count).rev() {
            stacks[SHARED_SLOT].push(&states, index);
        }
        Ok(Slab {
            base,
            block_size,
            count,
            block_shift: block_size.is_power_of_two().then(|| block_size.trailing_zeros()),
            block_align: 1u64 << base.trailing_zeros().min(block_size.trailing_zeros()),
            states,
            stacks,
            hot: HotLists::default(),
        })
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

    /// Takes a free block for the thread in `slot` and makes it live for a request of `size` bytes on the
    /// stream with `stream_index`; returns its index and the tag it was freed with, or `None` when every
    /// block is live.
    #[inline]
    pub(crate) fn take(&self, slot: ThreadSlot, stream_index: usize, size: u64) -> Option<(u32, FreeTag)> {
        if let Some(taken) = self.hot.take(&self.states, slot, stream_index, size) {
            return Some(taken);
        }
        let index = match self.stacks[slot.index].pop(&self.states) {
            Some(index) => index,
            None => return self.steal(slot.index, stream_index, size),
        };
        Some((index, self.states.make_popped_live(index, stream_index, size)))
    }

    /// A block from the hot list of the thread in `slot` only (where it holds the slot alone), made live as
    /// [`Slab::take`] does; `None` where the list has none.
    #[inline(always)]
    pub(crate) fn take_hot(&self, slot: ThreadSlot, stream_index: usize, size: u64) -> Option<(u32, FreeTag)> {
        self.hot.take(&self.states, slot, stream_index, size)
    }

    /// [`Slab::take`] when the slot's own list and stack are empty: the shared stack, the other slots'
    /// stacks, then the blocks other slots keep in their hot lists.
    #[cold]
    fn steal(&self, slot: usize, stream_index: usize, size: u64) -> Option<(u32, FreeTag)> {
        let others = || (1..ALL_SLOTS).map(move |k| (slot + k) % ALL_SLOTS);
        let popped = self.stacks[SHARED_SLOT].pop(&self.states).or_else(|| {
            others()
                .filter(|&other| other != SHARED_SLOT && !self.stacks[other].is_empty())
                .find_map(|other| self.stacks[other].pop(&self.states))
        });
        if let Some(index) = popped {
            return Some((index, self.states.make_popped_live(index, stream_index, size)));
        }
        self.hot.take_from_others(&self.states, slot, stream_index, size)
    }

    /// Frees a block that [`Slab::take`] made live but that was not handed out, with the tag it had.
    pub(crate) fn put_back(&self, slot: ThreadSlot, index: u32, tag: FreeTag) {
        self.states.set_free(index, tag);
        self.stacks[slot.index].push(&self.states, index);
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

    /// Marks a live block free with `tag` and gives it back: to the hot list of the thread in `slot` where it
    /// holds the slot alone and the list has room, else to the slot's stack. Fails if another thread freed
    /// it first.
    #[inline]
    pub(crate) fn release(&self, slot: ThreadSlot, block: LiveBlock, tag: FreeTag) -> Result<()> {
        let addr = self.block_addr(block.index);
        if self.hot.free(&self.states, slot, block, tag, addr)? {
            return Ok(());
        }
        self.states.release(block, tag, addr)?;
        self.stacks[slot.index].push(&self.states, block.index);
        Ok(())
    }

    /// Frees a live block into the hot list of the thread in `slot`, as [`Slab::release`] does when the
    /// thread holds its slot alone and the list has room; `false`, with nothing changed, otherwise (another
    /// thread having freed the block first included: [`Slab::release`] reports that).
    #[inline(always)]
    pub(crate) fn release_hot(&self, slot: ThreadSlot, block: LiveBlock, tag: FreeTag, addr: u64) -> bool {
        matches!(self.hot.free(&self.states, slot, block, tag, addr), Ok(true))
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
        let slab = Slab::new(1 << 30, 768, 4).unwrap();
        let slot = crate::thread_slot::current();
        assert!(slot.exclusive);
        assert_eq!(slab.block_alignment(), 256);
        let blocks: Vec<u32> = (0..4).map(|_| slab.take(slot, 0, 100).unwrap().0).collect();
        assert_eq!(blocks, vec![0, 1, 2, 3]);
        assert!(slab.take(slot, 0, 100).is_none());
        slab.put_back(slot, 2, FreeTag::FRESH);
        assert_eq!(slab.take(slot, 1, 500), Some((2, FreeTag::FRESH)));
        let live = slab.live_block(slab.block_addr(2)).unwrap();
        assert_eq!((live.size(), live.stream_index()), (500, 1));
        assert!(matches!(slab.live_block(slab.block_addr(2) + 256), Err(Error::InteriorAddress { .. })));
        slab.release(slot, live, FreeTag::freed(1, 3)).unwrap();
        assert!(slab.release(slot, live, FreeTag::FRESH).is_err(), "a second release fails");
        assert!(matches!(slab.live_block(slab.block_addr(2)), Err(Error::NotLive { .. })), "cached is not live");
        assert_eq!(slab.take(slot, 0, 100), Some((2, FreeTag::freed(1, 3))), "the hot list gives it back");
    }

    /// Blocks a thread keeps in its hot list are taken by another thread when nothing else is free, and
    /// the list's stale entry is skipped afterwards.
    #[test]
    fn another_thread_takes_cached_blocks_and_stale_entries_are_skipped() {
        let slab = std::sync::Arc::new(Slab::new(1 << 30, 4096, 2).unwrap());
        let slot = crate::thread_slot::current();
        let (a, _) = slab.take(slot, 0, 10).unwrap();
        let (b, _) = slab.take(slot, 0, 10).unwrap();
        for index in [a, b] {
            let live = slab.live_block(slab.block_addr(index)).unwrap();
            slab.release(slot, live, FreeTag::freed(0, 7)).unwrap();
        }
        let other = slab.clone();
        let taken = std::thread::spawn(move || {
            let slot = crate::thread_slot::current();
            let first = other.take(slot, 0, 20);
            let second = other.take(slot, 0, 20);
            (first, second, other.take(slot, 0, 20))
        })
        .join()
        .unwrap();
        assert_eq!(taken.0.map(|t| t.1), Some(FreeTag::freed(0, 7)));
        assert!(taken.1.is_some() && taken.2.is_none(), "{taken:?}");
        assert!(slab.take(slot, 0, 10).is_none(), "both entries of this thread's list are stale");
        assert_eq!(slab.live_blocks().count(), 2);
    }

    /// Threads take and give back blocks through their lists, the stacks and each other's lists: no block
    /// is ever live twice.
    #[test]
    fn threads_never_hold_a_block_twice() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let slab = std::sync::Arc::new(Slab::new(1 << 30, 4096, 24).unwrap());
        let held: std::sync::Arc<Vec<AtomicBool>> =
            std::sync::Arc::new((0..24).map(|_| AtomicBool::new(false)).collect());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (slab, held) = (slab.clone(), held.clone());
                std::thread::spawn(move || {
                    let slot = crate::thread_slot::current();
                    let mut mine = Vec::new();
                    for round in 0..20_000usize {
                        if (round + t) % 3 != 0 || mine.is_empty() {
                            if let Some((index, _)) = slab.take(slot, 0, 64) {
                                assert!(!held[index as usize].swap(true, Ordering::AcqRel), "block {index} twice");
                                mine.push(index);
                            }
                        }
                        if mine.len() > 8 || round % 2 == 0 {
                            if let Some(index) = mine.pop() {
                                held[index as usize].store(false, Ordering::Release);
                                let live = slab.live_block(slab.block_addr(index)).unwrap();
                                slab.release(slot, live, FreeTag::freed(0, round as u64)).unwrap();
                            }
                        }
                    }
                    mine.len()
                })
            })
            .collect();
        let still_held: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(slab.live_blocks().count(), still_held);
    }
}
