//! One size class of the hybrid core: up to a fixed number of equal blocks, carved from the dynamic region
//! on first need and then kept, free ones on lock-free stacks, so that most requests of the class are served
//! in O(1) without a lock.
//!
//! Each block has an index below the class's capacity. A growable class (a learned one) may carve past
//! its capacity when its caller says so ([`ClassCache::take_empty`]), its records growing by parts
//! ([`BlockStates::growable`]), up to as many blocks as the region's cap holds.
//! An index is either empty (no block carved for it),
//! cached (a free carved block, in a thread slot's [`HotList`](crate::hot_list::HotList) or on its stack), or live. A thread that
//! holds its slot alone keeps the blocks it frees last in its hot list and takes them back with one
//! compare-and-swap on the block's state word. Empty indices wait on their own stack for the next carve.
//! The dynamic region takes every cached block back when it runs short of memory ([`ClassCache::drain`]);
//! their indices become empty again.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::block_stack::BlockStack;
use crate::block_states::{BlockStates, LiveBlock};
use crate::error::Result;
use crate::hot_list::HotLists;
use crate::stream_order::FreeTag;
use crate::thread_slot::{ALL_SLOTS, ThreadSlot, other_slots, slots_in};

/// The blocks of one size class.
///
/// The fields that threads write as they carve, cache and steal blocks (the issued count, the mask of
/// stacks in use, the heads of the empty stacks) sit on cache lines of their own, apart from those every
/// request reads (the block size, the records' tables, the stacks' and hot lists' tables): a write by one
/// thread then takes no line the others' requests of the class read.
#[derive(Debug)]
pub(crate) struct ClassCache {
    block_size: u64,
    /// The blocks the class was made for (a learned class's count, or a configured one's).
    capacity: u32,
    /// Indices handed out for a first carve so far; the next such index is this one.
    issued: CachePadded<AtomicU32>,
    /// Each block's record: state, free tag, stack link and address.
    states: BlockStates,
    cached: Box<[CachePadded<BlockStack>]>,
    /// Which slots' stacks may hold blocks (a bit per slot), so a thread with an empty stack looks only
    /// where blocks may be.
    cached_slots: CachePadded<AtomicU64>,
    /// Per slot, the blocks its holder freed last (a bound number of them).
    hot: HotLists,
    /// Indices below the capacity whose block the region took back, for the next carve.
    empty: CachePadded<BlockStack>,
    /// Indices at or past the capacity whose block the region took back, for the next carve that may grow.
    grown_empty: CachePadded<BlockStack>,
}

impl ClassCache {
    /// A class of blocks of `block_size` bytes, at most `capacity` of them, none carved yet;
    /// [`Error::HostOutOfMemory`](crate::Error::HostOutOfMemory) when the host has no room for their
    /// records.
    pub(crate) fn new(block_size: u64, capacity: u32) -> Result<Self> {
        Self::with_states(block_size, capacity, BlockStates::new(capacity)?)
    }

    /// A class of blocks of `block_size` bytes made for `capacity` of them, which grows, as its carves
    /// need, to at most `most` blocks, its records each on a cache line of its own where `spread` (several
    /// threads use it); [`Error::HostOutOfMemory`](crate::Error::HostOutOfMemory) when the host has no
    /// room for the first records.
    pub(crate) fn growable(block_size: u64, capacity: u32, most: u32, spread: bool) -> Result<Self> {
        Self::with_states(block_size, capacity, BlockStates::growable(capacity, most, spread)?)
    }

    fn with_states(block_size: u64, capacity: u32, states: BlockStates) -> Result<Self> {
        Ok(ClassCache {
            block_size,
            capacity,
            issued: CachePadded::new(AtomicU32::new(0)),
            states,
            cached: (0..ALL_SLOTS).map(|_| CachePadded::new(BlockStack::default())).collect(),
            cached_slots: CachePadded::new(AtomicU64::new(0)),
            hot: HotLists::default(),
            empty: CachePadded::default(),
            grown_empty: CachePadded::default(),
        })
    }

    /// Bytes per block.
    pub(crate) fn block_size(&self) -> u64 {
        self.block_size
    }

    /// The blocks the class was made for.
    pub(crate) fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Indices handed out for a first carve so far.
    #[cfg(test)]
    pub(crate) fn issued(&self) -> u32 {
        self.issued.load(Ordering::Relaxed)
    }

    /// Whether the class's records take a cache line each.
    #[cfg(test)]
    pub(crate) fn records_spread(&self) -> bool {
        self.states.is_spread()
    }

    /// The most blocks the class may hold: its capacity, or for a growable class what it may grow to.
    #[cfg(test)]
    pub(crate) fn most(&self) -> u32 {
        self.states.most()
    }

    /// A cached block for the thread in `slot`, made live for a request of `size` bytes on the stream with
    /// `stream_index`: its own hot list first, then its own stack, then the others' stacks and lists.
    /// Returns the block's index and the tag it was freed with.
    #[inline]
    pub(crate) fn take_cached(&self, slot: ThreadSlot, stream_index: usize, size: u64) -> Option<(u32, FreeTag)> {
        if let Some(taken) = self.hot.take(&self.states, slot, stream_index, size) {
            return Some(taken);
        }
        let Some(index) = self.cached[slot.index].pop(&self.states).or_else(|| self.steal(slot.index)) else {
            return self.hot.take_from_others(&self.states, slot.index, stream_index, size);
        };
        Some((index, self.states.make_popped_live(index, stream_index, size)))
    }

    #[cold]
    fn steal(&self, slot: usize) -> Option<u32> {
        for other in other_slots(self.cached_slots.load(Ordering::Acquire), slot) {
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

    /// An index with no block, to carve one for: one whose block the region took back, else one never
    /// used, below the class's capacity, or where `grow`, below its most (its records added where they
    /// are missing); `None` when the class holds that many blocks, or the host has no room for more
    /// records.
    pub(crate) fn take_empty(&self, grow: bool) -> Option<u32> {
        if let Some(index) = self.empty.pop(&self.states) {
            return Some(index);
        }
        match grow {
            true => self.grown_empty.pop(&self.states).or_else(|| self.issue(true)),
            false => self.issue(false),
        }
    }

    /// The stack an empty `index` waits on.
    fn empty_stack(&self, index: u32) -> &BlockStack {
        if index < self.capacity { &self.empty } else { &self.grown_empty }
    }

    /// An index never handed out before, with its records.
    #[cold]
    fn issue(&self, grow: bool) -> Option<u32> {
        let most = if grow { self.states.most() } else { self.capacity };
        let index =
            self.issued.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| (n < most).then_some(n + 1)).ok()?;
        // Where the host has no room for the index's records, the index is never used: the request goes to
        // the region, which serves it without them.
        self.states.make_room(index).ok().filter(|&made| made).map(|_| index)
    }

    /// Returns an index whose carve failed.
    pub(crate) fn give_back_empty(&self, index: u32) {
        self.empty_stack(index).push(&self.states, index);
    }

    /// Frees the live block `block` (at `addr`) with `tag` and keeps it for the thread in `slot`: in its hot
    /// list where the thread holds the slot alone and the list has room, else on its stack. Fails if another
    /// thread freed it first.
    #[inline]
    pub(crate) fn free_block(&self, slot: ThreadSlot, block: LiveBlock, tag: FreeTag, addr: u64) -> Result<()> {
        if self.hot.free(&self.states, slot, block, tag, addr)? {
            return Ok(());
        }
        self.states.release(block, tag, addr)?;
        self.cache(slot, block.index);
        Ok(())
    }

    /// Frees a block that [`ClassCache::take_cached`] made live but that was not handed out, with the tag
    /// it had.
    pub(crate) fn put_back(&self, slot: ThreadSlot, index: u32, tag: FreeTag) {
        self.states.set_free(index, tag);
        self.cache(slot, index);
    }

    /// Keeps the free block `index` on the stack of the thread in `slot`.
    #[inline]
    fn cache(&self, slot: ThreadSlot, index: u32) {
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

    /// Every live block: `(index, requested size, stream index)`.
    pub(crate) fn live_blocks(&self) -> impl Iterator<Item = (u32, u64, usize)> + '_ {
        self.states.live_blocks()
    }

    /// Takes cached blocks until they hold `bytes` (every one for `u64::MAX`): `(index, address, tag)` of
    /// each; returns the bytes still to take. Each index is then neither cached nor live, its address still
    /// recorded, until [`ClassCache::make_empty`]. The blocks freed longest ago go first (the stacks' before
    /// the hot lists').
    pub(crate) fn drain(&self, bytes: u64, out: &mut Vec<(u32, u64, FreeTag)>) -> u64 {
        let mut left = bytes;
        // Only the stacks whose bit is set: a drain that read all 64 stacks of every class took a cache
        // miss per stack, most of them empty. A block pushed after the mask is read stays cached, as it
        // would if pushed after its stack was read.
        for slot in slots_in(self.cached_slots.load(Ordering::Acquire)) {
            let stack = &self.cached[slot];
            while left > 0
                && let Some(index) = stack.pop(&self.states)
            {
                out.push((index, self.states.addr(index), self.states.free_tag(index)));
                left = left.saturating_sub(self.block_size);
            }
        }
        // Entries stay in the lists, stale: the index is no longer cached, and a claim skips it.
        for index in self.hot.entries() {
            if left == 0 {
                break;
            }
            if let Some(tag) = self.states.uncache(index) {
                out.push((index, self.states.addr(index), tag));
                left = left.saturating_sub(self.block_size);
            }
        }
        left
    }

    /// Forgets the address of block `index`, taken by [`ClassCache::drain`], and makes the index empty.
    pub(crate) fn make_empty(&self, index: u32) {
        self.states.clear_addr(index);
        self.empty_stack(index).push(&self.states, index);
    }

    /// Whether no block is cached (racy). A stale entry of a hot list does not count: the region would
    /// drain the core for nothing.
    pub(crate) fn nothing_cached(&self) -> bool {
        slots_in(self.cached_slots.load(Ordering::Acquire)).all(|s| self.cached[s].is_empty())
            && !self.hot.entries().any(|index| self.states.is_cached(index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thread_slot;

    /// A drain of some bytes takes blocks until they hold that many, and says what it could not take.
    #[test]
    fn a_drain_takes_as_many_blocks_as_the_bytes_asked_for() {
        let class = ClassCache::new(4096, 4).unwrap();
        let slot = thread_slot::current();
        for addr in [0x1000, 0x2000, 0x3000, 0x4000] {
            let index = class.take_empty(false).unwrap();
            class.set_addr(index, addr);
            class.mark_live(index, 0, 100);
            class.put_back(slot, index, FreeTag::FRESH);
        }
        let mut drained = Vec::new();
        assert_eq!(class.drain(5000, &mut drained), 0, "two blocks hold 5000 bytes");
        assert_eq!(drained.len(), 2);
        assert_eq!(class.drain(3 * 4096, &mut drained), 4096, "two left");
        assert_eq!(drained.len(), 4);
        assert!(class.nothing_cached());
    }

    /// A growable class hands out indices up to its capacity, past it only where asked to grow, and never
    /// past its most; an index made empty is handed out again first, one past the capacity only where asked
    /// to grow.
    #[test]
    fn a_growable_class_carves_past_its_capacity_only_when_it_may_grow() {
        let class = ClassCache::growable(4096, 2, 5, false).unwrap();
        assert_eq!((class.capacity(), class.most()), (2, 5));
        assert_eq!(
            (class.take_empty(false), class.take_empty(false), class.take_empty(false)),
            (Some(0), Some(1), None)
        );
        let grown: Vec<Option<u32>> = (0..4).map(|_| class.take_empty(true)).collect();
        assert_eq!(grown, vec![Some(2), Some(3), Some(4), None], "up to its most");
        class.set_addr(4, 0x5000);
        class.make_empty(4);
        class.set_addr(1, 0x2000);
        class.make_empty(1);
        assert_eq!(class.take_empty(false), Some(1), "an empty index below the capacity first");
        assert_eq!(class.take_empty(false), None, "one past the capacity waits for a carve that may grow");
        assert_eq!(class.take_empty(true), Some(4));
        assert_eq!(ClassCache::new(4096, 2).unwrap().most(), 2, "a fixed class's most is its capacity");
    }

    #[test]
    fn indices_move_between_empty_cached_and_live() {
        let class = ClassCache::new(4096, 2).unwrap();
        let slot = thread_slot::current();
        assert_eq!(class.take_cached(slot, 0, 100), None);
        let a = class.take_empty(false).unwrap();
        let b = class.take_empty(false).unwrap();
        assert_eq!(class.take_empty(false), None, "capacity reached");
        class.set_addr(a, 0x1000);
        class.set_addr(b, 0x3000);
        class.mark_live(a, 0, 100);
        let live = class.live(a, 0x1000).unwrap();
        class.free_block(slot, live, FreeTag::freed(0, 1), 0x1000).unwrap();
        assert!(class.free_block(slot, live, FreeTag::freed(0, 1), 0x1000).is_err(), "a second free fails");
        assert!(!class.nothing_cached());
        assert_eq!(class.take_cached(slot, 0, 50), Some((a, FreeTag::freed(0, 1))));
        class.free_block(slot, class.live(a, 0x1000).unwrap(), FreeTag::freed(0, 2), 0x1000).unwrap();
        // b goes to the stack: made live by a carve that failed elsewhere, put back.
        class.mark_live(b, 0, 10);
        class.put_back(slot, b, FreeTag::FRESH);
        let mut drained = Vec::new();
        class.drain(u64::MAX, &mut drained);
        drained.sort_unstable_by_key(|d| d.0);
        let mut expected = vec![(a, 0x1000, FreeTag::freed(0, 2)), (b, 0x3000, FreeTag::FRESH)];
        expected.sort_unstable_by_key(|d| d.0);
        assert_eq!(drained, expected);
        assert_eq!(class.addr(a), 0x1000, "the address stays recorded until the index is made empty");
        assert_eq!(class.take_empty(false), None, "a drained index is not empty before it is made so");
        for &(index, _, _) in &drained {
            class.make_empty(index);
        }
        assert_eq!(class.addr(a), 0);
        assert!(class.nothing_cached(), "the hot list's stale entry is no cached block");
        assert_eq!(class.take_cached(slot, 0, 10), None, "the hot list's entry is stale after the drain");
        assert!(class.take_empty(false).is_some() && class.take_empty(false).is_some());
    }
}
