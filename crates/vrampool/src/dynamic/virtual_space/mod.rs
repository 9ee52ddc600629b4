//! A dynamic pool's memory on a device with virtual memory: one address range reserved at the start, and
//! physical chunks mapped where blocks land, moved from idle stretches to where they are needed, aliased
//! while queued work still uses them, and unmapped when the pool trims.
//!
//! [`ChunkMap`] keeps the books chunk by chunk; [`VirtualSpace`] makes the device calls and records them
//! there. Every call it makes is counted among the pool's backend calls ([`PoolDevice::call`]).

mod chunk_map;
mod chunk_set;
mod driver_budget;
mod page_plan;

use std::ops::Range;
use std::sync::atomic::Ordering;

use chunk_map::{ChunkMap, chunk_count};
use driver_budget::DriverBudget;
use page_plan::{PageMove, Shortfall, cover, move_batches, new_pages, page_batches};

use super::config::{DynamicConfig, Paging};
use super::growth_policy::GrowthPolicy;
use super::page_policy::PagePolicy;
use super::pool_device::PoolDevice;
use super::space::Backing;
use crate::backend::{Backend, CostModel};
use crate::counters::ReservedCounters;
use crate::error::{Error, Result};
use crate::range_allocator::{Carved, FreePlace, RangeAllocator};
use crate::report::{SegmentKind, SegmentReport};
use crate::request::Request;
use crate::stream::StreamId;
use crate::stream_order::FreeTag;
use crate::units::{MIN_BLOCK, align_up, round_up_to};

/// Events a space keeps outstanding at most for epochs ended at frees ([`ChunkMap::end_epochs_at_frees`]).
const MAX_PENDING_EPOCHS: usize = 64;

/// Batches of aliased chunks retiring at once at most ([`DynamicConfig::alias_in_use`]); past it, chunks
/// still in use are waited for or grown around as without aliasing.
const MAX_RETIREMENTS: usize = 64;

/// The most places a block is carved at to find one that touches no retiring chunk
/// ([`VirtualSpace::away_from_retiring`]).
const MAX_PLACES_TRIED: usize = 8;

/// The free blocks looked at, at both ends of each, for the place of a block that would need chunks
/// backed, with pages the space sizes itself ([`VirtualSpace::fewest_unbacked`]): enough to find mapped
/// pages for most blocks, few enough to keep the search short (docs/BENCHMARKS.md).
const FREE_BLOCKS_TRIED: usize = 16;

/// The runs of mapped chunks inside a free block whose ends a block is tried at
/// ([`VirtualSpace::fewest_unbacked`]).
const MAPPED_RUNS_TRIED: usize = 8;

/// One reserved address range, grown in place by mapping physical chunks where blocks land.
///
/// Its reserved bytes are its mapped chunks. Before it maps new physical memory it moves chunks that sit
/// idle under wholly free stretches to where they are needed, in batches of contiguous chunks
/// ([`DynamicConfig::reclaim_idle`]), once no queued work still uses them. Moves are bounded by growth:
/// once the chunks moved since the last growth add up to one growth step, it grows instead, so a churn that
/// keeps landing on unmapped addresses settles.
///
/// Placing a block costs one step per chunk it touches; backing it, a device call per batch of contiguous
/// chunks, and at most one wait for the device.
#[derive(Debug)]
pub(super) struct VirtualSpace {
    chunks: ChunkMap,
    /// [`DynamicConfig::reclaim_idle`].
    reclaim_idle: bool,
    /// [`DynamicConfig::wait_for_idle`].
    wait_for_idle: bool,
    /// [`DynamicConfig::alias_in_use`].
    alias_in_use: bool,
    /// [`DynamicConfig::avoid_retiring`].
    avoid_retiring: bool,
    /// The page sizes of [`Paging::Adaptive`]; `None` for the device's pages.
    pages: Option<PagePolicy>,
    /// The time moves of idle pages took, against their share of it ([`PagePolicy::driver_per_mille`]; no
    /// bound for the device's pages).
    budget: DriverBudget,
    /// While a block is backed: the bytes the pool's other shards hold or are adding, which count against
    /// the cap as the space's own do ([`PoolDevice::held_elsewhere`]); 0 otherwise.
    held_elsewhere: u64,
}

/// Chunks mapped ahead of need ([`VirtualSpace::plan_ahead`]): planned under the pool's lock, mapped by
/// the device outside it ([`ChunksAhead::map`]), recorded under the lock again
/// ([`VirtualSpace::finish_ahead`]).
#[derive(Debug)]
pub(super) struct ChunksAhead {
    /// The stretch mapped under, held as a block meanwhile so that nothing else lands on it.
    carved: Carved<FreeTag>,
    /// Its runs of chunks not mapped yet: each run, its first address and its bytes.
    runs: Vec<(Range<usize>, u64, u64)>,
    /// The runs the device mapped.
    mapped: Vec<Range<usize>>,
    /// The error that stopped the mapping, if one did.
    failure: Option<Error>,
}

impl ChunksAhead {
    /// The bytes being mapped: counted against the cap while the lock is not held.
    pub(super) fn pending_bytes(&self) -> u64 {
        self.runs.iter().map(|&(_, _, bytes)| bytes).sum()
    }

    /// Maps the runs, in order, until one fails. Called without the pool's lock.
    pub(super) fn map(&mut self, device: &PoolDevice) {
        for (run, addr, bytes) in &self.runs {
            match device.call(|backend| backend.map(*addr, *bytes)) {
                Ok(()) => self.mapped.push(run.clone()),
                Err(err) => {
                    self.failure = Some(err);
                    break;
                }
            }
        }
    }
}

impl VirtualSpace {
    /// Reserves the range (the cap times [`DynamicConfig::address_space_factor`], in chunks of
    /// `granularity` bytes) and maps its first `initial` bytes, a multiple of the granularity, which
    /// `ranges` then sub-allocates. With [`Paging::Adaptive`] the range is twice as large, and its upper
    /// half goes to `carve_ranges`, for the blocks carved for a cache in front of the pool: kept apart from the
    /// pool's own blocks, the blocks a cache holds never sit on the pages those need, and pages move
    /// between the halves as any idle page does. Nothing is left held on an error.
    pub(super) fn open(
        device: &PoolDevice,
        config: &DynamicConfig,
        granularity: u64,
        initial: u64,
        ranges: &mut RangeAllocator<FreeTag>,
        carve_ranges: &mut Option<RangeAllocator<FreeTag>>,
    ) -> Result<Self> {
        let backend = &*device.backend;
        // With blocks carved for a cache kept apart, each half of the range is as large as a range otherwise.
        let halves = if matches!(config.paging, Paging::Adaptive(_)) { 2 } else { 1 };
        let size = round_up_to(device.configured.cap.saturating_mul(config.address_space_factor * halves), granularity)
            .unwrap_or(u64::MAX / 2);
        let base = backend.reserve_range(size)?;
        device.counters.count_call();
        let mut chunks = ChunkMap::new(base, size, granularity);
        if initial > 0 {
            if let Err(err) = backend.map(base, initial) {
                let _ = backend.release_range(base, size);
                return Err(err);
            }
            device.counters.count_call();
            device.counters.add_reserved(initial);
            chunks.set_mapped(0..(initial / granularity) as usize, true);
        }
        let half = size / 2 / granularity * granularity;
        match config.paging {
            Paging::Adaptive(_) if half > 0 && half < size => {
                ranges.add_region(base, half);
                let mut carves = RangeAllocator::default();
                carves.add_region(base + half, size - half);
                *carve_ranges = Some(carves);
            }
            _ => ranges.add_region(base, size),
        }
        Ok(VirtualSpace {
            chunks,
            reclaim_idle: config.reclaim_idle,
            wait_for_idle: config.wait_for_idle,
            alias_in_use: config.alias_in_use,
            avoid_retiring: config.avoid_retiring,
            pages: match config.paging {
                Paging::Device => None,
                Paging::Adaptive(policy) => Some(policy),
            },
            budget: DriverBudget::new(match config.paging {
                Paging::Device => u64::MAX,
                Paging::Adaptive(policy) => policy.driver_per_mille,
            }),
            held_elsewhere: 0,
        })
    }

    /// The range's first address and its bytes.
    pub(super) fn range(&self) -> (u64, u64) {
        (self.chunks.base(), self.chunks.size())
    }

    /// The growth rule as this space sees it while backing a block: the pool's, its cap less what the pool's
    /// other shards hold ([`VirtualSpace::held_elsewhere`]).
    fn policy(&self, device: &PoolDevice) -> GrowthPolicy {
        let policy = device.policy();
        GrowthPolicy { cap: policy.cap.saturating_sub(self.held_elsewhere), ..policy }
    }

    /// Whether `addr` lies in the range.
    pub(super) fn contains(&self, addr: u64) -> bool {
        self.chunks.contains(addr)
    }

    /// The range, for the pool's report.
    pub(super) fn report(&self) -> SegmentReport {
        SegmentReport {
            kind: SegmentKind::VirtualRange,
            addr: self.chunks.base(),
            size: self.chunks.size(),
            reserved_bytes: self.chunks.mapped_bytes(),
        }
    }

    /// Backs a block of `request` carved at `carved`: counts it on its chunks and maps what is missing
    /// under it, moving idle chunks first, then growing by the growth policy ahead of need. A block that
    /// lands on chunks still retiring may be carved elsewhere first ([`VirtualSpace::away_from_retiring`]).
    /// Where new memory would be needed, `drain_first` is asked whether the pool would rather take its
    /// cache's blocks back first: the place is then given up ([`Backing::DrainFirst`]). A place the cap or
    /// the device refuses is given up too ([`Backing::Refused`]), and so is one whose backing failed.
    /// `pending` is memory being added outside the pool's lock, counted against the cap.
    pub(super) fn back(
        &mut self,
        ranges: &mut RangeAllocator<FreeTag>,
        carved: Carved<FreeTag>,
        request: Request,
        pending: u64,
        device: &PoolDevice,
        drain_first: impl FnOnce() -> bool,
    ) -> Result<Backing> {
        let carved = match self.pages {
            Some(_) => self.fewest_unbacked(ranges, request, carved, device)?,
            None => carved,
        };
        let missing = self.chunks.use_span(carved.offset, carved.size);
        if missing.is_empty() {
            return Ok(Backing::Placed(carved));
        }
        let (carved, missing) = match self.pages {
            Some(_) => (carved, missing),
            None => self.away_from_retiring(ranges, request, carved, missing, device)?,
        };
        let block = self.chunks.chunks_of(carved.offset, carved.size);
        // From here to the mapping, other shards add no memory: the room under the cap stays what is seen.
        let growth = device.lock_growth();
        self.held_elsewhere = device.held_elsewhere(self.chunks.mapped_bytes() + pending);
        let backed = if self.pages.is_some() {
            ReservedCounters::timed(&device.counters.rare.device_time_ns, || {
                self.back_pages(pending, missing, block, device, drain_first)
            })
        } else {
            let need = chunk_count(&missing);
            if need > self.chunks.idle_chunks() && !self.prefers_growth(pending, need, device) && drain_first() {
                Ok(Outcome::DrainFirst(u64::MAX))
            } else {
                ReservedCounters::timed(&device.counters.rare.device_time_ns, || {
                    self.back_chunks(pending, missing, device)
                })
                .map(|backed| if backed { Outcome::Backed } else { Outcome::Refused })
            }
        };
        self.held_elsewhere = 0;
        drop(growth);
        let outcome = match backed {
            Ok(Outcome::Backed) => return Ok(Backing::Placed(carved)),
            Ok(Outcome::Refused) => Ok(Backing::Refused),
            Ok(Outcome::DrainFirst(bytes)) => Ok(Backing::DrainFirst(bytes)),
            Err(err) => Err(err),
        };
        self.unplace(ranges, carved);
        outcome
    }

    /// The place for a block carved at `carved` that would need chunks backed there, with pages the space
    /// sizes itself: among the first [`FREE_BLOCKS_TRIED`] free blocks that hold it, at either end of each
    /// and, in one at least twice the block's size, at either end of each of the first [`MAPPED_RUNS_TRIED`]
    /// runs of mapped chunks inside it, the place that touches no retiring chunk and needs the fewest
    /// chunks backed (the first found on a tie: the smaller free block, which keeps large free stretches
    /// whole); the search ends at a place that needs none. `carved` itself where it needs none. Placing
    /// blocks where pages are mapped already is what keeps idle pages from moving back and forth.
    fn fewest_unbacked(
        &mut self,
        ranges: &mut RangeAllocator<FreeTag>,
        request: Request,
        carved: Carved<FreeTag>,
        device: &PoolDevice,
    ) -> Result<Carved<FreeTag>> {
        let (unbacked, retiring) = self.chunks.unbacked_in(carved.offset, carved.size);
        if unbacked == 0 {
            return Ok(carved);
        }
        if retiring {
            // Batches whose work has run are unmapped now, without waiting: their chunks are then unbacked.
            self.unmap_retired(&[], device)?;
        }
        let (span, align) = (carved.size, request.align.max(MIN_BLOCK));
        ranges.free(carved.node, carved.tag);
        let mut best: Option<((bool, usize), FreePlace, u64)> = None;
        let mut consider = |start: u64, place: FreePlace| {
            let (unbacked, retiring) = self.chunks.unbacked_in(start, span);
            let key = (retiring, unbacked);
            if best.as_ref().is_none_or(|(best_key, ..)| key < *best_key) {
                best = Some((key, place, start));
            }
            key == (false, 0)
        };
        'places: for place in ranges.places(span, align, FREE_BLOCKS_TRIED) {
            let first = align_up(place.offset, align).expect("the place fits the block");
            let last = (place.offset + place.size - span) & !(align - 1);
            if consider(first, place) || (last != first && consider(last, place)) {
                break;
            }
            // Inside a free block much larger than the request, the ends of its runs of mapped chunks.
            if place.size >= 2 * span {
                for run in self.chunks.mapped_within(place.offset, place.size, MAPPED_RUNS_TRIED) {
                    let aligned = |at: u64| (at.clamp(first, last) & !(align - 1)).max(first);
                    if consider(aligned(run.start), place) || consider(aligned(run.end.saturating_sub(span)), place) {
                        break 'places;
                    }
                }
            }
        }
        match best {
            Some((_, place, start)) => Ok(ranges.carve_at(place, start, span)),
            None => ranges.allocate(span, align).ok_or(Error::InvalidBackendCall {
                call: "place",
                reason: format!("a free block of {span} bytes was freed and then not found"),
            }),
        }
    }

    /// Gives back a place carved in the range: its span here and its addresses in `ranges`.
    pub(super) fn unplace(&mut self, ranges: &mut RangeAllocator<FreeTag>, carved: Carved<FreeTag>) {
        self.chunks.release_span(carved.offset, carved.size);
        ranges.free(carved.node, carved.tag);
    }

    /// Forgets a freed block on `[offset, offset + span)`. Where that leaves chunks idle and frees end
    /// epochs ([`ChunkMap::end_epochs_at_frees`]), an event ends the epoch now.
    pub(super) fn release_span(&mut self, offset: u64, span: u64, device: &PoolDevice) {
        if self.chunks.release_span(offset, span) && self.chunks.ends_epochs_at_frees() {
            self.end_epoch_at_free(device);
        }
    }

    /// A place for a block that landed on chunks still retiring (aliased at a new address while queued work
    /// may use them at the old one), where backing them would wait for that work: the first place the
    /// block is carved that touches no retiring chunk, within [`MAX_PLACES_TRIED`] places, the places
    /// tried before held meanwhile so that they are not found again; else the first place. Addresses cost
    /// nothing unmapped (the range is twice the cap), so the wait is traded for a place that needs backing
    /// as the first did.
    fn away_from_retiring(
        &mut self,
        ranges: &mut RangeAllocator<FreeTag>,
        request: Request,
        carved: Carved<FreeTag>,
        missing: Vec<Range<usize>>,
        device: &PoolDevice,
    ) -> Result<(Carved<FreeTag>, Vec<Range<usize>>)> {
        if !self.avoid_retiring || self.chunks.retirements().is_empty() {
            return Ok((carved, missing));
        }
        // Batches whose work has run are unmapped now, without waiting: only the others would make it wait.
        self.unmap_retired(&[], device)?;
        if self.chunks.retirements_touching(&missing).is_empty() {
            return Ok((carved, missing));
        }
        // The places tried, held until the search ends so that the range allocator does not give them again.
        let mut tried = Vec::new();
        let mut found = None;
        while found.is_none() && tried.len() + 1 < MAX_PLACES_TRIED {
            let Some(other) = ranges.allocate(request.span, request.align) else { break };
            let other_missing = self.chunks.use_span(other.offset, other.size);
            if chunk_count(&other_missing) <= chunk_count(&missing)
                && self.chunks.retirements_touching(&other_missing).is_empty()
            {
                found = Some((other, other_missing));
            } else {
                tried.push(other);
            }
        }
        for other in tried.into_iter().rev() {
            self.unplace(ranges, other);
        }
        match found {
            Some(found) => {
                self.unplace(ranges, carved);
                Ok(found)
            }
            None => Ok((carved, missing)),
        }
    }

    /// Backs the chunks of `missing` with physical memory: idle chunks moved first, then new chunks, grown
    /// by the growth policy ahead of need. Whether the cap allows it is decided before anything moves, so a
    /// refusal (false) leaves the mappings as they were; false too where the device has no memory left.
    ///
    /// Moving a chunk must wait for the work that last used it. The space moves without waiting the idle
    /// chunks whose last use is known complete (see [`VirtualSpace::safe_idle_runs`]); it waits for the
    /// whole device only when the rest cannot be grown under the cap, or when several streams are in use.
    fn back_chunks(&mut self, pending: u64, mut missing: Vec<Range<usize>>, device: &PoolDevice) -> Result<bool> {
        let policy = self.policy(device);
        self.unmap_retired(&missing, device)?;
        let need = chunk_count(&missing);
        let idle = self.chunks.idle_chunks();
        let own = if self.reclaim_idle && !self.prefers_growth(pending, need, device) { need.min(idle) } else { 0 };
        let short = self.chunks.bytes(need - own);
        // Without moving, idle chunks still count against the cap: unmapping them may make room.
        let reserved = self.chunks.mapped_bytes() + pending;
        let mut unmap_first = false;
        if short > 0 && policy.growth(reserved, short).is_none() {
            let trimmable = self.chunks.bytes(idle - own);
            if trimmable == 0 || policy.growth(reserved - trimmable, short).is_none() {
                return Ok(false);
            }
            unmap_first = true;
        }
        if own > 0 {
            let safe = self.safe_idle_runs(own, device)?;
            let safe_count = chunk_count(&safe);
            let rest_grows = policy.growth(reserved, self.chunks.bytes(need - safe_count)).is_some();
            if safe_count == own {
                self.move_chunks(safe, &mut missing, device)?;
            } else if let Some(stream) = self.alias_stream(device) {
                // The rest are still in use by queued work on the pool's one stream: the new block's work
                // is queued after it, so their memory can serve it now at a second address.
                self.move_chunks(safe, &mut missing, device)?;
                let busy = self.chunks.idle_runs(own - safe_count);
                self.alias_chunks(stream, busy, &mut missing, device)?;
            } else if rest_grows && !self.wait_for_idle {
                self.move_chunks(safe, &mut missing, device)?;
            } else {
                // The cap leaves no room to grow around chunks still in use, or the config says to wait
                // rather than grow: wait until enough of them are safe.
                ReservedCounters::timed(&device.counters.rare.wait_time_ns, || self.wait_for_idle_chunks(own, device))?;
                let safe = self.chunks.safe_idle_runs(own);
                self.move_chunks(safe, &mut missing, device)?;
            }
        }
        if missing.is_empty() {
            return Ok(true);
        }
        if unmap_first {
            self.unmap_idle(device)?;
        }
        let short = self.chunks.bytes(chunk_count(&missing));
        let reserved = self.chunks.mapped_bytes() + pending;
        let Some(grow) = policy.growth(reserved, short) else { return Ok(false) };
        let extra = self.chunks.whole_chunks(grow - short);
        let last = missing.len() - 1;
        for (i, run) in missing.into_iter().enumerate() {
            let run = if i == last { self.chunks.extend_run(run, extra) } else { run };
            let (addr, bytes) = self.chunks.extent(&run);
            match device.call(|backend| backend.map(addr, bytes)) {
                Ok(()) => {}
                Err(err) if err.is_out_of_memory() => return Ok(false),
                Err(err) => return Err(err),
            }
            self.chunks.set_mapped(run, true);
            device.counters.add_reserved(bytes);
        }
        self.chunks.count_growth();
        device.counters.rare.growths.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Backs the chunks of `missing`, of the block on the chunks `block`, with whole pages: idle pages moved
    /// first (on one stream, those queued work may still use aliased) while the moves are within their
    /// budget of driver time, or within [`PagePolicy::OVERDRAFT_SHARES`] times it for a large need
    /// ([`PagePolicy::LARGE_NEED_PER_POOL`]), then new pages of the size the space's [`PagePolicy`] gives,
    /// each at a multiple of its size, in as few device calls as their batches allow. Where new memory is
    /// needed, `drain_first` is asked whether the pool would rather take its cache's blocks back first.
    /// Whether the cap allows the new pages is decided before they are mapped: a refusal leaves what moved in
    /// place, as does the device having no memory left.
    fn back_pages(
        &mut self,
        pending: u64,
        missing: Vec<Range<usize>>,
        block: Range<usize>,
        device: &PoolDevice,
        drain_first: impl FnOnce() -> bool,
    ) -> Result<Outcome> {
        self.unmap_retired(&missing, device)?;
        let mut short = Shortfall::new(block, missing);
        let thrifty = self.budget.overspent(&*device.backend);
        // Asked only once the moves have spent their share.
        let large_need = || {
            self.chunks.bytes(chunk_count(&short.missing)).saturating_mul(PagePolicy::LARGE_NEED_PER_POOL)
                >= self.chunks.mapped_bytes()
        };
        let may_move =
            !thrifty || (large_need() && !self.budget.overspent_by(&*device.backend, PagePolicy::OVERDRAFT_SHARES));
        if self.reclaim_idle && self.chunks.idle_chunks() > 0 && may_move {
            let mark = self.budget.mark(&*device.backend);
            let moved = self.move_idle_pages(&mut short, device);
            self.budget.spend(&*device.backend, mark);
            moved?;
        }
        let Shortfall { block, missing, claims } = short;
        if missing.is_empty() {
            return Ok(Outcome::Backed);
        }
        if drain_first() {
            return Ok(Outcome::DrainFirst(self.chunks.bytes(chunk_count(&missing))));
        }
        let cap = self.policy(device).cap;
        let granularity = self.chunks.granularity();
        let mut pages = Vec::new();
        for attempt in 0..2 {
            let reserved = self.chunks.mapped_bytes() + pending;
            let order = match (attempt, self.pages) {
                (0, Some(policy)) if device.backend.supports_large_pages() => {
                    if thrifty {
                        policy.thrifty_order(reserved, granularity)
                    } else {
                        policy.order(reserved, granularity)
                    }
                }
                _ => 0,
            };
            let mut trial = claims.clone();
            pages = new_pages(&missing, order, &mut trial, |slot| self.chunks.slot_is_free(slot, &block));
            let bytes = self.chunks.bytes(chunk_count(&pages));
            if reserved.saturating_add(bytes) <= cap {
                break;
            }
            // Idle pages the block could not use still count against the cap: unmapping them may make room.
            let short = reserved + bytes - cap;
            if attempt == 1 && self.chunks.bytes(self.chunks.idle_chunks()) >= short {
                self.unmap_idle(device)?;
                let mut trial = claims.clone();
                pages = new_pages(&missing, 0, &mut trial, |slot| self.chunks.slot_is_free(slot, &block));
                let reserved = self.chunks.mapped_bytes() + pending;
                if reserved + self.chunks.bytes(chunk_count(&pages)) > cap {
                    return Ok(Outcome::Refused);
                }
            } else if attempt == 1 {
                return Ok(Outcome::Refused);
            }
        }
        for batch in page_batches(&pages) {
            let run = batch[0].start..batch[batch.len() - 1].end;
            let (addr, bytes) = self.chunks.extent(&run);
            let sizes = self.chunks.page_bytes(batch);
            match device.call(|backend| backend.map_pages(addr, &sizes)) {
                Ok(()) => {}
                Err(err) if err.is_out_of_memory() => return Ok(Outcome::Refused),
                Err(err) => return Err(err),
            }
            for page in batch {
                self.chunks.set_mapped_pages(page.clone(), page.len().ilog2());
            }
            device.counters.add_reserved(bytes);
        }
        self.chunks.count_growth();
        device.counters.rare.growths.fetch_add(1, Ordering::Relaxed);
        Ok(Outcome::Backed)
    }

    /// Moves idle pages under the chunks the block of `short` lacks: those safe to move first, then (on one
    /// stream) those queued work may still use, aliased, or (on several, [`DynamicConfig::wait_for_idle`])
    /// those the device is waited for. Leaves in `short` what the block still lacks.
    fn move_idle_pages(&mut self, short: &mut Shortfall, device: &PoolDevice) -> Result<()> {
        let safe = self.safe_idle_pages(device)?;
        self.move_pages(safe, short, device)?;
        if !short.missing.is_empty() && self.chunks.idle_chunks() > 0 {
            if let Some(stream) = self.alias_stream(device) {
                let busy = self.chunks.idle_pages(usize::MAX, false);
                self.alias_pages(stream, busy, short, device)?;
            } else if self.wait_for_idle {
                let need = chunk_count(&short.missing).min(self.chunks.idle_chunks());
                ReservedCounters::timed(&device.counters.rare.wait_time_ns, || {
                    self.wait_for_idle_chunks(need, device)
                })?;
                let safe = self.chunks.idle_pages(usize::MAX, true);
                self.move_pages(safe, short, device)?;
            }
        }
        Ok(())
    }

    /// Moves the whole idle pages of `sources` (safe to move) under the chunks the block of `short` lacks
    /// that they fit ([`cover`]), in batches; leaves in `short` what it still lacks.
    fn move_pages(&mut self, sources: Vec<Range<usize>>, short: &mut Shortfall, device: &PoolDevice) -> Result<()> {
        if sources.is_empty() {
            return Ok(());
        }
        let moves = self.cover(sources, short);
        let (moved, outcome) = self.transfer_pages(&moves, device, CostModel::remap, |backend, from, to, bytes| {
            backend.remap(from, to, bytes)
        });
        for from in &moved {
            self.chunks.set_mapped(from.clone(), false);
        }
        device.counters.rare.chunks_moved.fetch_add(chunk_count(&moved) as u64, Ordering::Relaxed);
        short.missing = self.chunks.unmapped_runs(short.block.clone());
        outcome
    }

    /// Maps the whole idle pages of `sources`, which work queued on `stream` may still use, under the chunks
    /// the block of `short` lacks that they fit as well ([`cover`]), and retires them from their old
    /// addresses until an event recorded first on `stream` completes; leaves in `short` what it still lacks.
    fn alias_pages(
        &mut self,
        stream: StreamId,
        sources: Vec<Range<usize>>,
        short: &mut Shortfall,
        device: &PoolDevice,
    ) -> Result<()> {
        let moves = self.cover(sources, short);
        if moves.is_empty() {
            return Ok(());
        }
        let event = device.backend.record_event(stream)?;
        self.budget.charge(self.budget.model().record_event_ns);
        device.order.counters.events_recorded.fetch_add(1, Ordering::Relaxed);
        let (aliased, outcome) = self.transfer_pages(&moves, device, CostModel::alias, |backend, from, to, bytes| {
            backend.alias(from, to, bytes)
        });
        device.counters.rare.chunks_aliased.fetch_add(chunk_count(&aliased) as u64, Ordering::Relaxed);
        if aliased.is_empty() {
            device.backend.release_event(event);
        } else {
            self.chunks.retire(aliased, event);
        }
        short.missing = self.chunks.unmapped_runs(short.block.clone());
        outcome
    }

    /// The slots the pages of `sources` take under what the block of `short` lacks ([`cover`]), claimed
    /// there.
    fn cover(&self, sources: Vec<Range<usize>>, short: &mut Shortfall) -> Vec<PageMove> {
        let chunks = &self.chunks;
        cover(sources, &short.missing, &mut short.claims, |slot| chunks.slot_is_free(slot, &short.block))
    }

    /// Gives the pages of `moves` to their slots, a device call (`transfer`: from, to, bytes) per batch,
    /// and records them mapped there; returns the runs they came from (those the calls before a failure
    /// gave), beside the failure's error if one stopped them. Each call is charged to the driver budget at
    /// `price` (per batch of equal pages, [`CostModel::batched`]).
    fn transfer_pages(
        &mut self,
        moves: &[PageMove],
        device: &PoolDevice,
        price: fn(&CostModel, u64, u64) -> u64,
        transfer: impl Fn(&dyn Backend, u64, u64, u64) -> Result<()>,
    ) -> (Vec<Range<usize>>, Result<()>) {
        let mut done = Vec::new();
        for batch in move_batches(moves) {
            let from = batch[0].from.start..batch[batch.len() - 1].from.end;
            let (source, bytes) = self.chunks.extent(&from);
            let target = self.chunks.chunk_addr(batch[0].to);
            if let Err(err) = device.call(|backend| transfer(backend, source, target, bytes)) {
                return (done, Err(err));
            }
            let pages = self.chunks.pages_of(from.clone());
            let sizes = self.chunks.page_bytes(&pages);
            self.budget.charge(self.budget.model().batched(&sizes, price, true));
            self.chunks.set_mapped_like(&pages, batch[0].to);
            self.chunks.count_moved(from.len());
            done.push(from);
        }
        (done, Ok(()))
    }

    /// Rent or buy: whether to map new memory for `need` chunks rather than move idle ones. A move costs
    /// device calls each time a block lands where nothing is mapped; a growth costs memory once. Once the
    /// chunks moved since the last growth add up to what one growth step would add, the space grows (where
    /// the cap allows) instead of moving more, so a workload that keeps landing on unmapped addresses pays
    /// for at most one step of moves per step of growth, and stops paying once the pool is large enough.
    fn prefers_growth(&self, pending: u64, need: usize, device: &PoolDevice) -> bool {
        if self.pages.is_some() {
            return false;
        }
        let reserved = self.chunks.mapped_bytes() + pending;
        let moved = self.chunks.bytes(self.chunks.moved_since_growth());
        self.policy(device).growth(reserved, self.chunks.bytes(need)).is_some_and(|step| moved >= step)
    }

    /// Idle chunks that can be moved without waiting, at most `limit` ([`VirtualSpace::settle_epochs`]).
    fn safe_idle_runs(&mut self, limit: usize, device: &PoolDevice) -> Result<Vec<Range<usize>>> {
        Ok(if self.settle_epochs(device)? { self.chunks.safe_idle_runs(limit) } else { Vec::new() })
    }

    /// Whole idle pages that can be moved without waiting ([`VirtualSpace::settle_epochs`]), highest
    /// addresses first.
    fn safe_idle_pages(&mut self, device: &PoolDevice) -> Result<Vec<Range<usize>>> {
        Ok(if self.settle_epochs(device)? { self.chunks.idle_pages(usize::MAX, true) } else { Vec::new() })
    }

    /// Makes safe the idle chunks known to be: on one stream, those idle since an epoch whose event has
    /// completed. An event is recorded now to end the current epoch, so that on an idle device every idle
    /// chunk is safe at once. False with several streams, where none is (moves wait).
    fn settle_epochs(&mut self, device: &PoolDevice) -> Result<bool> {
        let order = &device.order;
        if order.is_multi_stream() {
            return Ok(false);
        }
        if let Some(stream) = order.only_stream() {
            match device.backend.record_event(stream) {
                Ok(event) => {
                    self.budget.charge(self.budget.model().record_event_ns);
                    self.chunks.end_epoch(event);
                }
                // The stream cannot take an event: treat every recent chunk as still in use.
                Err(_) => return Ok(true),
            }
        }
        self.retire_complete_epochs(device)?;
        Ok(true)
    }

    /// Marks safe the chunks of every ended epoch whose event has completed, and gives those events back.
    fn retire_complete_epochs(&mut self, device: &PoolDevice) -> Result<()> {
        let backend = &*device.backend;
        let mut completed = None;
        for (epoch, event) in self.chunks.epoch_events() {
            self.budget.charge(self.budget.model().query_event_ns);
            if !backend.event_complete(event)? {
                break;
            }
            completed = Some(epoch);
        }
        if let Some(epoch) = completed {
            for event in self.chunks.complete_through(epoch) {
                backend.release_event(event);
            }
        }
        Ok(())
    }

    /// Ends the epoch right after a free that left chunks idle ([`ChunkMap::end_epochs_at_frees`]), on the
    /// pool's one stream, with at most [`MAX_PENDING_EPOCHS`] events outstanding (completed ones are
    /// retired first). A free never fails for this: where no event can be recorded the chunks stay in the
    /// open epoch, to be waited for if they are needed. The device calls' time counts as the pool's device
    /// time; a pool of several streams makes none, and reads no clock (its frees from many threads would
    /// otherwise meet on the shared time counter).
    #[cold]
    fn end_epoch_at_free(&mut self, device: &PoolDevice) {
        let Some(stream) = device.order.only_stream() else { return };
        ReservedCounters::timed(&device.counters.rare.device_time_ns, || {
            if self.chunks.pending_epochs() >= MAX_PENDING_EPOCHS
                && (self.retire_complete_epochs(device).is_err() || self.chunks.pending_epochs() >= MAX_PENDING_EPOCHS)
            {
                return;
            }
            if let Ok(event) = device.backend.record_event(stream) {
                self.chunks.end_epoch(event);
            }
        });
    }

    /// Waits until `need` idle chunks are safe to move. On one stream, for the event of the oldest epoch
    /// that makes them so ([`ChunkMap::epoch_covering`]): the host waits only for the work that last used
    /// them, and the work queued after it keeps the device busy, where a synchronisation would leave it
    /// idle until the program queues more. With several streams, or where no event covers them, for the
    /// whole device.
    fn wait_for_idle_chunks(&mut self, need: usize, device: &PoolDevice) -> Result<()> {
        self.chunks.end_epochs_at_frees();
        if !device.order.is_multi_stream()
            && let Some((epoch, event)) = self.chunks.epoch_covering(need)
        {
            device.backend.wait_event(event)?;
            self.budget.charge(self.budget.model().synchronize_ns);
            device.order.counters.event_waits.fetch_add(1, Ordering::Relaxed);
            for event in self.chunks.complete_through(epoch) {
                device.backend.release_event(event);
            }
            return Ok(());
        }
        self.wait_for_device(device)
    }

    /// Waits for the whole device: every idle chunk becomes safe to move or unmap.
    fn wait_for_device(&mut self, device: &PoolDevice) -> Result<()> {
        device.order.synchronize(&*device.backend)?;
        self.budget.charge(self.budget.model().synchronize_ns);
        for event in self.chunks.device_idle() {
            device.backend.release_event(event);
        }
        Ok(())
    }

    /// Moves the mapped chunks of `sources` (safe to move) under the runs of `missing`, in batches of
    /// contiguous chunks; leaves in `missing` what is still unbacked.
    fn move_chunks(
        &mut self,
        sources: Vec<Range<usize>>,
        missing: &mut Vec<Range<usize>>,
        device: &PoolDevice,
    ) -> Result<()> {
        let chunks = &mut self.chunks;
        pair_runs(sources, missing, |from, to| {
            let (source, bytes) = chunks.extent(&from);
            let target = chunks.chunk_addr(to.start);
            device.call(|backend| backend.remap(source, target, bytes))?;
            chunks.set_mapped(from.clone(), false);
            chunks.set_mapped(to, true);
            device.counters.rare.chunks_moved.fetch_add(from.len() as u64, Ordering::Relaxed);
            chunks.count_moved(from.len());
            Ok(())
        })
    }

    /// The stream on which idle chunks still in use may be aliased to a new block
    /// ([`DynamicConfig::alias_in_use`]): the pool's one stream, where the device supports aliases and
    /// fewer than [`MAX_RETIREMENTS`] batches are retiring.
    fn alias_stream(&self, device: &PoolDevice) -> Option<StreamId> {
        if !self.alias_in_use || !device.backend.supports_alias() || self.chunks.retirements().len() >= MAX_RETIREMENTS
        {
            return None;
        }
        device.order.only_stream()
    }

    /// Maps the idle chunks of `sources`, which work queued on `stream` may still use, under the runs of
    /// `missing` as well, in batches of contiguous chunks, and retires them from their old addresses until
    /// an event recorded first on `stream` completes; leaves in `missing` what is still unbacked.
    fn alias_chunks(
        &mut self,
        stream: StreamId,
        sources: Vec<Range<usize>>,
        missing: &mut Vec<Range<usize>>,
        device: &PoolDevice,
    ) -> Result<()> {
        if sources.is_empty() {
            return Ok(());
        }
        let event = device.backend.record_event(stream)?;
        device.order.counters.events_recorded.fetch_add(1, Ordering::Relaxed);
        let chunks = &mut self.chunks;
        let mut retired = Vec::new();
        let aliased = pair_runs(sources, missing, |from, to| {
            let (source, bytes) = chunks.extent(&from);
            let target = chunks.chunk_addr(to.start);
            device.call(|backend| backend.alias(source, target, bytes))?;
            chunks.set_mapped(to, true);
            device.counters.rare.chunks_aliased.fetch_add(from.len() as u64, Ordering::Relaxed);
            chunks.count_moved(from.len());
            retired.push(from);
            Ok(())
        });
        if retired.is_empty() {
            device.backend.release_event(event);
        } else {
            self.chunks.retire(retired, event);
        }
        aliased
    }

    /// Unmaps retiring chunks from their old addresses: those among `missing` (a block landed on them, and
    /// needs them backed) once the work queued before their alias has run, waiting for it if need be; the
    /// others where that work is known to have run.
    fn unmap_retired(&mut self, missing: &[Range<usize>], device: &PoolDevice) -> Result<()> {
        let needed = self.chunks.retirements_touching(missing);
        // Newest first, so that taking a batch out leaves the positions still to visit as they were.
        for position in (0..self.chunks.retirements().len()).rev() {
            let event = self.chunks.retirements()[position].event;
            let done = if needed.contains(&position) {
                ReservedCounters::timed(&device.counters.rare.wait_time_ns, || device.backend.wait_event(event))?;
                device.order.counters.event_waits.fetch_add(1, Ordering::Relaxed);
                true
            } else {
                device.backend.event_complete(event)?
            };
            if done {
                self.unmap_retirement(position, device)?;
            }
        }
        Ok(())
    }

    /// Unmaps the retiring batch at `position`, whose work has run, from its old addresses: the second half
    /// of an alias's cost, counted in the driver budget with the alias.
    fn unmap_retirement(&mut self, position: usize, device: &PoolDevice) -> Result<()> {
        let retirement = self.chunks.finish_retirement(position);
        device.backend.release_event(retirement.event);
        let mark = self.budget.mark(&*device.backend);
        let unmapped = retirement.runs.into_iter().try_for_each(|run| {
            let (addr, bytes) = self.chunks.extent(&run);
            let sizes = self.chunks.page_bytes(&self.chunks.pages_of(run));
            device.call(|backend| backend.unmap(addr, bytes))?;
            self.budget.charge(self.budget.model().batched(&sizes, CostModel::unmap_only, false));
            Ok(())
        });
        self.budget.spend(&*device.backend, mark);
        unmapped
    }

    /// Unmaps every idle chunk (and every retiring one from its old address), after waiting for the device;
    /// returns the bytes given back.
    pub(super) fn unmap_idle(&mut self, device: &PoolDevice) -> Result<u64> {
        let runs = runs_of(self.chunks.idle_pages(usize::MAX, false));
        if runs.is_empty() && self.chunks.retirements().is_empty() {
            return Ok(0);
        }
        self.wait_for_device(device)?;
        while !self.chunks.retirements().is_empty() {
            self.unmap_retirement(0, device)?;
        }
        let mut released = 0;
        for run in runs {
            let (addr, bytes) = self.chunks.extent(&run);
            device.call(|backend| backend.unmap(addr, bytes))?;
            self.chunks.set_mapped(run, false);
            device.counters.sub_reserved(bytes);
            released += bytes;
        }
        Ok(released)
    }

    /// Plans a growth of `bytes` ahead of need: a stretch of that many bytes carved from `ranges` and held
    /// as a block while the device maps it. Only its chunks not mapped yet are mapped (the device refuses a
    /// chunk mapped twice): a stretch that starts on free mapped chunks grows by the rest. `None` (nothing
    /// held) where no stretch is free, where it is wholly mapped already, or where it touches chunks still
    /// mapped at their old addresses after an alias, which cannot be mapped again yet.
    pub(super) fn plan_ahead(&mut self, ranges: &mut RangeAllocator<FreeTag>, bytes: u64) -> Option<ChunksAhead> {
        let carved = ranges.allocate(bytes, self.chunks.granularity())?;
        let missing = self.chunks.use_span(carved.offset, carved.size);
        if missing.is_empty() || !self.chunks.retirements_touching(&missing).is_empty() {
            self.unplace(ranges, carved);
            return None;
        }
        let runs = missing
            .into_iter()
            .map(|run| {
                let (addr, bytes) = self.chunks.extent(&run);
                (run, addr, bytes)
            })
            .collect();
        Some(ChunksAhead { carved, runs, mapped: Vec::new(), failure: None })
    }

    /// Records what the device mapped of `ahead` and frees its stretch; returns the bytes added, or the
    /// error that stopped the mapping (what was mapped before it is kept).
    pub(super) fn finish_ahead(
        &mut self,
        ranges: &mut RangeAllocator<FreeTag>,
        ahead: ChunksAhead,
        device: &PoolDevice,
    ) -> Result<u64> {
        let mut added = 0;
        for run in ahead.mapped {
            added += self.chunks.bytes(run.len());
            self.chunks.set_mapped(run, true);
        }
        if added > 0 {
            self.chunks.count_growth();
            device.counters.add_reserved(added);
        }
        self.unplace(ranges, ahead.carved);
        if added > 0 {
            device.counters.rare.growths.fetch_add(1, Ordering::Relaxed);
            device.counters.rare.pre_expansions.fetch_add(1, Ordering::Relaxed);
        }
        match ahead.failure {
            Some(err) => Err(err),
            None => Ok(added),
        }
    }

    /// Gives everything back to `backend` when the pool is dropped: waits for the device, then releases the
    /// epochs' events, unmaps the retiring and the mapped chunks, and releases the range. Errors are
    /// dropped: there is no caller to give them to.
    pub(super) fn release(&mut self, backend: &dyn Backend) {
        let _ = backend.synchronize();
        for (_, event) in self.chunks.epoch_events().collect::<Vec<_>>() {
            backend.release_event(event);
        }
        while !self.chunks.retirements().is_empty() {
            let retirement = self.chunks.finish_retirement(0);
            backend.release_event(retirement.event);
            for run in retirement.runs {
                let (addr, bytes) = self.chunks.extent(&run);
                let _ = backend.unmap(addr, bytes);
            }
        }
        for run in self.chunks.mapped_runs() {
            let (addr, bytes) = self.chunks.extent(&run);
            let _ = backend.unmap(addr, bytes);
        }
        let _ = backend.release_range(self.chunks.base(), self.chunks.size());
    }
}

/// What became of a backing with pages the space sizes itself ([`VirtualSpace::back_pages`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Every chunk of the block is backed.
    Backed,
    /// New memory is needed, this many bytes (`u64::MAX`: some), and the pool would rather take its cache's
    /// blocks back first.
    DrainFirst(u64),
    /// The cap or the device refused the memory.
    Refused,
}

/// Pages given highest first, as runs of pages that follow on, highest first.
fn runs_of(pages: Vec<Range<usize>>) -> Vec<Range<usize>> {
    let mut runs: Vec<Range<usize>> = Vec::new();
    for page in pages {
        match runs.last_mut() {
            Some(run) if run.start == page.end => run.start = page.start,
            _ => runs.push(page),
        }
    }
    runs
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
