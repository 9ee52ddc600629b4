//! The record of each block of a slab or a size class: live or free, and for a live block the stream and
//! the bytes requested; for a free one, the tag of the stream that freed it and its successor on a free
//! stack; for a size class's block, its address.
//!
//! A block's whole record sits in one 32-byte cell, so an allocation or a free touches one cache line of
//! it, not a line in each of three tables.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::block_stack::{BlockLinks, NONE};
use crate::error::{Error, Result};
use crate::stream_order::FreeTag;

/// A block's state word: the live bit, the stream index and the requested size.
const LIVE: u64 = 1 << 63;
const STREAM_SHIFT: u32 = 56;
const SIZE_MASK: u64 = (1 << STREAM_SHIFT) - 1;

/// Per block: its state; while free, the tag of the stream that freed it and its successor on a stack;
/// its address where it is not computed from its index.
#[derive(Debug)]
#[repr(align(32))]
struct BlockSlot {
    state: AtomicU64,
    free_tag: AtomicU64,
    next: crate::sync::AtomicU64,
    addr: AtomicU64,
}

impl Default for BlockSlot {
    fn default() -> Self {
        BlockSlot {
            state: AtomicU64::new(0),
            free_tag: AtomicU64::new(0),
            next: crate::sync::AtomicU64::new(u64::from(NONE)),
            addr: AtomicU64::new(0),
        }
    }
}

/// A block being freed: where it is and what its state word said.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LiveBlock {
    pub(crate) index: u32,
    state: u64,
}

impl LiveBlock {
    /// The bytes requested for it.
    pub(crate) fn size(self) -> u64 {
        self.state & SIZE_MASK
    }

    /// The index of the stream it was allocated on.
    pub(crate) fn stream_index(self) -> usize {
        ((self.state & !LIVE) >> STREAM_SHIFT) as usize
    }
}

/// Per block, by index: its record.
#[derive(Debug)]
pub(crate) struct BlockStates {
    blocks: Box<[BlockSlot]>,
}

impl BlockStates {
    /// States for `count` free blocks.
    pub(crate) fn new(count: u32) -> Self {
        BlockStates { blocks: (0..count).map(|_| BlockSlot::default()).collect() }
    }

    /// The address recorded for block `index` (0 when none is).
    #[inline]
    pub(crate) fn addr(&self, index: u32) -> u64 {
        self.blocks[index as usize].addr.load(Ordering::Acquire)
    }

    /// Records the address of block `index`.
    pub(crate) fn set_addr(&self, index: u32, addr: u64) {
        self.blocks[index as usize].addr.store(addr, Ordering::Release);
    }

    /// Clears the address of block `index` and returns what it was.
    pub(crate) fn take_addr(&self, index: u32) -> u64 {
        self.blocks[index as usize].addr.swap(0, Ordering::AcqRel)
    }

    /// The tag of the stream that last freed block `index`.
    #[inline]
    pub(crate) fn free_tag(&self, index: u32) -> FreeTag {
        FreeTag::unpack_single(self.blocks[index as usize].free_tag.load(Ordering::Relaxed))
    }

    /// Marks block `index` live for a request of `size` bytes on the stream with `stream_index`.
    #[inline]
    pub(crate) fn mark_live(&self, index: u32, stream_index: usize, size: u64) {
        let state = LIVE | ((stream_index as u64) << STREAM_SHIFT) | size;
        self.blocks[index as usize].state.store(state, Ordering::Relaxed);
    }

    /// Block `index` (at `addr`, for the error) if it is live.
    #[inline]
    pub(crate) fn live(&self, index: u32, addr: u64) -> Result<LiveBlock> {
        let state = self.blocks[index as usize].state.load(Ordering::Relaxed);
        if state & LIVE == 0 {
            return Err(Error::NotLive { addr });
        }
        Ok(LiveBlock { index, state })
    }

    /// Marks a live block free with `tag`; fails if another thread freed it first.
    #[inline]
    pub(crate) fn release(&self, block: LiveBlock, tag: FreeTag, addr: u64) -> Result<()> {
        let slot = &self.blocks[block.index as usize];
        if slot.state.compare_exchange(block.state, 0, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return Err(Error::NotLive { addr });
        }
        slot.free_tag.store(tag.pack_single(), Ordering::Relaxed);
        Ok(())
    }

    /// Every live block: `(index, requested size, stream index)`.
    pub(crate) fn live_blocks(&self) -> impl Iterator<Item = (u32, u64, usize)> + '_ {
        self.blocks.iter().enumerate().filter_map(|(index, slot)| {
            let state = slot.state.load(Ordering::Relaxed);
            (state & LIVE != 0).then(|| {
                let block = LiveBlock { index: index as u32, state };
                (block.index, block.size(), block.stream_index())
            })
        })
    }
}

impl BlockLinks for BlockStates {
    #[inline]
    fn next(&self, index: u32) -> &crate::sync::AtomicU64 {
        &self.blocks[index as usize].next
    }
}
