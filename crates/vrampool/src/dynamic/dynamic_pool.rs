//! The dynamically growing pool: the records of its blocks and the loop that places them. Where its memory
//! comes from, and the device work that gets it, is its [`Space`]'s.

use std::collections::hash_map::Entry;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use rustc_hash::FxHashMap;

use super::block_cache::BlockCache;
use super::config::DynamicConfig;
use super::growth_policy::GrowthPolicy;
use super::pool_device::PoolDevice;
use super::space::{Backing, Space};
use crate::backend::Backend;
use crate::counters::{LiveTally, PoolStats, ReservedCounters, Stat};
use crate::error::{Error, Result};
use crate::pool::{Allocation, Pool};
use crate::range_allocator::{Carved, NodeId, RangeAllocator};
use crate::report::{BlockReport, Listing, PoolReport, ReportLimit, SegmentReport};
use crate::request::Request;
use crate::stream::StreamId;
use crate::stream_order::{FreeTag, StreamOrder};
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

/// Everything behind the pool's lock.
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
/// Operations take one lock: O(1) plus, on virtual memory, one step per chunk the block touches.
#[derive(Debug)]
pub struct DynamicPool {
    config: DynamicConfig,
    /// The device, the counters of what the pool holds and asks, the stream order and the growth rule.
    device: PoolDevice,
    state: Mutex<DynamicState>,
    /// Live bytes and operations, counted under the lock.
    tally: LiveTally,
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
        Ok(DynamicPool {
            config,
            device,
            state: Mutex::new(DynamicState {
                ranges,
                carve_ranges,
                live: FxHashMap::default(),
                carved: FxHashMap::default(),
                space,
                pending: 0,
            }),
            tally: LiveTally::default(),
            cache: OnceLock::new(),
            largest_alignment,
        })
    }

    /// Offers the pool's segments to `segments` and hands each live block to `block`, under the pool's
    /// lock: what its report lists.
    pub(crate) fn list(&self, segments: &mut Listing<SegmentReport>, mut block: impl FnMut(BlockReport)) {
        let state = self.state.lock();
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
        self.state.lock().space.grows_in_place()
    }

    /// The error for a request refused for lack of memory, counted among the pool's out-of-memory answers.
    fn out_of_memory(&self, requested: u64) -> Error {
        self.device.counters.rare.ooms.fetch_add(1, Ordering::Relaxed);
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
    fn place(&self, state: &mut DynamicState, request: Request, for_cache: bool) -> Result<Carved<FreeTag>> {
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
                        self.drain_cache(state, asked);
                        ask = Some(asked.saturating_mul(2));
                        drained |= asked == u64::MAX;
                        continue;
                    }
                    // Refused by the cap or the device: the cache's blocks come back before the pool gives up.
                    Backing::Refused if !cache_has_blocks() => return Err(self.out_of_memory(request.size)),
                    Backing::Refused => {
                        self.drain_cache(state, u64::MAX);
                        drained = true;
                        continue;
                    }
                }
            }
            let fixed_addresses = state.space.grows_in_place();
            if (drain_first() || fixed_addresses) && cache_has_blocks() {
                self.drain_cache(state, u64::MAX);
                drained = true;
                continue;
            }
            // The address range is twice the cap: running out of it means fragmentation beyond repair.
            if fixed_addresses {
                return Err(self.out_of_memory(request.size));
            }
            let need =
                request.span.checked_add(request.align - MIN_BLOCK).ok_or_else(|| self.out_of_memory(request.size))?;
            let DynamicState { ranges, space, pending, .. } = &mut *state;
            if space.grow(ranges, need, *pending, &self.device)? {
                return ranges.allocate(request.span, request.align).ok_or_else(|| self.out_of_memory(request.size));
            }
            // Refused by the cap or the device: first the cache's blocks come back (the request may fit among
            // them), then wholly free segments go back to the device, and the growth is tried again.
            if cache_has_blocks() {
                self.drain_cache(state, u64::MAX);
                drained = true;
                continue;
            }
            if !trimmed && self.trim_locked(state)? > 0 {
                trimmed = true;
                continue;
            }
            return Err(self.out_of_memory(request.size));
        }
    }

    /// Frees blocks the cache in front of the pool holds, holding at least `bytes` (every one for
    /// `u64::MAX`), with the lock held.
    fn drain_cache(&self, state: &mut DynamicState, bytes: u64) {
        let Some(cache) = self.cache.get() else { return };
        for (addr, tag) in cache.blocks.drain(bytes) {
            let freed = self.free_carved_locked(state, addr, tag);
            debug_assert!(freed.is_ok(), "a cached block is a block carved for the cache: {freed:?}");
        }
    }

    /// Gives wholly free memory back, with the lock held (the cache in front gives its blocks back first).
    fn trim_locked(&self, state: &mut DynamicState) -> Result<u64> {
        self.drain_cache(state, u64::MAX);
        let DynamicState { ranges, space, .. } = state;
        let released = space.trim(ranges, &self.device)?;
        self.device.counters.rare.trimmed_bytes.fetch_add(released, Ordering::Relaxed);
        Ok(released)
    }

    /// Puts a cache in front of the pool (once) whose blocks the pool takes back when the cap or the device
    /// refuses a growth, and also before every growth where `drain_before_growth`.
    pub(crate) fn set_block_cache(&self, cache: Arc<dyn BlockCache>, drain_before_growth: bool) {
        let _ = self.cache.set(FrontCache { blocks: cache, drain_before_growth });
    }

    /// Grows the pool by one step of its growth policy ahead of need ([`GrowthPolicy::step_ahead`]), without
    /// holding the pool's lock while the device works, so allocations go on meanwhile. Returns the bytes
    /// added (0 at the cap).
    pub fn grow_ahead(&self) -> Result<u64> {
        let mut state = self.state.lock();
        let reserved = self.device.counters.reserved() + state.pending;
        let Some(bytes) = self.device.policy().step_ahead(reserved) else { return Ok(0) };
        let DynamicState { ranges, space, .. } = &mut *state;
        let Some(mut ahead) = space.plan_ahead(ranges, bytes) else { return Ok(0) };
        state.pending += ahead.pending_bytes();
        drop(state);
        ahead.make(&self.device);
        let mut state = self.state.lock();
        state.pending -= ahead.pending_bytes();
        let DynamicState { ranges, space, .. } = &mut *state;
        space.finish_ahead(ranges, ahead, &self.device)
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
        let order = &self.device.order;
        let stream_index = order.index_of(stream);
        let mut state = self.state.lock();
        let carved = self.place(&mut state, request, for_cache)?;
        if let Err(err) = order.order_reuse(&*self.device.backend, carved.tag, stream_index) {
            let DynamicState { ranges, carve_ranges, space, .. } = &mut *state;
            space.unplace(allocator_for(ranges, carve_ranges, for_cache), carved);
            return Err(err);
        }
        // The block is the request rounded up to 256 bytes: what it adds fits a byte.
        let rounding = (carved.size - size) as u8;
        debug_assert_eq!(u64::from(rounding), carved.size - size);
        let block = LiveBlock { node: carved.node, stream_index: stream_index as u8, rounding };
        let map = if for_cache { &mut state.carved } else { &mut state.live };
        map.insert(carved.offset, block);
        self.tally.on_allocate(size);
        Ok(Allocation { addr: carved.offset, size, stream })
    }

    /// Frees the allocation at `addr`; returns the bytes it had requested.
    pub(crate) fn free_sized(&self, addr: u64) -> Result<u64> {
        let mut state = self.state.lock();
        self.free_locked(&mut state, addr)
    }

    /// Frees the allocation at `addr` with the lock held, its memory tagged by its stream now.
    fn free_locked(&self, state: &mut DynamicState, addr: u64) -> Result<u64> {
        // One lookup: the entry is removed only once the free can no longer fail.
        let entry = match state.live.entry(addr) {
            Entry::Occupied(entry) => entry,
            Entry::Vacant(_) => return Err(self.bad_free(state, addr)),
        };
        let block = *entry.get();
        let tag = self.device.order.tag_free(usize::from(block.stream_index));
        entry.remove();
        shrink_if_sparse(&mut state.live);
        Ok(self.release_block(state, block, tag, false))
    }

    /// Frees the block carved for the cache at `addr`, which the cache gave back with `tag`, with the lock
    /// held.
    fn free_carved_locked(&self, state: &mut DynamicState, addr: u64, tag: FreeTag) -> Result<u64> {
        let Some(block) = state.carved.remove(&addr) else { return Err(self.bad_free(state, addr)) };
        Ok(self.release_block(state, block, tag, true))
    }

    /// Gives the memory of `block`, no longer in either map, back to its range allocator (the cache's where
    /// `carved` for the cache), tagged `tag`; returns the bytes it had been requested for.
    fn release_block(&self, state: &mut DynamicState, block: LiveBlock, tag: FreeTag, carved: bool) -> u64 {
        let DynamicState { ranges, carve_ranges, space, .. } = state;
        let ranges = allocator_for(ranges, carve_ranges, carved);
        let (offset, span) = ranges.span(block.node);
        let size = block.size(span);
        ranges.free(block.node, tag);
        space.release_span(offset, span, &self.device);
        self.tally.on_free(size);
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
        let room = self.state.lock().space.address_space().unwrap_or(u64::MAX);
        let limit = bytes.min(room).min(self.device.backend.capacity());
        self.device.set_limit(Some(limit));
        Ok(limit)
    }

    fn reset_peaks(&self) {
        let _state = self.state.lock();
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
        let mut state = self.state.lock();
        self.trim_locked(&mut state)
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
        self.state.get_mut().space.release(backend);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
