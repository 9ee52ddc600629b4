//! The dynamically growing pool.

use std::collections::hash_map::Entry;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use rustc_hash::FxHashMap;

use super::block_cache::BlockCache;
use super::config::{DynamicConfig, VirtualMemory};
use super::growth_policy::GrowthPolicy;
use super::segment_space::SegmentSpace;
use super::virtual_space::VirtualSpace;
use crate::backend::Backend;
use crate::counters::{LiveTally, PoolStats, ReservedCounters, Stat};
use crate::error::{Error, Result};
use crate::pool::{Allocation, Pool};
use crate::range_allocator::{Carved, NodeId, RangeAllocator};
use crate::report::{BlockReport, PoolReport, SegmentKind, SegmentReport};
use crate::request::Request;
use crate::stream::StreamId;
use crate::stream_order::{FreeTag, StreamOrder};
use crate::units::{MIB, MIN_BLOCK, round_up_to};

/// Segments are sized in multiples of this when the device has no virtual memory (what `cuMemAlloc`
/// rounds large allocations to), or of the device's [`Backend::segment_unit`] where that is larger.
pub const SEGMENT_UNIT: u64 = 2 * MIB;

/// A live allocation: its block in the range allocator, its stream, and how far the bytes asked for fall
/// short of the block (under 256: blocks are requests rounded up to 256 bytes). Eight bytes, so that an
/// entry of the live map takes 16 and never straddles two cache lines (with the size itself, 24 did).
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

/// Where the pool's memory comes from.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "one per pool, so its size costs nothing; a boxed virtual space would cost a pointer chase on every \
              region allocation"
)]
enum Space {
    Segments(SegmentSpace),
    Virtual(VirtualSpace),
}

/// Events a pool keeps outstanding at most for epochs ended at frees ([`VirtualSpace::end_epochs_at_frees`]).
const MAX_PENDING_EPOCHS: usize = 64;

/// Batches of aliased chunks retiring at once at most ([`DynamicConfig::alias_in_use`]); past it, chunks
/// still in use are waited for or grown around as without aliasing.
const MAX_RETIREMENTS: usize = 64;
/// The most places a block is carved at to find one that touches no retiring chunk
/// ([`DynamicPool::away_from_retiring`]).
const MAX_PLACES_TRIED: usize = 8;

/// Everything behind the pool's lock.
#[derive(Debug)]
struct DynamicState {
    ranges: RangeAllocator<FreeTag>,
    /// The live allocations, by address.
    live: FxHashMap<u64, LiveBlock>,
    /// The blocks carved for the cache in front of the pool ([`DynamicPool::allocate_for_cache`]), by
    /// address, freed only when the cache gives them back. Kept apart from `live`, which every request's
    /// allocation and free probes: with the hybrid's class blocks in it, `live` held a thousand entries
    /// where the churn has about seventy live requests, and its probes fetched a line from memory on most
    /// region requests once the pool's tables had gone cold.
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
    backend: Arc<dyn Backend>,
    config: DynamicConfig,
    policy: GrowthPolicy,
    state: Mutex<DynamicState>,
    /// The streams the pool has seen and the events that order reuse between them; shared with the cache
    /// in front of the pool ([`DynamicPool::with_stream_order`]), so that the tags of cached blocks mean the
    /// same here.
    order: Arc<StreamOrder>,
    /// Reserved bytes, device calls and rare events.
    counters: ReservedCounters,
    /// Live bytes and operations, counted under the lock.
    tally: LiveTally,
    cache: OnceLock<FrontCache>,
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
        let granularity = match config.virtual_memory {
            VirtualMemory::Auto => backend.granularity(),
            VirtualMemory::Off => None,
        };
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
        let counters = ReservedCounters::default();
        let mut ranges = RangeAllocator::default();
        let space = match granularity {
            Some(g) => {
                let size = round_up_to(cap.saturating_mul(config.address_space_factor), g).unwrap_or(u64::MAX / 2);
                let base = backend.reserve_range(size)?;
                counters.count_call();
                let mut space = VirtualSpace::new(base, size, g);
                if initial > 0 {
                    if let Err(err) = backend.map(base, initial) {
                        let _ = backend.release_range(base, size);
                        return Err(err);
                    }
                    counters.count_call();
                    counters.add_reserved(initial);
                    space.set_mapped(0..(initial / g) as usize, true);
                }
                ranges.add_region(base, size);
                Space::Virtual(space)
            }
            None => {
                let mut segments = SegmentSpace::default();
                if initial > 0 {
                    let addr = backend.allocate_segment(initial)?;
                    counters.count_call();
                    counters.add_reserved(initial);
                    segments.add(addr, initial);
                    ranges.add_region(addr, initial);
                }
                Space::Segments(segments)
            }
        };
        Ok(DynamicPool {
            backend,
            config,
            policy,
            state: Mutex::new(DynamicState {
                ranges,
                live: FxHashMap::default(),
                carved: FxHashMap::default(),
                space,
                pending: 0,
            }),
            order,
            counters,
            tally: LiveTally::default(),
            cache: OnceLock::new(),
        })
    }

    /// The configuration the pool was made with.
    pub fn config(&self) -> &DynamicConfig {
        &self.config
    }

    /// The growth rule in force (the cap resolved against the device).
    pub fn growth_policy(&self) -> GrowthPolicy {
        self.policy
    }

    /// Whether the pool grows in place in one virtual address range.
    pub fn uses_virtual_memory(&self) -> bool {
        matches!(self.state.lock().space, Space::Virtual(_))
    }

    /// The error for a request refused for lack of memory, counted among the pool's out-of-memory answers.
    fn out_of_memory(&self, requested: u64) -> Error {
        self.counters.rare.ooms.fetch_add(1, Ordering::Relaxed);
        self.refusal(requested)
    }

    /// [`Error::OutOfMemory`] for a growth the cap or the device refused, not counted: the pool may still
    /// find the memory (in the blocks the cache in front of it gives back) before it answers.
    fn refusal(&self, requested: u64) -> Error {
        Error::OutOfMemory {
            requested,
            live: self.tally.allocated(),
            reserved: self.counters.reserved(),
            cap: self.policy.cap,
        }
    }

    /// Finds room for a request, growing (segments) or backing chunks (virtual memory) as needed. The
    /// blocks a cache in front of the pool holds are taken back (once) when the cap or the device refuses
    /// a growth, so that cached blocks never make a request fail, or before every growth where the cache
    /// asked for that ([`DynamicPool::set_block_cache`]), so that they never make the pool grow.
    fn place(&self, state: &mut DynamicState, request: Request) -> Result<Carved<FreeTag>> {
        let mut drained = false;
        let mut trimmed = false;
        // Asked only when the pool would grow.
        let drain_first = || self.cache.get().is_some_and(|cache| cache.drain_before_growth);
        loop {
            // Asked only when the pool would grow: looking costs a pass over the cache.
            let cache_has_blocks = || !drained && self.cache.get().is_some_and(|cache| !cache.blocks.is_empty());
            if let Some(carved) = state.ranges.allocate(request.span, request.align) {
                let pending = state.pending;
                let Space::Virtual(space) = &mut state.space else { return Ok(carved) };
                let missing = space.use_span(carved.offset, carved.size);
                if missing.is_empty() {
                    return Ok(carved);
                }
                let (carved, missing) = self.away_from_retiring(state, request, carved, missing)?;
                let Space::Virtual(space) = &mut state.space else { unreachable!("placed in a virtual range") };
                let need = chunk_count(&missing);
                if drain_first()
                    && need > space.idle_chunks()
                    && !self.prefers_growth(space, pending, need)
                    && cache_has_blocks()
                {
                    unplace(space, &mut state.ranges, carved);
                    self.drain_cache(state);
                    drained = true;
                    continue;
                }
                let backed = ReservedCounters::timed(&self.counters.rare.device_time_ns, || {
                    self.back_chunks(space, pending, missing, request.size)
                });
                let Err(err) = backed else { return Ok(carved) };
                unplace(space, &mut state.ranges, carved);
                if !matches!(err, Error::OutOfMemory { .. }) {
                    return Err(err);
                }
                // Refused by the cap or the device: the cache's blocks come back before the pool gives up.
                if cache_has_blocks() {
                    self.drain_cache(state);
                    drained = true;
                    continue;
                }
                return Err(self.out_of_memory(request.size));
            }
            if (drain_first() || matches!(state.space, Space::Virtual(_))) && cache_has_blocks() {
                self.drain_cache(state);
                drained = true;
                continue;
            }
            // The address range is twice the cap: running out of it means fragmentation beyond repair.
            if matches!(state.space, Space::Virtual(_)) {
                return Err(self.out_of_memory(request.size));
            }
            let grown =
                ReservedCounters::timed(&self.counters.rare.device_time_ns, || self.grow_segments(state, request))?;
            if grown {
                return state
                    .ranges
                    .allocate(request.span, request.align)
                    .ok_or_else(|| self.out_of_memory(request.size));
            }
            // Refused by the cap or the device: first the cache's blocks come back (the request may fit among
            // them), then wholly free segments go back to the device, and the growth is tried again.
            if cache_has_blocks() {
                self.drain_cache(state);
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

    /// A place for a block that landed on chunks still retiring (aliased at a new address while queued work
    /// may use them at the old one), where backing them would wait for that work: the first place the
    /// block is carved that touches no retiring chunk, within [`MAX_PLACES_TRIED`] places, the places
    /// tried before held meanwhile so that they are not found again; else the first place. Addresses cost
    /// nothing unmapped (the range is twice the cap), so the wait is traded for a place that needs backing
    /// as the first did.
    fn away_from_retiring(
        &self,
        state: &mut DynamicState,
        request: Request,
        carved: Carved<FreeTag>,
        missing: Vec<Range<usize>>,
    ) -> Result<(Carved<FreeTag>, Vec<Range<usize>>)> {
        let Space::Virtual(space) = &mut state.space else { return Ok((carved, missing)) };
        if !self.config.avoid_retiring || space.retirements().is_empty() {
            return Ok((carved, missing));
        }
        // Batches whose work has run are unmapped now, without waiting: only the others would make it wait.
        self.unmap_retired(space, &[])?;
        if space.retirements_touching(&missing).is_empty() {
            return Ok((carved, missing));
        }
        // The places tried, held until the search ends so that the range allocator does not give them again.
        let mut tried = Vec::new();
        let mut found = None;
        while found.is_none() && tried.len() + 1 < MAX_PLACES_TRIED {
            let Some(other) = state.ranges.allocate(request.span, request.align) else { break };
            let other_missing = space.use_span(other.offset, other.size);
            if chunk_count(&other_missing) <= chunk_count(&missing)
                && space.retirements_touching(&other_missing).is_empty()
            {
                found = Some((other, other_missing));
            } else {
                tried.push(other);
            }
        }
        for other in tried.into_iter().rev() {
            unplace(space, &mut state.ranges, other);
        }
        match found {
            Some(found) => {
                unplace(space, &mut state.ranges, carved);
                Ok(found)
            }
            None => Ok((carved, missing)),
        }
    }

    /// Frees every block the cache in front of the pool holds, with the lock held.
    fn drain_cache(&self, state: &mut DynamicState) {
        let Some(cache) = self.cache.get() else { return };
        for (addr, tag) in cache.blocks.drain() {
            let freed = self.free_carved_locked(state, addr, tag);
            debug_assert!(freed.is_ok(), "a cached block is a block carved for the cache: {freed:?}");
        }
    }

    /// Adds a segment that holds `request`; false when the cap or the device refuses it.
    fn grow_segments(&self, state: &mut DynamicState, request: Request) -> Result<bool> {
        let need =
            request.span.checked_add(request.align - MIN_BLOCK).ok_or_else(|| self.out_of_memory(request.size))?;
        let Space::Segments(segments) = &mut state.space else { unreachable!("segment growth on a virtual range") };
        let Some(grow) = self.policy.growth(segments.total() + state.pending, need) else { return Ok(false) };
        self.counters.count_call();
        match self.backend.allocate_segment(grow) {
            Ok(addr) => {
                segments.add(addr, grow);
                state.ranges.add_region(addr, grow);
                self.counters.add_reserved(grow);
                self.counters.rare.growths.fetch_add(1, Ordering::Relaxed);
                Ok(true)
            }
            Err(err) if err.is_out_of_memory() => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Backs the chunks of `missing` with physical memory: idle chunks moved first, then new chunks, grown
    /// by the growth policy ahead of need. Whether the cap allows it is decided before anything moves, so an
    /// out-of-memory answer leaves the mappings as they were. `pending` is memory being added outside the
    /// lock, counted against the cap.
    ///
    /// Moving a chunk must wait for the work that last used it. The pool moves without waiting the idle
    /// chunks whose last use is known complete (see [`DynamicPool::safe_idle_runs`]); it waits for the whole
    /// device only when the rest cannot be grown under the cap, or when several streams are in use.
    fn back_chunks(
        &self,
        space: &mut VirtualSpace,
        pending: u64,
        mut missing: Vec<Range<usize>>,
        requested: u64,
    ) -> Result<()> {
        let g = space.granularity();
        self.unmap_retired(space, &missing)?;
        let need = chunk_count(&missing);
        let idle = space.idle_chunks();
        let own =
            if self.config.reclaim_idle && !self.prefers_growth(space, pending, need) { need.min(idle) } else { 0 };
        let short = (need - own) as u64 * g;
        // Without moving, idle chunks still count against the cap: unmapping them may make room.
        let reserved = space.mapped_bytes() + pending;
        let mut unmap_first = false;
        if short > 0 && self.policy.growth(reserved, short).is_none() {
            let trimmable = (idle - own) as u64 * g;
            if trimmable == 0 || self.policy.growth(reserved - trimmable, short).is_none() {
                return Err(self.refusal(requested));
            }
            unmap_first = true;
        }
        if own > 0 {
            let safe = self.safe_idle_runs(space, own)?;
            let safe_count = chunk_count(&safe);
            let rest_grows = self.policy.growth(reserved, (need - safe_count) as u64 * g).is_some();
            if safe_count == own {
                self.move_chunks(space, safe, &mut missing)?;
            } else if let Some(stream) = self.alias_stream(space) {
                // The rest are still in use by queued work on the pool's one stream: the new block's work
                // is queued after it, so their memory can serve it now at a second address.
                self.move_chunks(space, safe, &mut missing)?;
                let busy = space.idle_runs(own - safe_count);
                self.alias_chunks(space, stream, busy, &mut missing)?;
            } else if rest_grows && !self.config.wait_for_idle {
                self.move_chunks(space, safe, &mut missing)?;
            } else {
                // The cap leaves no room to grow around chunks still in use, or the config says to wait
                // rather than grow: wait until enough of them are safe.
                ReservedCounters::timed(&self.counters.rare.wait_time_ns, || self.wait_for_idle_chunks(space, own))?;
                self.move_chunks(space, space.safe_idle_runs(own), &mut missing)?;
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        if unmap_first {
            self.unmap_idle(space)?;
        }
        let short = missing.iter().map(|run| run.len() as u64).sum::<u64>() * g;
        let reserved = space.mapped_bytes() + pending;
        let grow = self.policy.growth(reserved, short).ok_or_else(|| self.refusal(requested))?;
        let extra = ((grow - short) / g) as usize;
        let last = missing.len() - 1;
        for (i, run) in missing.into_iter().enumerate() {
            let run = if i == last { space.extend_run(run, extra) } else { run };
            let bytes = run.len() as u64 * g;
            self.counters.count_call();
            match self.backend.map(space.chunk_addr(run.start), bytes) {
                Ok(()) => {}
                Err(err) if err.is_out_of_memory() => return Err(self.refusal(requested)),
                Err(err) => return Err(err),
            }
            space.set_mapped(run, true);
            self.counters.add_reserved(bytes);
        }
        space.count_growth();
        self.counters.rare.growths.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Rent or buy: whether to map new memory for `need` chunks rather than move idle ones. A move costs
    /// device calls each time a block lands where nothing is mapped; a growth costs memory once. Once the
    /// chunks moved since the last growth add up to what one growth step would add, the pool grows (where
    /// the cap allows) instead of moving more, so a workload that keeps landing on unmapped addresses pays
    /// for at most one step of moves per step of growth, and stops paying once the pool is large enough.
    fn prefers_growth(&self, space: &VirtualSpace, pending: u64, need: usize) -> bool {
        let g = space.granularity();
        let reserved = space.mapped_bytes() + pending;
        self.policy.growth(reserved, need as u64 * g).is_some_and(|step| space.moved_since_growth() as u64 * g >= step)
    }

    /// Idle chunks that can be moved without waiting, at most `limit`: on one stream, those idle since an
    /// epoch whose event has completed. An event is recorded now to end the current epoch, so that on an
    /// idle device every idle chunk is safe at once. With several streams, none is (moves wait).
    fn safe_idle_runs(&self, space: &mut VirtualSpace, limit: usize) -> Result<Vec<Range<usize>>> {
        let order = &self.order;
        if order.is_multi_stream() {
            return Ok(Vec::new());
        }
        if let Some(stream) = order.only_stream() {
            match self.backend.record_event(stream) {
                Ok(event) => space.end_epoch(event),
                // The stream cannot take an event: treat every recent chunk as still in use.
                Err(_) => return Ok(space.safe_idle_runs(limit)),
            }
        }
        self.retire_complete_epochs(space)?;
        Ok(space.safe_idle_runs(limit))
    }

    /// Marks safe the chunks of every ended epoch whose event has completed, and gives those events back.
    fn retire_complete_epochs(&self, space: &mut VirtualSpace) -> Result<()> {
        let mut completed = None;
        for (epoch, event) in space.epoch_events() {
            if !self.backend.event_complete(event)? {
                break;
            }
            completed = Some(epoch);
        }
        if let Some(epoch) = completed {
            for event in space.complete_through(epoch) {
                self.backend.release_event(event);
            }
        }
        Ok(())
    }

    /// Ends the epoch right after a free that left chunks idle ([`VirtualSpace::end_epochs_at_frees`]), on
    /// the pool's one stream, with at most [`MAX_PENDING_EPOCHS`] events outstanding (completed ones are
    /// retired first). A free never fails for this: where no event can be recorded the chunks stay in the
    /// open epoch, to be waited for if they are needed.
    #[cold]
    fn end_epoch_at_free(&self, space: &mut VirtualSpace) {
        let Some(stream) = self.order.only_stream() else { return };
        if space.pending_epochs() >= MAX_PENDING_EPOCHS
            && (self.retire_complete_epochs(space).is_err() || space.pending_epochs() >= MAX_PENDING_EPOCHS)
        {
            return;
        }
        if let Ok(event) = self.backend.record_event(stream) {
            space.end_epoch(event);
        }
    }

    /// Waits until `need` idle chunks are safe to move. On one stream, for the event of the oldest epoch
    /// that makes them so ([`VirtualSpace::epoch_covering`]): the host waits only for the work that last
    /// used them, and the work queued after it keeps the device busy, where a synchronisation would leave
    /// it idle until the program queues more. With several streams, or where no event covers them, for the
    /// whole device.
    fn wait_for_idle_chunks(&self, space: &mut VirtualSpace, need: usize) -> Result<()> {
        space.end_epochs_at_frees();
        if !self.order.is_multi_stream()
            && let Some((epoch, event)) = space.epoch_covering(need)
        {
            self.backend.wait_event(event)?;
            self.order.counters.event_waits.fetch_add(1, Ordering::Relaxed);
            for event in space.complete_through(epoch) {
                self.backend.release_event(event);
            }
            return Ok(());
        }
        self.wait_for_device(space)
    }

    /// Waits for the whole device: every idle chunk becomes safe to move or unmap.
    fn wait_for_device(&self, space: &mut VirtualSpace) -> Result<()> {
        self.order.synchronize(&*self.backend)?;
        for event in space.device_idle() {
            self.backend.release_event(event);
        }
        Ok(())
    }

    /// Moves the mapped chunks of `sources` (safe to move) under the runs of `missing`, in batches of
    /// contiguous chunks; leaves in `missing` what is still unbacked.
    fn move_chunks(
        &self,
        space: &mut VirtualSpace,
        sources: Vec<Range<usize>>,
        missing: &mut Vec<Range<usize>>,
    ) -> Result<()> {
        let g = space.granularity();
        pair_runs(sources, missing, |from, to| {
            self.counters.count_call();
            self.backend.remap(space.chunk_addr(from.start), space.chunk_addr(to.start), from.len() as u64 * g)?;
            space.set_mapped(from.clone(), false);
            space.set_mapped(to.clone(), true);
            self.counters.rare.chunks_moved.fetch_add(from.len() as u64, Ordering::Relaxed);
            space.count_moved(from.len());
            Ok(())
        })
    }

    /// The stream on which idle chunks still in use may be aliased to a new block
    /// ([`DynamicConfig::alias_in_use`]): the pool's one stream, where the device supports aliases and
    /// fewer than [`MAX_RETIREMENTS`] batches are retiring.
    fn alias_stream(&self, space: &VirtualSpace) -> Option<StreamId> {
        if !self.config.alias_in_use || !self.backend.supports_alias() || space.retirements().len() >= MAX_RETIREMENTS {
            return None;
        }
        self.order.only_stream()
    }

    /// Maps the idle chunks of `sources`, which work queued on `stream` may still use, under the runs of
    /// `missing` as well, in batches of contiguous chunks, and retires them from their old addresses until
    /// an event recorded first on `stream` completes; leaves in `missing` what is still unbacked.
    fn alias_chunks(
        &self,
        space: &mut VirtualSpace,
        stream: StreamId,
        sources: Vec<Range<usize>>,
        missing: &mut Vec<Range<usize>>,
    ) -> Result<()> {
        if sources.is_empty() {
            return Ok(());
        }
        let event = self.backend.record_event(stream)?;
        self.order.counters.events_recorded.fetch_add(1, Ordering::Relaxed);
        let g = space.granularity();
        let mut retired = Vec::new();
        let aliased = pair_runs(sources, missing, |from, to| {
            self.counters.count_call();
            self.backend.alias(space.chunk_addr(from.start), space.chunk_addr(to.start), from.len() as u64 * g)?;
            space.set_mapped(to.clone(), true);
            self.counters.rare.chunks_aliased.fetch_add(from.len() as u64, Ordering::Relaxed);
            space.count_moved(from.len());
            retired.push(from.clone());
            Ok(())
        });
        if retired.is_empty() {
            self.backend.release_event(event);
        } else {
            space.retire(retired, event);
        }
        aliased
    }

    /// Unmaps retiring chunks from their old addresses: those among `missing` (a block landed on them, and
    /// needs them backed) once the work queued before their alias has run, waiting for it if need be; the
    /// others where that work is known to have run.
    fn unmap_retired(&self, space: &mut VirtualSpace, missing: &[Range<usize>]) -> Result<()> {
        let needed = space.retirements_touching(missing);
        // Newest first, so that taking a batch out leaves the positions still to visit as they were.
        for position in (0..space.retirements().len()).rev() {
            let event = space.retirements()[position].event;
            let done = if needed.contains(&position) {
                ReservedCounters::timed(&self.counters.rare.wait_time_ns, || self.backend.wait_event(event))?;
                self.order.counters.event_waits.fetch_add(1, Ordering::Relaxed);
                true
            } else {
                self.backend.event_complete(event)?
            };
            if done {
                self.unmap_retirement(space, position)?;
            }
        }
        Ok(())
    }

    /// Unmaps the retiring batch at `position`, whose work has run, from its old addresses.
    fn unmap_retirement(&self, space: &mut VirtualSpace, position: usize) -> Result<()> {
        let g = space.granularity();
        let retirement = space.finish_retirement(position);
        self.backend.release_event(retirement.event);
        for run in retirement.runs {
            self.counters.count_call();
            self.backend.unmap(space.chunk_addr(run.start), run.len() as u64 * g)?;
        }
        Ok(())
    }

    /// Unmaps every idle chunk (and every retiring one from its old address); returns the bytes given back.
    fn unmap_idle(&self, space: &mut VirtualSpace) -> Result<u64> {
        let runs = space.idle_runs(usize::MAX);
        if runs.is_empty() && space.retirements().is_empty() {
            return Ok(0);
        }
        self.wait_for_device(space)?;
        while !space.retirements().is_empty() {
            self.unmap_retirement(space, 0)?;
        }
        let mut released = 0;
        for run in runs {
            let bytes = run.len() as u64 * space.granularity();
            self.counters.count_call();
            self.backend.unmap(space.chunk_addr(run.start), bytes)?;
            space.set_mapped(run, false);
            self.counters.sub_reserved(bytes);
            released += bytes;
        }
        Ok(released)
    }

    /// Gives wholly free memory back, with the lock held (the cache in front gives its blocks back first).
    fn trim_locked(&self, state: &mut DynamicState) -> Result<u64> {
        self.drain_cache(state);
        let released = match &mut state.space {
            Space::Virtual(space) => self.unmap_idle(space)?,
            Space::Segments(segments) => {
                let mut released = 0;
                for (addr, size) in state.ranges.free_regions() {
                    debug_assert_eq!(segments.size_of(addr), Some(size), "regions are whole segments");
                    self.counters.count_call();
                    self.backend.free_segment(addr, size)?;
                    state.ranges.remove_free_region(addr);
                    segments.remove(addr);
                    self.counters.sub_reserved(size);
                    released += size;
                }
                released
            }
        };
        self.counters.rare.trimmed_bytes.fetch_add(released, Ordering::Relaxed);
        Ok(released)
    }

    /// Puts a cache in front of the pool (once) whose blocks the pool takes back when the cap or the device
    /// refuses a growth, and also before every growth where `drain_before_growth`.
    pub(crate) fn set_block_cache(&self, cache: Arc<dyn BlockCache>, drain_before_growth: bool) {
        let _ = self.cache.set(FrontCache { blocks: cache, drain_before_growth });
    }

    /// Grows the pool by one step of its growth policy ahead of need, without holding the pool's lock
    /// while the device works, so allocations go on meanwhile. Returns the bytes added (0 at the cap).
    pub fn grow_ahead(&self) -> Result<u64> {
        let mut state = self.state.lock();
        let reserved = self.counters.reserved() + state.pending;
        let Some(bytes) = self.policy.step_ahead(reserved) else { return Ok(0) };
        let granularity = match &state.space {
            Space::Virtual(space) => Some(space.granularity()),
            Space::Segments(_) => None,
        };
        match granularity {
            Some(g) => {
                let DynamicState { ranges, space, .. } = &mut *state;
                // Always virtual memory here: only it has a granularity.
                let Space::Virtual(space) = space else { return Ok(0) };
                let Some(carved) = ranges.allocate(bytes, g) else { return Ok(0) };
                // The stretch is a block while the device maps it, so nothing else lands on it. Only its chunks
                // not mapped yet are mapped (the device refuses a chunk mapped twice): a stretch that starts on
                // free mapped chunks grows by the rest, a stretch wholly mapped needs no growth. Chunks still
                // mapped at their old addresses after an alias cannot be mapped again yet: no growth now.
                let missing = space.use_span(carved.offset, carved.size);
                if missing.is_empty() || !space.retirements_touching(&missing).is_empty() {
                    unplace(space, ranges, carved);
                    return Ok(0);
                }
                let runs: Vec<(Range<usize>, u64)> =
                    missing.into_iter().map(|run| (run.clone(), space.chunk_addr(run.start))).collect();
                let short = runs.iter().map(|(run, _)| run.len() as u64).sum::<u64>() * g;
                state.pending += short;
                drop(state);
                let mut mapped = Vec::with_capacity(runs.len());
                let mut failure = None;
                for (run, addr) in runs {
                    self.counters.count_call();
                    match self.backend.map(addr, run.len() as u64 * g) {
                        Ok(()) => mapped.push(run),
                        Err(err) => {
                            failure = Some(err);
                            break;
                        }
                    }
                }
                let mut state = self.state.lock();
                let state = &mut *state;
                state.pending -= short;
                let mut added = 0;
                if let Space::Virtual(space) = &mut state.space {
                    for run in mapped {
                        added += run.len() as u64 * g;
                        space.set_mapped(run, true);
                    }
                    if added > 0 {
                        space.count_growth();
                        self.counters.add_reserved(added);
                    }
                    space.release_span(carved.offset, carved.size);
                }
                state.ranges.free(carved.node, carved.tag);
                if added > 0 {
                    self.counters.rare.growths.fetch_add(1, Ordering::Relaxed);
                    self.counters.rare.pre_expansions.fetch_add(1, Ordering::Relaxed);
                }
                return match failure {
                    Some(err) => Err(err),
                    None => Ok(added),
                };
            }
            None => {
                state.pending += bytes;
                drop(state);
                self.counters.count_call();
                let segment = self.backend.allocate_segment(bytes);
                let mut state = self.state.lock();
                let state = &mut *state;
                state.pending -= bytes;
                let addr = segment?;
                if let Space::Segments(segments) = &mut state.space {
                    segments.add(addr, bytes);
                }
                state.ranges.add_region(addr, bytes);
                self.counters.add_reserved(bytes);
            }
        }
        self.counters.rare.growths.fetch_add(1, Ordering::Relaxed);
        self.counters.rare.pre_expansions.fetch_add(1, Ordering::Relaxed);
        Ok(bytes)
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
        if request.span > self.policy.cap {
            return Err(self.out_of_memory(size));
        }
        let stream_index = self.order.index_of(stream);
        let mut state = self.state.lock();
        let carved = self.place(&mut state, request)?;
        if let Err(err) = self.order.order_reuse(&*self.backend, carved.tag, stream_index) {
            if let Space::Virtual(space) = &mut state.space {
                space.release_span(carved.offset, carved.size);
            }
            state.ranges.free(carved.node, carved.tag);
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
        let tag = self.order.tag_free(&*self.backend, usize::from(block.stream_index))?;
        entry.remove();
        shrink_if_sparse(&mut state.live);
        Ok(self.release_block(state, block, tag))
    }

    /// Frees the block carved for the cache at `addr`, which the cache gave back with `tag`, with the lock
    /// held.
    fn free_carved_locked(&self, state: &mut DynamicState, addr: u64, tag: FreeTag) -> Result<u64> {
        let Some(block) = state.carved.remove(&addr) else { return Err(self.bad_free(state, addr)) };
        Ok(self.release_block(state, block, tag))
    }

    /// Gives the memory of `block`, no longer in either map, back to the range allocator, tagged `tag`;
    /// returns the bytes it had been requested for.
    fn release_block(&self, state: &mut DynamicState, block: LiveBlock, tag: FreeTag) -> u64 {
        let (offset, span) = state.ranges.span(block.node);
        let size = block.size(span);
        state.ranges.free(block.node, tag);
        if let Space::Virtual(space) = &mut state.space
            && space.release_span(offset, span)
            && space.ends_epochs_at_frees()
        {
            ReservedCounters::timed(&self.counters.rare.device_time_ns, || self.end_epoch_at_free(space));
        }
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
        if let Some((block, _)) = state.ranges.used_block_containing(addr) {
            return Error::InteriorAddress { addr, block };
        }
        let inside = match &state.space {
            Space::Virtual(space) => addr >= space.base() && addr < space.base() + space.size(),
            Space::Segments(segments) => segments.contains(addr),
        };
        if inside { Error::NotLive { addr } } else { Error::ForeignAddress { addr } }
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

/// Pairs the chunks of `sources` with the runs of `missing` in order, in batches contiguous on both sides,
/// and gives each batch to `give` as `(from, to)`; leaves in `missing` what no source reached (or what was
/// left when `give` failed, its error returned).
fn pair_runs(
    sources: Vec<Range<usize>>,
    missing: &mut Vec<Range<usize>>,
    mut give: impl FnMut(Range<usize>, Range<usize>) -> Result<()>,
) -> Result<()> {
    let mut sources = sources.into_iter();
    let Some(mut source) = sources.next() else { return Ok(()) };
    let mut targets = std::mem::take(missing).into_iter();
    while let Some(mut target) = targets.next() {
        while !target.is_empty() {
            if source.is_empty() {
                match sources.next() {
                    Some(next) => source = next,
                    None => {
                        missing.push(target);
                        missing.extend(targets);
                        return Ok(());
                    }
                }
            }
            let n = target.len().min(source.len());
            if let Err(err) = give(source.start..source.start + n, target.start..target.start + n) {
                missing.push(target);
                missing.extend(targets);
                return Err(err);
            }
            source.start += n;
            target.start += n;
        }
    }
    Ok(())
}

impl Pool for DynamicPool {
    fn strategy(&self) -> &'static str {
        "dynamic"
    }

    fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    fn allocate(&self, size: u64, alignment: u64, stream: StreamId) -> Result<Allocation> {
        self.allocate_into(size, alignment, stream, false)
    }

    fn free(&self, addr: u64) -> Result<()> {
        self.free_sized(addr).map(|_| ())
    }

    fn stats(&self) -> PoolStats {
        let tally = self.tally.read();
        let rare = &self.counters.rare;
        PoolStats {
            allocated_bytes: Stat { current: tally.allocated, peak: tally.allocated_peak },
            reserved_bytes: Stat { current: self.counters.reserved(), peak: self.counters.reserved_peak() },
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
            events_recorded: self.order.counters.events_recorded.load(Ordering::Relaxed),
            stream_waits: self.order.counters.stream_waits.load(Ordering::Relaxed),
            synchronizations: self.order.counters.synchronizations.load(Ordering::Relaxed),
            event_waits: self.order.counters.event_waits.load(Ordering::Relaxed),
            device_time_ns: rare.device_time_ns.load(Ordering::Relaxed),
            wait_time_ns: rare.wait_time_ns.load(Ordering::Relaxed),
        }
    }

    fn report(&self) -> PoolReport {
        let state = self.state.lock();
        let segments = match &state.space {
            Space::Virtual(space) => vec![SegmentReport {
                kind: SegmentKind::VirtualRange,
                addr: space.base(),
                size: space.size(),
                reserved_bytes: space.mapped_bytes(),
            }],
            Space::Segments(segments) => segments
                .iter()
                .map(|(addr, size)| SegmentReport { kind: SegmentKind::Segment, addr, size, reserved_bytes: size })
                .collect(),
        };
        let mut blocks: Vec<BlockReport> = state
            .live
            .iter()
            .map(|(&addr, block)| {
                let span = state.ranges.span(block.node).1;
                BlockReport {
                    addr,
                    size: block.size(span),
                    block_size: span,
                    stream: self.order.stream_of(usize::from(block.stream_index)),
                    fallback: false,
                }
            })
            .collect();
        drop(state);
        blocks.sort_by_key(|b| b.addr);
        PoolReport {
            strategy: self.strategy().into(),
            backend: self.backend.name(),
            stats: self.stats(),
            segments,
            blocks,
            classes: Vec::new(),
        }
    }

    fn trim(&self) -> Result<u64> {
        let mut state = self.state.lock();
        self.trim_locked(&mut state)
    }
}

impl Drop for DynamicPool {
    fn drop(&mut self) {
        let backend = &*self.backend;
        self.order.release_all(backend);
        let state = self.state.get_mut();
        match &mut state.space {
            Space::Virtual(space) => {
                let _ = backend.synchronize();
                for (_, event) in space.epoch_events().collect::<Vec<_>>() {
                    backend.release_event(event);
                }
                while !space.retirements().is_empty() {
                    let retirement = space.finish_retirement(0);
                    backend.release_event(retirement.event);
                    for run in retirement.runs {
                        let _ = backend.unmap(space.chunk_addr(run.start), run.len() as u64 * space.granularity());
                    }
                }
                for run in space.mapped_runs() {
                    let _ = backend.unmap(space.chunk_addr(run.start), run.len() as u64 * space.granularity());
                }
                let _ = backend.release_range(space.base(), space.size());
            }
            Space::Segments(segments) => {
                for (addr, size) in segments.iter() {
                    let _ = backend.free_segment(addr, size);
                }
            }
        }
    }
}

/// The chunks in `runs`.
fn chunk_count(runs: &[Range<usize>]) -> usize {
    runs.iter().map(|run| run.len()).sum()
}

/// Gives back a place carved in a virtual range: its span in `space` and its addresses in `ranges`.
fn unplace(space: &mut VirtualSpace, ranges: &mut RangeAllocator<FreeTag>, carved: Carved<FreeTag>) {
    space.release_span(carved.offset, carved.size);
    ranges.free(carved.node, carved.tag);
}

#[cfg(test)]
mod tests {
    use super::*;

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
