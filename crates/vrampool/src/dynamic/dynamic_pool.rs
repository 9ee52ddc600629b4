//! The dynamically growing pool: the records of its blocks and the loop that places them. Where its memory
//! comes from, and the device work that gets it, is its [`Space`]'s.

use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use rustc_hash::FxHashMap;

use super::block_cache::BlockCache;
use super::config::DynamicConfig;
use super::growth_policy::GrowthPolicy;
use super::pool_device::PoolDevice;
use super::shard_set::ShardSet;
use super::space::{Backing, Space};
use crate::backend::Backend;
use crate::counters::{PoolStats, ReservedCounters, Stat, StatsCounters};
use crate::error::{Error, Result};
use crate::pool::{Allocation, Pool};
use crate::range_allocator::{Carved, NodeId, RangeAllocator};
use crate::report::{BlockReport, Listing, PoolReport, ReportLimit, SegmentReport};
use crate::request::Request;
use crate::stream::StreamId;
use crate::stream_order::{FreeTag, StreamOrder};
use crate::thread_slot::{self, ThreadSlot};
use crate::units::{MIB, MIN_BLOCK, round_up_to};

/// Segments are sized in multiples of this when the device has no virtual memory (what `cuMemAlloc`
/// rounds large allocations to), or of the device's [`Backend::segment_unit`] where that is larger.
pub const SEGMENT_UNIT: u64 = 2 * MIB;

/// A live allocation: its block in the range allocator, its stream, and how far the bytes asked for fall
/// short of the block (under 256: blocks are requests rounded up to 256 bytes). Eight bytes, so that an
/// entry of the live map takes 16 and never straddles two cache lines.
#[derive(Clone, Copy, Debug)]
struct LiveBlock {
    node: NodeId,
    stream_index: u8,
    rounding: u8,
}

impl LiveBlock {
    /// The bytes asked for, of a block of `span` bytes.
    fn size(self, span: u64) -> u64 {
        span - u64::from(self.rounding)
    }
}

/// Everything behind one shard's lock.
#[derive(Debug)]
struct DynamicState {
    ranges: RangeAllocator<FreeTag>,
    /// The addresses the blocks carved for the cache in front of the pool are placed at, apart from the
    /// pool's own blocks, where the space keeps them apart ([`Space::open`]); `None` where they share
    /// `ranges`.
    carve_ranges: Option<RangeAllocator<FreeTag>>,
    /// The live allocations, by address.
    live: FxHashMap<u64, LiveBlock>,
    /// The blocks carved for the cache in front of the pool ([`DynamicPool::allocate_for_cache`]), by
    /// address, freed only when the cache gives them back. Kept apart from `live`, which every request's
    /// allocation and free probes: a cache's blocks can outnumber the live requests many times, and every
    /// probe of a larger map is likelier to fetch a line from memory where the pool's tables have gone cold.
    carved: FxHashMap<u64, LiveBlock>,
    space: Space,
    /// Bytes a growth ahead of need is getting from the device right now, outside the lock.
    pending: u64,
}

/// The seed's growing pool, done right.
///
/// It reserves [`DynamicConfig::initial_size`] at construction and grows on demand by
/// [`DynamicConfig::growth_factor`] ([`GrowthPolicy`]), never past [`DynamicConfig::cap`]: at the cap it
/// trims wholly free memory and retries, then returns [`Error::OutOfMemory`]. Growth keeps every existing
/// byte. Inside its memory it sub-allocates with an O(1) two-level segregated-fit range allocator that
/// splits and coalesces neighbours, never across segments.
///
/// On a device with virtual memory it reserves one address range and maps chunks where blocks land, so it
/// grows in place: its reserved bytes are the mapped chunks. Before it asks the device for new physical
/// memory it moves chunks that sit idle under wholly free stretches to where they are needed, in batches
/// of contiguous chunks ([`DynamicConfig::reclaim_idle`]), after waiting for the device so that no
/// queued work still uses them. Moves are bounded by growth: once the chunks moved since the last growth
/// add up to one growth step, it grows instead, so a churn that keeps landing on unmapped addresses settles.
///
/// On virtual memory, threads that allocate at once, each finding the others holding the lock, spread
/// over up to [`DynamicConfig::shards`] shards, each a range of its own with its own lock: a thread
/// allocates in its shard, a block is freed in the one that holds it, and all of them share the one cap.
/// A shard's free memory serves only its own blocks until the pool trims it, which it does (every shard)
/// before refusing a request for lack of memory.
///
/// Operations take one shard's lock: O(1) plus, on virtual memory, one step per chunk the block touches.
#[derive(Debug)]
pub struct DynamicPool {
    config: DynamicConfig,
    /// The device, the counters of what the pool holds and asks, the stream order and the growth rule.
    device: PoolDevice,
    shards: ShardSet<DynamicState>,
    /// The granularity the pool maps at, `None` for segments ([`Space::granularity`]).
    granularity: Option<u64>,
    /// Live bytes and operations, counted per thread slot.
    tally: StatsCounters,
    cache: OnceLock<FrontCache>,
    /// The largest alignment the pool gives ([`DynamicPool::largest_alignment`]).
    largest_alignment: u64,
}

/// The cache in front of a pool ([`DynamicPool::set_block_cache`]), and when its blocks are taken back.
#[derive(Debug)]
struct FrontCache {
    blocks: Arc<dyn BlockCache>,
    /// Before every growth (true), or only when the cap or the device refuses one (false).
    drain_before_growth: bool,
    /// Whether the pool has taken blocks back from the cache (a refused growth, or a trim) since the cache
    /// was set.
    drained: AtomicBool,
}

impl DynamicPool {
    /// Makes the pool and its initial reservation on `backend`.
    pub fn new(backend: Arc<dyn Backend>, config: DynamicConfig) -> Result<Self> {
        Self::with_stream_order(backend, config, Arc::default())
    }

    /// [`DynamicPool::new`], ordering reuse across streams with `order`, which a cache in front of the pool
    /// shares ([`DynamicPool::set_block_cache`]).
    pub(crate) fn with_stream_order(
        backend: Arc<dyn Backend>,
        config: DynamicConfig,
        order: Arc<StreamOrder>,
    ) -> Result<Self> {
        let cap = config.validate(backend.capacity())?;
        let granularity = Space::granularity(&config, &*backend);
        let unit = granularity.unwrap_or_else(|| SEGMENT_UNIT.next_multiple_of(backend.segment_unit().max(1)));
        if granularity.is_some_and(|g| cap < g) {
            return Err(Error::invalid_config(
                "cap",
                cap,
                format!("is smaller than the device's {unit}-byte granularity"),
            ));
        }
        let initial = round_up_to(config.initial_size, unit).unwrap_or(u64::MAX).min(cap / unit * unit);
        let policy = GrowthPolicy { initial_size: initial, factor: config.growth_factor, cap, unit };
        let device = PoolDevice::new(backend, ReservedCounters::default(), order, policy);
        let mut ranges = RangeAllocator::default();
        let mut carve_ranges = None;
        let space = Space::open(&device, &config, granularity, initial, &mut ranges, &mut carve_ranges)?;
        let largest_alignment = largest_alignment(cap, space.address_space());
        // Segments take the device's addresses, which no shard can claim ahead: one shard.
        let (addresses, most) = match space.range() {
            Some((base, size)) => (base..base.saturating_add(size), config.shards),
            None => (0..u64::MAX, 1),
        };
        let first = DynamicState::new(ranges, carve_ranges, space);
        Ok(DynamicPool {
            shards: ShardSet::new(first, addresses, most),
            config,
            device,
            granularity,
            tally: StatsCounters::default(),
            cache: OnceLock::new(),
            largest_alignment,
        })
    }

    /// Opens a shard for a thread that contends for its own: a range of its own, nothing mapped; `None`
    /// where the device refuses the range (the thread then stays where it is).
    #[cold]
    fn open_shard(&self) -> Option<(DynamicState, std::ops::Range<u64>)> {
        let _growth = self.device.lock_growth();
        let (mut ranges, mut carve_ranges) = (RangeAllocator::default(), None);
        let space =
            Space::open(&self.device, &self.config, self.granularity, 0, &mut ranges, &mut carve_ranges).ok()?;
        let (base, size) = space.range()?;
        self.device.count_shard_opened();
        Some((DynamicState::new(ranges, carve_ranges, space), base..base.saturating_add(size)))
    }

    /// The shards open now: 1 until threads contending for the first open more.
    pub fn shards_open(&self) -> usize {
        self.shards.open_count()
    }

    /// Whether the pool has taken blocks back from the cache in front of it (because the cap or the device
    /// refused a growth, or on a trim).
    pub(crate) fn cache_drained(&self) -> bool {
        self.cache.get().is_some_and(|cache| cache.drained.load(Ordering::Relaxed))
    }

    /// Moves the calling thread to a shard no other thread has chosen, as contention would; returns it.
    #[cfg(test)]
    pub(crate) fn move_to_own_shard(&self) -> usize {
        self.shards.move_home(thread_slot::current().index, || self.open_shard())
    }

    /// Offers the pool's segments to `segments` and hands each live block to `block`, under the pool's
    /// lock: what its report lists.
    pub(crate) fn list(&self, segments: &mut Listing<SegmentReport>, mut block: impl FnMut(BlockReport)) {
        for lock in self.shards.locks() {
            let state = lock.lock();
            state.space.report().into_iter().for_each(|segment| segments.segment(segment));
            for (&addr, live) in &state.live {
                let span = state.ranges.span(live.node).1;
                block(BlockReport {
                    addr,
                    size: live.size(span),
                    block_size: span,
                    stream: self.device.order.stream_of(usize::from(live.stream_index)),
                    fallback: false,
                });
            }
        }
    }

    /// The largest alignment the pool gives: a larger one is [`Error::AlignmentTooLarge`]. The largest power
    /// of two that an empty pool always finds room for a block at: within its configured cap on segments,
    /// within the first half of its address range on virtual memory; at least 256 bytes.
    pub fn largest_alignment(&self) -> u64 {
        self.largest_alignment
    }

    /// The configuration the pool was made with.
    pub fn config(&self) -> &DynamicConfig {
        &self.config
    }

    /// The growth rule in force (the cap resolved against the device).
    pub fn growth_policy(&self) -> GrowthPolicy {
        self.device.policy()
    }

    /// Whether the pool grows in place in one virtual address range.
    pub fn uses_virtual_memory(&self) -> bool {
        self.shards.lock_of(0).lock().space.grows_in_place()
    }

    /// The error for a request refused for lack of memory, counted among the pool's out-of-memory answers.
    fn out_of_memory(&self, requested: u64) -> Error {
        self.device.counters.rare.ooms.fetch_add(1, Ordering::Relaxed);
        self.refusal(requested)
    }

    /// The error for a request refused for lack of memory, not counted yet: a shard's refusal, which the
    /// pool may still overturn by trimming the others.
    fn refusal(&self, requested: u64) -> Error {
        Error::OutOfMemory {
            requested,
            live: self.tally.allocated(),
            reserved: self.device.counters.reserved(),
            cap: self.device.policy().cap,
        }
    }

    /// Finds room for a request, growing (segments) or backing chunks (virtual memory) as needed. The
    /// blocks a cache in front of the pool holds are taken back (once) when the cap or the device refuses
    /// a growth, so that cached blocks never make a request fail, or before every growth where the cache
    /// asked for that ([`DynamicPool::set_block_cache`]), so that they never make the pool grow: all of
    /// them, or, with pages the space sizes itself, as many as the pool is short of, then more.
    ///
    /// The blocks the cache gives back that another shard holds go to `foreign`, freed there once this
    /// shard's lock is let go. A refusal is not counted among the pool's out-of-memory answers yet.
    ///
    /// Inlined into its caller: a place returned through memory was read back before the store of it had
    /// landed, a stall on every allocation.
    #[inline(always)]
    fn place(
        &self,
        shard: usize,
        state: &mut DynamicState,
        request: Request,
        for_cache: bool,
        foreign: &mut Vec<(u64, FreeTag)>,
    ) -> Result<Carved<FreeTag>> {
        let mut drained = false;
        // The bytes of blocks the cache is asked for next, where a backing found the pool short.
        let mut ask: Option<u64> = None;
        let mut trimmed = false;
        // Asked only when the pool would grow.
        let drain_first = || self.cache.get().is_some_and(|cache| cache.drain_before_growth);
        loop {
            // Asked only when the pool would grow: looking costs a pass over the cache.
            let cache_has_blocks = || !drained && self.cache.get().is_some_and(|cache| !cache.blocks.is_empty());
            let DynamicState { ranges, carve_ranges, space, pending, .. } = &mut *state;
            let ranges = allocator_for(ranges, carve_ranges, for_cache);
            if let Some(carved) = ranges.allocate(request.span, request.align) {
                let backing = space
                    .back(ranges, carved, request, *pending, &self.device, || drain_first() && cache_has_blocks())?;
                match backing {
                    Backing::Placed(carved) => return Ok(carved),
                    // Short of `bytes`: the cache gives back blocks holding as much, then twice as much as
                    // the last time, and so on, until the request is placed or the cache holds none.
                    Backing::DrainFirst(bytes) => {
                        let asked = ask.unwrap_or(bytes);
                        self.drain_cache(shard, state, asked, foreign);
                        ask = Some(asked.saturating_mul(2));
                        drained |= asked == u64::MAX;
                        continue;
                    }
                    // Refused by the cap or the device: the cache's blocks come back before the pool gives up.
                    Backing::Refused if !cache_has_blocks() => return Err(self.refusal(request.size)),
                    Backing::Refused => {
                        self.drain_cache(shard, state, u64::MAX, foreign);
                        drained = true;
                        continue;
                    }
                }
            }
            let fixed_addresses = state.space.grows_in_place();
            if (drain_first() || fixed_addresses) && cache_has_blocks() {
                self.drain_cache(shard, state, u64::MAX, foreign);
                drained = true;
                continue;
            }
            // The address range is twice the cap: running out of it means fragmentation beyond repair.
            if fixed_addresses {
                return Err(self.refusal(request.size));
            }
            let need = request.span.checked_add(request.align - MIN_BLOCK).ok_or_else(|| self.refusal(request.size))?;
            let DynamicState { ranges, space, pending, .. } = &mut *state;
            if space.grow(ranges, need, *pending, &self.device)? {
                return ranges.allocate(request.span, request.align).ok_or_else(|| self.refusal(request.size));
            }
            // Refused by the cap or the device: first the cache's blocks come back (the request may fit among
            // them), then wholly free segments go back to the device, and the growth is tried again.
            if cache_has_blocks() {
                self.drain_cache(shard, state, u64::MAX, foreign);
                drained = true;
                continue;
            }
            if !trimmed && self.trim_locked(shard, state, foreign)? > 0 {
                trimmed = true;
                continue;
            }
            return Err(self.refusal(request.size));
        }
    }

    /// Frees blocks the cache in front of the pool holds, holding at least `bytes` (every one for
    /// `u64::MAX`), with shard `shard`'s lock held: those of that shard now, the others' into `foreign`.
    fn drain_cache(&self, shard: usize, state: &mut DynamicState, bytes: u64, foreign: &mut Vec<(u64, FreeTag)>) {
        let Some(cache) = self.cache.get() else { return };
        if !cache.drained.load(Ordering::Relaxed) {
            cache.drained.store(true, Ordering::Relaxed);
        }
        let slot = thread_slot::current();
        for (addr, tag) in cache.blocks.drain(bytes) {
            if self.shards.owner_of(addr) != shard {
                foreign.push((addr, tag));
                continue;
            }
            let freed = self.free_carved_locked(state, addr, tag, slot);
            debug_assert!(freed.is_ok(), "a cached block is a block carved for the cache: {freed:?}");
        }
    }

    /// Frees, each in its shard, blocks carved for the cache that the cache gave back to another shard
    /// ([`DynamicPool::drain_cache`]). Called with no shard's lock held.
    #[cold]
    #[inline(never)]
    fn free_foreign(&self, foreign: &mut Vec<(u64, FreeTag)>) {
        let slot = thread_slot::current();
        for (addr, tag) in foreign.drain(..) {
            let mut state = self.shards.lock_of(self.shards.owner_of(addr)).lock();
            let freed = self.free_carved_locked(&mut state, addr, tag, slot);
            debug_assert!(freed.is_ok(), "a cached block is a block carved for the cache: {freed:?}");
        }
    }

    /// Gives wholly free memory back, with shard `shard`'s lock held (the cache in front gives its blocks
    /// back first; those of other shards go to `foreign`).
    fn trim_locked(&self, shard: usize, state: &mut DynamicState, foreign: &mut Vec<(u64, FreeTag)>) -> Result<u64> {
        self.drain_cache(shard, state, u64::MAX, foreign);
        let DynamicState { ranges, space, .. } = state;
        let released = space.trim(ranges, &self.device)?;
        self.device.counters.rare.trimmed_bytes.fetch_add(released, Ordering::Relaxed);
        Ok(released)
    }

    /// Gives every shard's wholly free memory back, one shard at a time, with no shard's lock held on
    /// entry; returns the bytes given back.
    fn trim_all(&self) -> Result<u64> {
        let mut foreign = Vec::new();
        let mut released = 0;
        // Cached blocks of shards trimmed before the cache was drained are freed after the pass, and the
        // shards trimmed once more.
        for _pass in 0..2 {
            for (shard, lock) in self.shards.locks().enumerate() {
                released += self.trim_locked(shard, &mut lock.lock(), &mut foreign)?;
            }
            if foreign.is_empty() {
                break;
            }
            self.free_foreign(&mut foreign);
        }
        Ok(released)
    }

    /// Puts a cache in front of the pool (once) whose blocks the pool takes back when the cap or the device
    /// refuses a growth, and also before every growth where `drain_before_growth`.
    pub(crate) fn set_block_cache(&self, cache: Arc<dyn BlockCache>, drain_before_growth: bool) {
        let _ = self.cache.set(FrontCache { blocks: cache, drain_before_growth, drained: AtomicBool::new(false) });
    }

    /// Grows the pool by one step of its growth policy ahead of need ([`GrowthPolicy::step_ahead`]), without
    /// holding the pool's lock while the device works, so allocations go on meanwhile. Returns the bytes
    /// added (0 at the cap).
    ///
    /// It grows the first shard, counting what every shard holds and adds against the cap.
    pub fn grow_ahead(&self) -> Result<u64> {
        let lock = self.shards.lock_of(0);
        let mut state = lock.lock();
        let growth = self.device.lock_growth();
        let own = state.space.reserved_bytes() + state.pending;
        let reserved = own + self.device.held_elsewhere(own);
        let Some(bytes) = self.device.policy().step_ahead(reserved) else { return Ok(0) };
        let DynamicState { ranges, space, .. } = &mut *state;
        let Some(mut ahead) = space.plan_ahead(ranges, bytes) else { return Ok(0) };
        let pending = ahead.pending_bytes();
        state.pending += pending;
        self.device.count_pending(pending, true);
        drop(growth);
        drop(state);
        ahead.make(&self.device);
        let mut state = lock.lock();
        let DynamicState { ranges, space, .. } = &mut *state;
        let added = space.finish_ahead(ranges, ahead, &self.device);
        state.pending -= pending;
        self.device.count_pending(pending, false);
        added
    }

    /// Carves a block of `size` bytes for the cache in front of the pool ([`DynamicPool::set_block_cache`]):
    /// an allocation like any other, but held apart from the live allocations, and freed only when the
    /// cache gives it back ([`BlockCache::drain`]); [`Pool::free`] does not know its address.
    pub(crate) fn allocate_for_cache(&self, size: u64, alignment: u64, stream: StreamId) -> Result<Allocation> {
        self.allocate_into(size, alignment, stream, true)
    }

    /// Allocates `size` bytes at `alignment` on `stream`, recorded among the blocks carved for the cache
    /// where `for_cache`, else among the live allocations.
    fn allocate_into(&self, size: u64, alignment: u64, stream: StreamId, for_cache: bool) -> Result<Allocation> {
        let request = Request::new(size, alignment)?;
        if request.align > self.largest_alignment {
            return Err(Error::AlignmentTooLarge { alignment: request.align, max: self.largest_alignment });
        }
        if request.span > self.device.policy().cap {
            return Err(self.out_of_memory(size));
        }
        let stream_index = self.device.order.index_of(stream);
        let slot = thread_slot::current();
        let mut foreign = Vec::new();
        let (shard, mut state) = self.shards.lock_home(slot.index, || self.open_shard());
        let carved = match self.place(shard, &mut state, request, for_cache, &mut foreign) {
            Ok(carved) => carved,
            Err(err) => {
                drop(state);
                return self.after_refusal(err, shard, (request, size, stream, stream_index, for_cache), &mut foreign);
            }
        };
        // [`DynamicPool::record`] spelled out: through it, the allocation was returned through memory and
        // read back before the store of it had landed, a stall on every allocation (docs/BENCHMARKS.md).
        let order = &self.device.order;
        if let Err(err) = order.order_reuse(&*self.device.backend, carved.tag, stream_index) {
            let DynamicState { ranges, carve_ranges, space, .. } = &mut *state;
            space.unplace(allocator_for(ranges, carve_ranges, for_cache), carved);
            drop(state);
            self.free_foreign(&mut foreign);
            return Err(err);
        }
        self.insert(&mut state, carved, size, stream_index, for_cache);
        drop(state);
        if !foreign.is_empty() {
            self.free_foreign(&mut foreign);
        }
        self.tally.on_allocate(slot, size);
        Ok(Allocation { addr: carved.offset, size, stream })
    }

    /// What follows shard `shard`'s refusal, `err`, of a request (`asked`: the request, its size, stream,
    /// stream index and whether it is for the cache), with no lock held: blocks the cache gave back to
    /// other shards (`foreign`) are freed there; where other shards are open and the refusal was for lack
    /// of memory, every shard's free memory is given back and the request placed once more. A refusal for
    /// lack of memory that stands is counted among the pool's out-of-memory answers.
    #[cold]
    #[inline(never)]
    fn after_refusal(
        &self,
        err: Error,
        shard: usize,
        asked: (Request, u64, StreamId, usize, bool),
        foreign: &mut Vec<(u64, FreeTag)>,
    ) -> Result<Allocation> {
        let (request, size, stream, stream_index, for_cache) = asked;
        self.free_foreign(foreign);
        if !err.is_out_of_memory() {
            return Err(err);
        }
        if self.shards.open_count() == 1 {
            return Err(self.out_of_memory(size));
        }
        self.trim_all()?;
        let mut state = self.shards.lock_of(shard).lock();
        let allocation = self
            .place(shard, &mut state, request, for_cache, foreign)
            .and_then(|carved| self.record(&mut state, carved, size, stream, stream_index, for_cache));
        drop(state);
        self.free_foreign(foreign);
        match allocation {
            Ok(allocation) => {
                self.tally.on_allocate(thread_slot::current(), size);
                Ok(allocation)
            }
            Err(err) if err.is_out_of_memory() => Err(self.out_of_memory(size)),
            Err(err) => Err(err),
        }
    }

    /// Orders the reuse of the block placed at `carved` on the stream with `stream_index` and records it
    /// as a live allocation of `size` bytes (or a block carved for the cache), with its shard's lock held;
    /// where the reuse cannot be ordered, the block is given back.
    fn record(
        &self,
        state: &mut DynamicState,
        carved: Carved<FreeTag>,
        size: u64,
        stream: StreamId,
        stream_index: usize,
        for_cache: bool,
    ) -> Result<Allocation> {
        if let Err(err) = self.device.order.order_reuse(&*self.device.backend, carved.tag, stream_index) {
            let DynamicState { ranges, carve_ranges, space, .. } = state;
            space.unplace(allocator_for(ranges, carve_ranges, for_cache), carved);
            return Err(err);
        }
        self.insert(state, carved, size, stream_index, for_cache);
        Ok(Allocation { addr: carved.offset, size, stream })
    }

    /// Records the block placed at `carved` as a live allocation of `size` bytes on the stream with
    /// `stream_index` (or a block carved for the cache), with its shard's lock held.
    #[inline]
    fn insert(
        &self,
        state: &mut DynamicState,
        carved: Carved<FreeTag>,
        size: u64,
        stream_index: usize,
        for_cache: bool,
    ) {
        // The block is the request rounded up to 256 bytes: what it adds fits a byte.
        let rounding = (carved.size - size) as u8;
        debug_assert_eq!(u64::from(rounding), carved.size - size);
        let block = LiveBlock { node: carved.node, stream_index: stream_index as u8, rounding };
        let map = if for_cache { &mut state.carved } else { &mut state.live };
        map.insert(carved.offset, block);
    }

    /// Frees the allocation at `addr`; returns the bytes it had requested.
    pub(crate) fn free_sized(&self, addr: u64) -> Result<u64> {
        let slot = thread_slot::current();
        let mut state = self.shards.lock_for_free(self.shards.owner_of(addr));
        self.free_locked(&mut state, addr, slot)
    }

    /// Frees the allocation at `addr` with its shard's lock held, its memory tagged by its stream now.
    fn free_locked(&self, state: &mut DynamicState, addr: u64, slot: ThreadSlot) -> Result<u64> {
        // One lookup: the entry is removed only once the free can no longer fail.
        let entry = match state.live.entry(addr) {
            Entry::Occupied(entry) => entry,
            Entry::Vacant(_) => return Err(self.bad_free(state, addr)),
        };
        let block = *entry.get();
        let tag = self.device.order.tag_free(usize::from(block.stream_index));
        entry.remove();
        shrink_if_sparse(&mut state.live);
        Ok(self.release_block(state, block, tag, false, slot))
    }

    /// Frees the block carved for the cache at `addr`, which the cache gave back with `tag`, with the lock
    /// held.
    fn free_carved_locked(&self, state: &mut DynamicState, addr: u64, tag: FreeTag, slot: ThreadSlot) -> Result<u64> {
        let Some(block) = state.carved.remove(&addr) else { return Err(self.bad_free(state, addr)) };
        Ok(self.release_block(state, block, tag, true, slot))
    }

    /// Gives the memory of `block`, no longer in either map, back to its range allocator (the cache's where
    /// `carved` for the cache), tagged `tag`; returns the bytes it had been requested for.
    fn release_block(
        &self,
        state: &mut DynamicState,
        block: LiveBlock,
        tag: FreeTag,
        carved: bool,
        slot: ThreadSlot,
    ) -> u64 {
        let DynamicState { ranges, carve_ranges, space, .. } = state;
        let ranges = allocator_for(ranges, carve_ranges, carved);
        let (offset, span) = ranges.span(block.node);
        let size = block.size(span);
        ranges.free(block.node, tag);
        space.release_span(offset, span, &self.device);
        self.tally.on_free(slot, size);
        size
    }

    /// The error for a free of an address that starts no live block.
    #[cold]
    fn bad_free(&self, state: &DynamicState, addr: u64) -> Error {
        if state.carved.contains_key(&addr) {
            // A block the cache in front holds: not a live allocation of the pool.
            return Error::NotLive { addr };
        }
        let containing = |ranges: &RangeAllocator<FreeTag>| ranges.used_block_containing(addr);
        if let Some((block, _)) = containing(&state.ranges).or_else(|| state.carve_ranges.as_ref().and_then(containing))
        {
            return Error::InteriorAddress { addr, block };
        }
        if state.space.contains(addr) { Error::NotLive { addr } } else { Error::ForeignAddress { addr } }
    }
}

/// The range allocator of the pool's own blocks, or of the blocks carved for its cache where
/// `for_cache` and the space keeps those apart.
fn allocator_for<'a>(
    ranges: &'a mut RangeAllocator<FreeTag>,
    carve_ranges: &'a mut Option<RangeAllocator<FreeTag>>,
    for_cache: bool,
) -> &'a mut RangeAllocator<FreeTag> {
    match carve_ranges {
        Some(carves) if for_cache => carves,
        _ => ranges,
    }
}

impl DynamicState {
    /// A shard's state: its space, with `ranges` (and `carve_ranges`) over its addresses, nothing live.
    fn new(ranges: RangeAllocator<FreeTag>, carve_ranges: Option<RangeAllocator<FreeTag>>, space: Space) -> Self {
        DynamicState {
            ranges,
            carve_ranges,
            live: FxHashMap::default(),
            carved: FxHashMap::default(),
            space,
            pending: 0,
        }
    }
}

/// Shrinks `map` when it holds less than an eighth of what it has room for, to twice what it holds, so that
/// a burst of allocations (the hybrid's warm-up sends every request to its region) does not leave the map
/// spread over many more cache lines than its entries need: each probe of a sparse table is a line of its
/// own, fetched from memory where the pool's tables have gone cold. A shrink moves every entry once, after
/// at least seven eighths of the entries it had room for were removed: amortised O(1) per free.
fn shrink_if_sparse<V>(map: &mut FxHashMap<u64, V>) {
    const SMALLEST: usize = 64;
    if map.capacity() > SMALLEST && map.len() < map.capacity() / 8 {
        map.shrink_to((map.len() * 2).max(SMALLEST));
    }
}

impl Pool for DynamicPool {
    fn strategy(&self) -> &'static str {
        "dynamic"
    }

    fn backend(&self) -> &Arc<dyn Backend> {
        &self.device.backend
    }

    fn allocate(&self, size: u64, alignment: u64, stream: StreamId) -> Result<Allocation> {
        self.allocate_into(size, alignment, stream, false)
    }

    fn free(&self, addr: u64) -> Result<()> {
        self.free_sized(addr).map(|_| ())
    }

    fn set_limit(&self, bytes: Option<u64>) -> Result<u64> {
        let Some(bytes) = bytes else {
            self.device.set_limit(None);
            return Ok(self.device.configured.cap);
        };
        let room = self.shards.lock_of(0).lock().space.address_space().unwrap_or(u64::MAX);
        let limit = bytes.min(room).min(self.device.backend.capacity());
        self.device.set_limit(Some(limit));
        Ok(limit)
    }

    fn reset_peaks(&self) {
        let _shards: Vec<_> = self.shards.locks().map(|lock| lock.lock()).collect();
        self.tally.reset_peak();
        self.device.counters.reset_peak();
    }

    fn stats(&self) -> PoolStats {
        let tally = self.tally.read();
        let (counters, order) = (&self.device.counters, &self.device.order.counters);
        let rare = &counters.rare;
        PoolStats {
            allocated_bytes: Stat { current: tally.allocated, peak: tally.allocated_peak },
            reserved_bytes: Stat { current: counters.reserved(), peak: counters.reserved_peak() },
            active_allocations: tally.allocations - tally.frees,
            allocations: tally.allocations,
            frees: tally.frees,
            fallbacks: 0,
            fallback_reasons: Default::default(),
            ooms: rare.ooms.load(Ordering::Relaxed),
            growths: rare.growths.load(Ordering::Relaxed),
            pre_expansions: rare.pre_expansions.load(Ordering::Relaxed),
            backend_calls: rare.backend_calls.load(Ordering::Relaxed),
            chunks_moved: rare.chunks_moved.load(Ordering::Relaxed),
            chunks_aliased: rare.chunks_aliased.load(Ordering::Relaxed),
            trimmed_bytes: rare.trimmed_bytes.load(Ordering::Relaxed),
            events_recorded: order.events_recorded.load(Ordering::Relaxed),
            stream_waits: order.stream_waits.load(Ordering::Relaxed),
            synchronizations: order.synchronizations.load(Ordering::Relaxed),
            event_waits: order.event_waits.load(Ordering::Relaxed),
            device_time_ns: rare.device_time_ns.load(Ordering::Relaxed),
            wait_time_ns: rare.wait_time_ns.load(Ordering::Relaxed),
        }
    }

    fn report_within(&self, limit: ReportLimit) -> PoolReport {
        let mut segments = Listing::new(limit.segments);
        let mut blocks = Listing::new(limit.blocks);
        self.list(&mut segments, |block| blocks.block(block));
        PoolReport::listed(self, segments, blocks)
    }

    fn trim(&self) -> Result<u64> {
        self.trim_all()
    }
}

/// The largest alignment a pool capped at `cap` bytes gives ([`DynamicPool::largest_alignment`]), on a
/// virtual range of `range` bytes where it has one. A block at alignment `a` fits in `a` bytes of padding
/// and its own span: a segment of that size fits under the cap where `a` does, and a range has an address
/// aligned to `a` in its first `a` bytes, below its middle where `a` is at most half the range.
fn largest_alignment(cap: u64, range: Option<u64>) -> u64 {
    let room = range.map_or(cap, |range| range / 2);
    room.checked_ilog2().map_or(0, |log| 1 << log).max(MIN_BLOCK)
}

impl Drop for DynamicPool {
    fn drop(&mut self) {
        let backend = &*self.device.backend;
        self.device.order.release_all(backend);
        for lock in self.shards.locks_mut() {
            lock.get_mut().space.release(backend);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use proptest::prelude::*;

    use super::*;
    use crate::backend::{SimDevice, SimDeviceConfig};
    use crate::dynamic::Cap;

    /// A thread of its own (a thread slot of its own) that runs what it is given, in turn with the test.
    struct Worker {
        work: Option<mpsc::Sender<Box<dyn FnOnce() + Send>>>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl Worker {
        fn new() -> Self {
            let (work, jobs) = mpsc::channel::<Box<dyn FnOnce() + Send>>();
            let thread = std::thread::spawn(move || jobs.into_iter().for_each(|job| job()));
            Worker { work: Some(work), thread: Some(thread) }
        }

        /// Runs `job` on the worker's thread and returns what it returns.
        fn run<T: Send + 'static>(&self, job: impl FnOnce() -> T + Send + 'static) -> T {
            let (sender, result) = mpsc::channel();
            let job = Box::new(move || sender.send(job()).unwrap());
            self.work.as_ref().unwrap().send(job).unwrap();
            result.recv().expect("the worker ran the job")
        }
    }

    impl Drop for Worker {
        fn drop(&mut self) {
            drop(self.work.take());
            let _ = self.thread.take().map(std::thread::JoinHandle::join);
        }
    }

    /// A dynamic pool capped at `cap` on a simulated device mapping 2 MiB pages, nothing reserved first.
    fn capped_pool(cap: u64) -> Arc<DynamicPool> {
        let device = SimDevice::new(SimDeviceConfig::default().granularity(Some(2 * MIB)));
        let config = DynamicConfig::default().initial_size(0).cap(Cap::Bytes(cap));
        Arc::new(DynamicPool::new(Arc::new(device), config).unwrap())
    }

    /// Moves the calling thread to a shard no other thread has chosen, as contention would; returns it.
    fn move_to_own_shard(pool: &DynamicPool) -> usize {
        pool.move_to_own_shard()
    }

    #[test]
    fn a_shard_short_of_room_under_the_cap_gets_what_another_holds_idle() {
        let pool = capped_pool(64 * MIB);
        let a = pool.allocate(48 * MIB, 256, StreamId::DEFAULT).unwrap();
        pool.free(a.addr).unwrap();
        assert_eq!(pool.stats().reserved_bytes.current, 48 * MIB, "the first shard keeps its memory mapped");
        let worker = Worker::new();
        let moved = pool.clone();
        let b = worker.run(move || {
            assert_eq!(move_to_own_shard(&moved), 1);
            moved.allocate(48 * MIB, 256, StreamId::DEFAULT)
        });
        let b = b.expect("the other shard's idle memory is given back for it");
        assert_eq!(pool.shards_open(), 2);
        assert_eq!(pool.shards.owner_of(b.addr), 1, "the block is the second shard's");
        let stats = pool.stats();
        assert_eq!(stats.ooms, 0, "{stats:?}");
        assert!(stats.reserved_bytes.peak <= 64 * MIB, "{stats:?}");
        assert_eq!(stats.reserved_bytes.current, 48 * MIB);
        // Freed by a thread of the first shard, in the second.
        pool.free(b.addr).unwrap();
        assert_eq!(pool.free(b.addr), Err(Error::NotLive { addr: b.addr }));
        assert_eq!(pool.stats().allocated_bytes.current, 0);
        pool.trim().unwrap();
        assert_eq!(pool.stats().reserved_bytes.current, 0, "every shard trimmed");
    }

    #[test]
    fn shards_growing_at_once_stay_under_the_one_cap() {
        let cap = 96 * MIB;
        let pool = capped_pool(cap);
        let workers: Vec<Worker> = (0..6).map(|_| Worker::new()).collect();
        for worker in &workers {
            let pool = pool.clone();
            worker.run(move || move_to_own_shard(&pool));
        }
        assert_eq!(pool.shards_open(), 7);
        let barrier = Arc::new(std::sync::Barrier::new(workers.len()));
        let (sender, served) = mpsc::channel();
        for worker in &workers {
            let (pool, barrier, sender) = (pool.clone(), barrier.clone(), sender.clone());
            // Queued, not awaited: the workers allocate at once.
            worker
                .work
                .as_ref()
                .unwrap()
                .send(Box::new(move || {
                    barrier.wait();
                    let mut blocks = Vec::new();
                    while let Ok(block) = pool.allocate(3 * MIB + 100, 256, StreamId::DEFAULT) {
                        blocks.push(block.addr);
                    }
                    sender.send(blocks).unwrap();
                }))
                .unwrap();
        }
        drop(sender);
        let blocks: Vec<u64> = served.iter().flatten().collect();
        let stats = pool.stats();
        assert!(stats.reserved_bytes.peak <= cap, "{stats:?}");
        // Each 3 MiB block takes two 2 MiB pages of its own or shares one: at least 16 of them fit.
        assert!(blocks.len() >= 16, "{} blocks under a cap of 96 MiB: {stats:?}", blocks.len());
        for addr in blocks {
            pool.free(addr).unwrap();
        }
        pool.trim().unwrap();
        assert_eq!(pool.stats().reserved_bytes.current, 0);
    }

    #[derive(Clone, Debug)]
    enum ShardOp {
        Alloc { thread: usize, size: u64 },
        Free { thread: usize, which: usize },
        DoubleFree { thread: usize, which: usize },
        Trim,
    }

    fn shard_op() -> impl Strategy<Value = ShardOp> {
        let size = prop_oneof![1u64..4096, 4096u64..(1 << 20), (1u64 << 20)..(12 << 20)];
        prop_oneof![
            6 => (0usize..3, size).prop_map(|(thread, size)| ShardOp::Alloc { thread, size }),
            5 => (0usize..3, any::<usize>()).prop_map(|(thread, which)| ShardOp::Free { thread, which }),
            1 => (0usize..3, any::<usize>()).prop_map(|(thread, which)| ShardOp::DoubleFree { thread, which }),
            1 => Just(ShardOp::Trim),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Three threads, each in a shard of its own, allocating and freeing one another's blocks in turn,
        /// checked against a shadow of the live blocks after every step: no two overlap, the counts are
        /// the shadow's, the cap holds across shards, a refusal means the memory really is short, a bad
        /// free changes nothing, and every shard gives all its memory back at the end.
        #[test]
        fn three_shards_match_a_shadow_of_their_blocks(ops in proptest::collection::vec(shard_op(), 1..120)) {
            let cap = 64 * MIB;
            let granularity = 2 * MIB;
            let pool = capped_pool(cap);
            let workers: Vec<Worker> = (0..3).map(|_| Worker::new()).collect();
            for worker in &workers[1..] {
                let pool = pool.clone();
                worker.run(move || move_to_own_shard(&pool));
            }
            let mut live: Vec<(u64, u64)> = Vec::new();
            let mut freed: Vec<u64> = Vec::new();
            for op in &ops {
                let before = pool.stats();
                match *op {
                    ShardOp::Alloc { thread, size } => {
                        let p = pool.clone();
                        match workers[thread].run(move || p.allocate(size, 256, StreamId::DEFAULT)) {
                            Ok(a) => {
                                prop_assert_eq!(a.addr % 256, 0);
                                for &(addr, len) in &live {
                                    prop_assert!(a.addr + size <= addr || addr + len <= a.addr, "{:?} overlaps {:#x}+{}", a, addr, len);
                                }
                                live.push((a.addr, size));
                            }
                            Err(Error::OutOfMemory { .. }) => {
                                let held: u64 = live.iter().map(|&(_, len)| len.next_multiple_of(granularity) + granularity).sum();
                                prop_assert!(held + size > cap, "refused {} with {} live in {} blocks", size, live.len(), held);
                            }
                            Err(err) => prop_assert!(false, "{}", err),
                        }
                    }
                    ShardOp::Free { thread, which } if !live.is_empty() => {
                        let (addr, _) = live.swap_remove(which % live.len());
                        let p = pool.clone();
                        prop_assert_eq!(workers[thread].run(move || p.free(addr)), Ok(()));
                        freed.push(addr);
                    }
                    ShardOp::DoubleFree { thread, which } if !freed.is_empty() => {
                        let addr = freed[which % freed.len()];
                        if live.iter().all(|&(a, _)| a != addr) {
                            let p = pool.clone();
                            prop_assert!(workers[thread].run(move || p.free(addr)).is_err());
                            prop_assert_eq!(pool.stats(), before, "a bad free changed the pool");
                        }
                    }
                    ShardOp::Trim => {
                        pool.trim().unwrap();
                    }
                    _ => {}
                }
                let stats = pool.stats();
                prop_assert!(stats.reserved_bytes.current <= cap, "{:?}", stats);
                prop_assert_eq!(stats.allocated_bytes.current, live.iter().map(|&(_, len)| len).sum::<u64>());
                prop_assert_eq!(stats.active_allocations, live.len() as u64);
            }
            for (addr, _) in live {
                pool.free(addr).unwrap();
            }
            pool.trim().unwrap();
            prop_assert_eq!(pool.stats().reserved_bytes.current, 0);
            prop_assert_eq!(pool.report().blocks.len(), 0);
        }
    }

    #[test]
    fn the_largest_alignment_is_a_power_of_two_the_cap_or_half_the_range_holds() {
        assert_eq!(largest_alignment(0, None), MIN_BLOCK);
        assert_eq!(largest_alignment(1, None), MIN_BLOCK);
        assert_eq!(largest_alignment(1, Some(1)), MIN_BLOCK);
        assert_eq!(largest_alignment(100 * MIB, None), 64 * MIB);
        assert_eq!(largest_alignment(100 * MIB, Some(200 * MIB)), 64 * MIB);
        assert_eq!(largest_alignment(100 * MIB, Some(100 * MIB)), 32 * MIB);
        assert_eq!(largest_alignment(1 << 63, None), 1 << 63);
        assert_eq!(largest_alignment(u64::MAX, None), 1 << 63);
        assert_eq!(largest_alignment(u64::MAX, Some(u64::MAX)), 1 << 62);
    }

    #[test]
    fn a_sparse_map_shrinks_and_keeps_its_entries() {
        let mut map: FxHashMap<u64, u64> = (0..4096).map(|k| (k << 8, k)).collect();
        let roomy = map.capacity();
        for k in 100..4096 {
            map.remove(&(k << 8));
            shrink_if_sparse(&mut map);
        }
        assert!(map.capacity() < roomy / 8, "{} of {roomy}", map.capacity());
        assert_eq!(map.len(), 100);
        assert!((0..100).all(|k| map[&(k << 8)] == k));
        let mut small: FxHashMap<u64, u64> = (0..8).map(|k| (k, k)).collect();
        small.remove(&0);
        let room = small.capacity();
        shrink_if_sparse(&mut small);
        assert_eq!(small.capacity(), room, "a map this small is left as it is");
    }
}
