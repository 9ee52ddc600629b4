//! The record of each block of a slab or a size class: live or free, and for a live block the stream and
//! the bytes requested; for a free one, the tag of the stream that freed it and its successor on a free
//! stack; for a size class's block, its address.
//!
//! A block's record is two 16-byte cells in two tables: its state word and address, which every allocation
//! and free touches, and its free tag and stack link, which only a free stack's push and pop touch. An
//! allocation or a free through a thread's hot list (most of them) thus touches one line of records, in a
//! table half the size of one of whole 32-byte records: where the tables have gone cold between calls (a
//! program that does other work in between), a free fetches that line from memory less often
//! (docs/BENCHMARKS.md). A free or allocation through a stack touches both.
//!
//! Where several threads use a size class, its blocks are carved by whichever thread needs one and then
//! kept by that thread, so that neighbouring indices belong to different threads: with four state words to
//! a cache line, each thread's allocations and frees took the line from the others. Such a set
//! ([`BlockStates::growable`] asked to spread) gives each state word and address a cache line of its own,
//! four times the memory of the packed cells. A set one thread uses keeps them packed: a churn over many
//! blocks then touches a quarter of the lines.

use std::sync::OnceLock;

use parking_lot::Mutex;

use crate::sync::{AtomicU64, Ordering};

use crate::block_stack::{BlockLinks, NONE};
use crate::error::{Error, Result};
use crate::host_table::host_table;
use crate::stream_order::FreeTag;
use crate::units::MAX_BLOCK_SIZE;

/// A block's state word: the live bit, the stream index and the requested size.
const LIVE: u64 = 1 << 63;
const STREAM_SHIFT: u32 = 56;
const SIZE_MASK: u64 = (1 << STREAM_SHIFT) - 1;
const _: () = assert!(MAX_BLOCK_SIZE <= SIZE_MASK, "a block's requested size fits its state word");
/// The state word of a free block named in a thread slot's hot list: this bit, and below it the tag of
/// the stream that freed it (its stream number above [`CACHED_SEQ_BITS`] bits of sequence number), so that
/// whoever claims the block reads its tag in the same atomic step.
const CACHED: u64 = 1 << 62;
const CACHED_SEQ_BITS: u32 = 55;
/// The bits of a packed [`FreeTag`] ([`FreeTag::pack_single`]) that hold its sequence number.
const PACKED_SEQ_BITS: u32 = 57;

/// The state word of a block cached with `tag`, where the tag's sequence number fits (below 2^55, so
/// always in practice).
fn cached_state(tag: FreeTag) -> Option<u64> {
    let packed = tag.pack_single();
    let (stream, seq) = (packed >> PACKED_SEQ_BITS, packed & ((1 << PACKED_SEQ_BITS) - 1));
    (seq < 1 << CACHED_SEQ_BITS).then_some(CACHED | (stream << CACHED_SEQ_BITS) | seq)
}

/// The tag a cached state word carries.
fn cached_tag(state: u64) -> FreeTag {
    let (stream, seq) = ((state & !CACHED) >> CACHED_SEQ_BITS, state & ((1 << CACHED_SEQ_BITS) - 1));
    FreeTag::unpack_single((stream << PACKED_SEQ_BITS) | seq)
}

/// The state word of a block live for `size` bytes on the stream with `stream_index`.
#[inline]
fn live_state(stream_index: usize, size: u64) -> u64 {
    LIVE | ((stream_index as u64) << STREAM_SHIFT) | size
}

/// The part of a block's record that every allocation and free through a hot list touches: its state word
/// and, for a size class's block, its address.
#[derive(Debug, Default)]
#[repr(align(16))]
struct HotRecord {
    state: AtomicU64,
    addr: AtomicU64,
}

/// A table of [`HotRecord`]s, one per index, `1 << spacing` cells apart: 0 packs four to a cache line;
/// [`LINE_SPACING`] gives each a line of its own (the other cells of its line stay unused).
#[derive(Debug)]
struct HotTable {
    cells: Box<[HotRecord]>,
    spacing: u32,
}

/// The spacing (log2 of the cells apart) of [`HotTable`] records that gives each a cache line of its own.
const LINE_SPACING: u32 = (64 / std::mem::size_of::<HotRecord>()).ilog2();

impl HotTable {
    /// Records for `len` indices, `1 << spacing` cells apart; [`Error::HostOutOfMemory`] when the host has
    /// no room for them.
    fn new(len: usize, spacing: u32) -> Result<Self> {
        let cells = host_table("block state records", len.saturating_mul(1 << spacing), HotRecord::default)?;
        Ok(HotTable { cells, spacing })
    }

    /// The record of `index`, if the table has one.
    #[inline]
    fn get(&self, index: usize) -> Option<&HotRecord> {
        self.cells.get(index << self.spacing)
    }

    /// The indices the table holds.
    fn len(&self) -> usize {
        self.cells.len() >> self.spacing
    }

    /// Every record, by index.
    fn iter(&self) -> impl Iterator<Item = &HotRecord> {
        self.cells.iter().step_by(1 << self.spacing)
    }
}

/// The part of a block's record that only a free stack touches: the tag of the stream that freed it, and
/// its successor on the stack.
#[derive(Debug)]
#[repr(align(16))]
struct StackRecord {
    free_tag: AtomicU64,
    next: AtomicU64,
}

impl Default for StackRecord {
    fn default() -> Self {
        StackRecord { free_tag: AtomicU64::new(0), next: AtomicU64::new(u64::from(NONE)) }
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

/// The records of the indices past a set's first part that one added part holds.
#[derive(Debug)]
struct Part {
    hot: HotTable,
    stack: Box<[StackRecord]>,
}

/// The most parts a set adds past its first: each doubles the indices, so that a first part of one record
/// grows to every index a `u32` numbers.
const MOST_PARTS: usize = 32;

/// Per block, by index: its record, in two tables.
///
/// A set made for a fixed count ([`BlockStates::new`]) holds every record from the start. A growable one
/// ([`BlockStates::growable`]) starts with a first part of a power of two `F` of records and adds parts
/// as indices past them are needed ([`BlockStates::make_room`]): part `k` holds indices `F << k` to
/// `F << (k + 1)`, so the records double at each step, and a part once added stays (its records never move:
/// a reader holding an index of it needs no lock). An index in the first part costs what a fixed set's
/// does (one bounds check); one past it, a few instructions more to find its part.
#[derive(Debug)]
pub(crate) struct BlockStates {
    hot: HotTable,
    stack: Box<[StackRecord]>,
    /// log2 of the first part's length, for a growable set.
    first_bits: u32,
    /// Indices below this may have records; at most the first part's length for a fixed set.
    most: u32,
    /// The parts added past the first (none for a fixed set).
    parts: Box<[OnceLock<Part>]>,
    /// Held while a part is made, so that two threads needing it make it once.
    adding: Mutex<()>,
}

impl BlockStates {
    /// States for `count` free blocks, their state words packed four to a cache line;
    /// [`Error::HostOutOfMemory`] when the host has no room for them.
    pub(crate) fn new(count: u32) -> Result<Self> {
        Self::with_spacing(count, 0)
    }

    fn with_spacing(count: u32, spacing: u32) -> Result<Self> {
        let len = count as usize;
        Ok(BlockStates {
            hot: HotTable::new(len, spacing)?,
            stack: host_table("block stack records", len, StackRecord::default)?,
            first_bits: 0,
            most: count,
            parts: Box::default(),
            adding: Mutex::new(()),
        })
    }

    /// States for `initial` free blocks (rounded up to a power of two), which grow, as
    /// [`BlockStates::make_room`] asks, to at most `most`: where `spread`, each on a cache line of its own,
    /// else packed. [`Error::HostOutOfMemory`] when the host has no room for the first part.
    pub(crate) fn growable(initial: u32, most: u32, spread: bool) -> Result<Self> {
        let first = initial.max(1).min(most.max(1)).checked_next_power_of_two().unwrap_or(1 << 31);
        let mut states = BlockStates::with_spacing(first, if spread { LINE_SPACING } else { 0 })?;
        states.first_bits = first.ilog2();
        states.most = most.max(first);
        states.parts = (0..MOST_PARTS).map(|_| OnceLock::new()).collect();
        Ok(states)
    }

    /// The part past the first that holds `index`, and the index's place in it.
    #[inline]
    fn part_of(&self, index: u32) -> (usize, usize) {
        let part = (index >> self.first_bits).ilog2();
        (part as usize, (index - (1 << (self.first_bits + part))) as usize)
    }

    /// The records of block `index`: `None` where the set has none (past its most, or a part not added).
    #[inline]
    fn records(&self, index: u32) -> Option<(&HotRecord, &StackRecord)> {
        match self.hot.get(index as usize) {
            Some(hot) => Some((hot, &self.stack[index as usize])),
            None => self.grown_records(index),
        }
    }

    #[cold]
    fn grown_records(&self, index: u32) -> Option<(&HotRecord, &StackRecord)> {
        if index >= self.most {
            return None;
        }
        let (part, at) = self.part_of(index);
        let part = self.parts.get(part)?.get()?;
        Some((part.hot.get(at)?, &part.stack[at]))
    }

    /// The hot record of block `index`, which the set holds (an index it issued).
    #[inline]
    fn hot(&self, index: u32) -> &HotRecord {
        match self.hot.get(index as usize) {
            Some(hot) => hot,
            None => self.grown_records(index).expect("a block index with records").0,
        }
    }

    /// The stack record of block `index`, which the set holds.
    #[inline]
    fn stack(&self, index: u32) -> &StackRecord {
        match self.stack.get(index as usize) {
            Some(stack) => stack,
            None => self.grown_records(index).expect("a block index with records").1,
        }
    }

    /// Makes sure block `index` has records: adds the part that holds it where it is missing. `Ok(false)`
    /// for an index past the set's most; [`Error::HostOutOfMemory`] when the host has no room for the part.
    pub(crate) fn make_room(&self, index: u32) -> Result<bool> {
        if (index as usize) < self.hot.len() {
            return Ok(true);
        }
        if index >= self.most {
            return Ok(false);
        }
        let (part, _) = self.part_of(index);
        let Some(slot) = self.parts.get(part) else { return Ok(false) };
        if slot.get().is_some() {
            return Ok(true);
        }
        let _adding = self.adding.lock();
        if slot.get().is_none() {
            let start = 1u64 << (self.first_bits + part as u32);
            let len = ((start * 2).min(u64::from(self.most)) - start) as usize;
            let made = Part {
                hot: HotTable::new(len, self.hot.spacing)?,
                stack: host_table("block stack records", len, StackRecord::default)?,
            };
            let _ = slot.set(made);
        }
        Ok(true)
    }

    /// Whether each record takes a cache line of its own.
    #[cfg(test)]
    pub(crate) fn is_spread(&self) -> bool {
        self.hot.spacing == LINE_SPACING
    }

    /// The most blocks the set may hold records for.
    pub(crate) fn most(&self) -> u32 {
        self.most
    }

    /// The address recorded for block `index` (0 when none is, or the set has no such block).
    #[inline]
    pub(crate) fn addr(&self, index: u32) -> u64 {
        match self.hot.get(index as usize) {
            Some(hot) => hot.addr.load(Ordering::Acquire),
            None => self.grown_records(index).map_or(0, |(hot, _)| hot.addr.load(Ordering::Acquire)),
        }
    }

    /// Records the address of block `index`.
    pub(crate) fn set_addr(&self, index: u32, addr: u64) {
        self.hot(index).addr.store(addr, Ordering::Release);
    }

    /// Clears the address of block `index`.
    pub(crate) fn clear_addr(&self, index: u32) {
        self.hot(index).addr.store(0, Ordering::Release);
    }

    /// The tag of the stream that last freed block `index`.
    #[inline]
    pub(crate) fn free_tag(&self, index: u32) -> FreeTag {
        FreeTag::unpack_single(self.stack(index).free_tag.load(Ordering::Relaxed))
    }

    /// Marks block `index` live for a request of `size` bytes on the stream with `stream_index`.
    #[inline]
    pub(crate) fn mark_live(&self, index: u32, stream_index: usize, size: u64) {
        self.hot(index).state.store(live_state(stream_index, size), Ordering::Relaxed);
    }

    /// Marks a live block cached, carrying `tag`: `Ok(false)` (nothing changed) where the tag does not fit
    /// in the state word; fails if another thread freed it first.
    #[inline]
    pub(crate) fn release_cached(&self, block: LiveBlock, tag: FreeTag, addr: u64) -> Result<bool> {
        let Some(cached) = cached_state(tag) else { return Ok(false) };
        let slot = self.hot(block.index);
        if slot.state.compare_exchange(block.state, cached, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return Err(Error::NotLive { addr });
        }
        Ok(true)
    }

    /// Claims block `index` if it is cached: makes it live for a request of `size` bytes on the stream with
    /// `stream_index` and returns the tag it was freed with. `None` where it is not cached (a stale entry of
    /// a hot list: the block was claimed by another thread, and may be live or free elsewhere).
    #[inline]
    pub(crate) fn claim_cached(&self, index: u32, stream_index: usize, size: u64) -> Option<FreeTag> {
        self.leave_cache(index, live_state(stream_index, size))
    }

    /// Whether block `index` is cached (named in a hot list and not claimed).
    pub(crate) fn is_cached(&self, index: u32) -> bool {
        self.records(index).is_some_and(|(slot, _)| slot.state.load(Ordering::Relaxed) & (LIVE | CACHED) == CACHED)
    }

    /// Takes block `index` out of the cached state if it is cached, leaving it free (state 0); returns the
    /// tag it was freed with. `None` where it is not cached.
    pub(crate) fn uncache(&self, index: u32) -> Option<FreeTag> {
        self.leave_cache(index, 0)
    }

    /// Moves block `index` from the cached state to the state word `next` if it is cached; returns the tag
    /// it was freed with. `None` where it is not cached (or there is no such block).
    #[inline]
    fn leave_cache(&self, index: u32, next: u64) -> Option<FreeTag> {
        let (slot, _) = self.records(index)?;
        let mut state = slot.state.load(Ordering::Relaxed);
        while state & (LIVE | CACHED) == CACHED {
            match slot.state.compare_exchange_weak(state, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Some(cached_tag(state)),
                Err(current) => state = current,
            }
        }
        None
    }

    /// Makes block `index`, just popped from a free stack, live for a request of `size` bytes on the stream
    /// with `stream_index`; returns the tag it was freed with.
    #[inline]
    pub(crate) fn make_popped_live(&self, index: u32, stream_index: usize, size: u64) -> FreeTag {
        let tag = self.free_tag(index);
        self.mark_live(index, stream_index, size);
        tag
    }

    /// Marks a block that was made live but not handed out free again, with `tag`, for a stack.
    pub(crate) fn set_free(&self, index: u32, tag: FreeTag) {
        self.stack(index).free_tag.store(tag.pack_single(), Ordering::Relaxed);
        self.hot(index).state.store(0, Ordering::Release);
    }

    /// Block `index` (at `addr`, for the error) if it is live.
    #[inline]
    pub(crate) fn live(&self, index: u32, addr: u64) -> Result<LiveBlock> {
        let state = self.hot(index).state.load(Ordering::Relaxed);
        if state & LIVE == 0 {
            return Err(Error::NotLive { addr });
        }
        Ok(LiveBlock { index, state })
    }

    /// Marks a live block free with `tag`; fails if another thread freed it first.
    #[inline]
    pub(crate) fn release(&self, block: LiveBlock, tag: FreeTag, addr: u64) -> Result<()> {
        let slot = self.hot(block.index);
        if slot.state.compare_exchange(block.state, 0, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return Err(Error::NotLive { addr });
        }
        self.stack(block.index).free_tag.store(tag.pack_single(), Ordering::Relaxed);
        Ok(())
    }

    /// Every live block: `(index, requested size, stream index)`.
    pub(crate) fn live_blocks(&self) -> impl Iterator<Item = (u32, u64, usize)> + '_ {
        let first = self.hot.iter().enumerate().map(|(index, slot)| (index as u32, slot));
        let grown = self.parts.iter().enumerate().filter_map(|(k, part)| part.get().map(|part| (k, part))).flat_map(
            move |(k, part)| {
                let start = 1u32 << (self.first_bits + k as u32);
                part.hot.iter().enumerate().map(move |(at, slot)| (start + at as u32, slot))
            },
        );
        first.chain(grown).filter_map(|(index, slot)| {
            let state = slot.state.load(Ordering::Relaxed);
            (state & LIVE != 0).then(|| {
                let block = LiveBlock { index, state };
                (block.index, block.size(), block.stream_index())
            })
        })
    }
}

impl BlockLinks for BlockStates {
    #[inline]
    fn next(&self, index: u32) -> &AtomicU64 {
        &self.stack(index).next
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_cached_state_carries_its_tag_and_is_neither_live_nor_free() {
        for tag in [FreeTag::FRESH, FreeTag::freed(0, 1), FreeTag::freed(63, (1 << 55) - 1)] {
            let state = cached_state(tag).unwrap();
            assert_eq!(state & (LIVE | CACHED), CACHED);
            assert_eq!(cached_tag(state), tag);
        }
        assert_eq!(cached_state(FreeTag::freed(3, 1 << 55)), None, "a sequence number past 55 bits does not fit");
    }

    /// A packed set holds four state words to a cache line; a spread one, fixed or growable, gives each
    /// index's state word a line of its own, in its first part and in the parts it adds, and every index
    /// reads and writes its own record.
    #[test]
    fn a_spread_set_gives_each_state_word_a_line_of_its_own() {
        let line = |states: &BlockStates, index: u32| std::ptr::from_ref(states.hot(index)) as usize / 64;
        let apart = |states: &BlockStates, index: u32| {
            std::ptr::from_ref(states.hot(index + 1)) as usize - std::ptr::from_ref(states.hot(index)) as usize
        };
        for packed in [BlockStates::new(8).unwrap(), BlockStates::growable(4, 64, false).unwrap()] {
            assert!(packed.make_room(6).unwrap());
            assert_eq!(apart(&packed, 0), 16, "packed records four to a line");
            assert_eq!(apart(&packed, 5), 16, "in the parts added too");
        }
        let growable = BlockStates::growable(4, 64, true).unwrap();
        assert!(growable.make_room(40).unwrap());
        for states in [&BlockStates::with_spacing(8, LINE_SPACING).unwrap(), &growable] {
            let indices: Vec<u32> = (0..8).chain(32..40).filter(|&i| states.records(i).is_some()).collect();
            let mut lines: Vec<usize> = indices.iter().map(|&i| line(states, i)).collect();
            lines.sort_unstable();
            lines.dedup();
            assert_eq!(lines.len(), indices.len(), "one line per record");
            for &index in &indices {
                states.set_addr(index, 0x1000 * u64::from(index + 1));
                states.mark_live(index, 0, u64::from(index) + 1);
            }
            for &index in &indices {
                assert_eq!(states.addr(index), 0x1000 * u64::from(index + 1));
            }
            let mut live: Vec<(u32, u64)> = states.live_blocks().map(|(i, size, _)| (i, size)).collect();
            live.sort_unstable();
            assert_eq!(live, indices.iter().map(|&i| (i, u64::from(i) + 1)).collect::<Vec<_>>());
        }
    }

    /// A growable set holds the records of its first part from the start, adds a part for an index past
    /// them when asked, and has none past its most; live blocks of every part are listed.
    #[test]
    fn a_growable_set_adds_parts_up_to_its_most() {
        let states = BlockStates::growable(3, 40, false).unwrap();
        assert_eq!((states.hot.len(), states.most()), (4, 40), "a first part of 4");
        assert_eq!(states.addr(4), 0, "no record before its part is added");
        assert!(states.make_room(4).unwrap() && states.make_room(7).unwrap());
        assert!(states.parts[0].get().is_some_and(|part| part.hot.len() == 4));
        assert!(states.parts[1].get().is_none(), "indices 8 to 15 are not asked for yet");
        assert!(states.make_room(39).unwrap(), "the last index");
        assert_eq!(states.parts[3].get().map(|part| part.hot.len()), Some(8), "indices 32 to 39 only");
        assert!(states.parts[2].get().is_none(), "indices 16 to 31 are not asked for");
        assert!(!states.make_room(40).unwrap(), "past its most");
        assert!(states.make_room(12).unwrap());
        for (index, addr) in [(1, 0x100), (5, 0x500), (12, 0xc00), (39, 0x2700)] {
            states.set_addr(index, addr);
            states.mark_live(index, 1, u64::from(index) * 10);
            assert_eq!(states.addr(index), addr);
        }
        let mut live: Vec<(u32, u64, usize)> = states.live_blocks().collect();
        live.sort_unstable();
        assert_eq!(live, vec![(1, 10, 1), (5, 50, 1), (12, 120, 1), (39, 390, 1)]);
        let block = states.live(39, 0x2700).unwrap();
        states.release(block, FreeTag::freed(1, 4), 0x2700).unwrap();
        assert_eq!(states.free_tag(39), FreeTag::freed(1, 4));
        assert!(states.live(39, 0x2700).is_err());
        let fixed = BlockStates::new(3).unwrap();
        assert_eq!((fixed.most(), fixed.make_room(2).unwrap(), fixed.make_room(3).unwrap()), (3, true, false));
        assert_eq!(fixed.addr(3), 0);
    }

    #[test]
    fn a_cached_block_is_claimed_once() {
        let states = BlockStates::new(2).unwrap();
        states.mark_live(1, 2, 300);
        let live = states.live(1, 0x100).unwrap();
        assert!(states.release_cached(live, FreeTag::freed(2, 9), 0x100).unwrap());
        assert!(states.release_cached(live, FreeTag::freed(2, 9), 0x100).is_err(), "a second free fails");
        assert!(states.live(1, 0x100).is_err());
        assert_eq!(states.claim_cached(1, 0, 40), Some(FreeTag::freed(2, 9)));
        assert_eq!(states.claim_cached(1, 0, 40), None, "claimed already");
        assert_eq!(states.claim_cached(0, 0, 40), None, "never cached");
        assert_eq!(states.claim_cached(7, 0, 40), None, "no such block");
        assert_eq!(states.live(1, 0x100).unwrap().size(), 40);
        let tag = FreeTag::freed(2, 1 << 56);
        assert!(!states.release_cached(states.live(1, 0x100).unwrap(), tag, 0x100).unwrap(), "too wide: unchanged");
        assert!(states.live(1, 0x100).is_ok());
    }
}

/// Model checks of the state word's transitions under every interleaving loom explores
/// (`RUSTFLAGS="--cfg loom"`): whatever the order, a block is handed to exactly one claimant and freed by
/// exactly one free.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// A block whose free cached it with `tag`.
    fn cached_block(tag: FreeTag) -> Arc<BlockStates> {
        let states = Arc::new(BlockStates::new(1).unwrap());
        states.mark_live(0, 0, 100);
        let live = states.live(0, 0x100).unwrap();
        assert!(states.release_cached(live, tag, 0x100).unwrap());
        states
    }

    /// The owner's claim from its hot list against a drain taking the block back: one of them gets it.
    #[test]
    fn a_claim_and_a_drain_never_both_take_a_cached_block() {
        loom::model(|| {
            let tag = FreeTag::freed(1, 7);
            let states = cached_block(tag);
            let drainer = {
                let states = states.clone();
                thread::spawn(move || states.uncache(0))
            };
            let claimed = states.claim_cached(0, 0, 50);
            let drained = drainer.join().unwrap();
            assert!(claimed.is_some() != drained.is_some(), "claimed {claimed:?}, drained {drained:?}");
            assert_eq!(claimed.or(drained), Some(tag));
            assert_eq!(states.live(0, 0x100).is_ok(), claimed.is_some(), "live only if claimed");
        });
    }

    /// Two threads claiming the same cached block (an owner and a thief): one of them gets it.
    #[test]
    fn two_claims_never_both_take_a_cached_block() {
        loom::model(|| {
            let states = cached_block(FreeTag::freed(0, 3));
            let thief = {
                let states = states.clone();
                thread::spawn(move || states.claim_cached(0, 0, 60))
            };
            let mine = states.claim_cached(0, 0, 70);
            let theirs = thief.join().unwrap();
            assert!(mine.is_some() != theirs.is_some(), "both or neither claimed: {mine:?}, {theirs:?}");
            let size = states.live(0, 0x100).unwrap().size();
            assert_eq!(size, if mine.is_some() { 70 } else { 60 }, "the winner's request is recorded");
        });
    }

    /// The same live block freed by two threads at once (a double free): exactly one free succeeds,
    /// whether it caches the block or frees it to a stack.
    #[test]
    fn a_double_free_from_two_threads_succeeds_once() {
        loom::model(|| {
            let states = Arc::new(BlockStates::new(1).unwrap());
            states.mark_live(0, 0, 100);
            let live = states.live(0, 0x100).unwrap();
            let other = {
                let states = states.clone();
                thread::spawn(move || states.release(live, FreeTag::freed(0, 1), 0x100).is_ok())
            };
            let mine = states.release_cached(live, FreeTag::freed(0, 2), 0x100).is_ok();
            let theirs = other.join().unwrap();
            assert!(mine != theirs, "both or neither free succeeded: {mine}, {theirs}");
            assert!(states.live(0, 0x100).is_err(), "the block is no longer live");
            assert_eq!(states.is_cached(0), mine, "cached only by the caching free");
        });
    }
}
