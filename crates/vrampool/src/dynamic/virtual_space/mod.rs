//! A dynamic pool's memory on a device with virtual memory: one address range reserved at the start, and
//! physical chunks mapped where blocks land, moved from idle stretches to where they are needed, aliased
//! while queued work still uses them, and unmapped when the pool trims.
//!
//! [`ChunkMap`] keeps the books chunk by chunk; [`VirtualSpace`] makes the device calls and records them
//! there. Every call it makes is counted among the pool's backend calls ([`PoolDevice::call`]).

mod chunk_map;
mod chunk_set;

use std::ops::Range;
use std::sync::atomic::Ordering;

use chunk_map::{ChunkMap, chunk_count};

use super::config::DynamicConfig;
use super::pool_device::PoolDevice;
use super::space::Backing;
use crate::backend::Backend;
use crate::counters::ReservedCounters;
use crate::error::{Error, Result};
use crate::range_allocator::{Carved, RangeAllocator};
use crate::report::{SegmentKind, SegmentReport};
use crate::request::Request;
use crate::stream::StreamId;
use crate::stream_order::FreeTag;
use crate::units::round_up_to;

/// Events a space keeps outstanding at most for epochs ended at frees ([`ChunkMap::end_epochs_at_frees`]).
const MAX_PENDING_EPOCHS: usize = 64;

/// Batches of aliased chunks retiring at once at most ([`DynamicConfig::alias_in_use`]); past it, chunks
/// still in use are waited for or grown around as without aliasing.
const MAX_RETIREMENTS: usize = 64;

/// The most places a block is carved at to find one that touches no retiring chunk
/// ([`VirtualSpace::away_from_retiring`]).
const MAX_PLACES_TRIED: usize = 8;

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
    /// `ranges` then sub-allocates. Nothing is left held on an error.
    pub(super) fn open(
        device: &PoolDevice,
        config: &DynamicConfig,
        granularity: u64,
        initial: u64,
        ranges: &mut RangeAllocator<FreeTag>,
    ) -> Result<Self> {
        let backend = &*device.backend;
        let size = round_up_to(device.configured.cap.saturating_mul(config.address_space_factor), granularity)
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
        ranges.add_region(base, size);
        Ok(VirtualSpace {
            chunks,
            reclaim_idle: config.reclaim_idle,
            wait_for_idle: config.wait_for_idle,
            alias_in_use: config.alias_in_use,
            avoid_retiring: config.avoid_retiring,
        })
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
        let missing = self.chunks.use_span(carved.offset, carved.size);
        if missing.is_empty() {
            return Ok(Backing::Placed(carved));
        }
        let (carved, missing) = self.away_from_retiring(ranges, request, carved, missing, device)?;
        let need = chunk_count(&missing);
        if need > self.chunks.idle_chunks() && !self.prefers_growth(pending, need, device) && drain_first() {
            self.unplace(ranges, carved);
            return Ok(Backing::DrainFirst);
        }
        let backed = ReservedCounters::timed(&device.counters.rare.device_time_ns, || {
            self.back_chunks(pending, missing, device)
        });
        match backed {
            Ok(true) => Ok(Backing::Placed(carved)),
            Ok(false) => {
                self.unplace(ranges, carved);
                Ok(Backing::Refused)
            }
            Err(err) => {
                self.unplace(ranges, carved);
                Err(err)
            }
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
            ReservedCounters::timed(&device.counters.rare.device_time_ns, || self.end_epoch_at_free(device));
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
        let policy = device.policy();
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

    /// Rent or buy: whether to map new memory for `need` chunks rather than move idle ones. A move costs
    /// device calls each time a block lands where nothing is mapped; a growth costs memory once. Once the
    /// chunks moved since the last growth add up to what one growth step would add, the space grows (where
    /// the cap allows) instead of moving more, so a workload that keeps landing on unmapped addresses pays
    /// for at most one step of moves per step of growth, and stops paying once the pool is large enough.
    fn prefers_growth(&self, pending: u64, need: usize, device: &PoolDevice) -> bool {
        let reserved = self.chunks.mapped_bytes() + pending;
        let moved = self.chunks.bytes(self.chunks.moved_since_growth());
        device.policy().growth(reserved, self.chunks.bytes(need)).is_some_and(|step| moved >= step)
    }

    /// Idle chunks that can be moved without waiting, at most `limit`: on one stream, those idle since an
    /// epoch whose event has completed. An event is recorded now to end the current epoch, so that on an
    /// idle device every idle chunk is safe at once. With several streams, none is (moves wait).
    fn safe_idle_runs(&mut self, limit: usize, device: &PoolDevice) -> Result<Vec<Range<usize>>> {
        let order = &device.order;
        if order.is_multi_stream() {
            return Ok(Vec::new());
        }
        if let Some(stream) = order.only_stream() {
            match device.backend.record_event(stream) {
                Ok(event) => self.chunks.end_epoch(event),
                // The stream cannot take an event: treat every recent chunk as still in use.
                Err(_) => return Ok(self.chunks.safe_idle_runs(limit)),
            }
        }
        self.retire_complete_epochs(device)?;
        Ok(self.chunks.safe_idle_runs(limit))
    }

    /// Marks safe the chunks of every ended epoch whose event has completed, and gives those events back.
    fn retire_complete_epochs(&mut self, device: &PoolDevice) -> Result<()> {
        let backend = &*device.backend;
        let mut completed = None;
        for (epoch, event) in self.chunks.epoch_events() {
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
    /// open epoch, to be waited for if they are needed.
    #[cold]
    fn end_epoch_at_free(&mut self, device: &PoolDevice) {
        let Some(stream) = device.order.only_stream() else { return };
        if self.chunks.pending_epochs() >= MAX_PENDING_EPOCHS
            && (self.retire_complete_epochs(device).is_err() || self.chunks.pending_epochs() >= MAX_PENDING_EPOCHS)
        {
            return;
        }
        if let Ok(event) = device.backend.record_event(stream) {
            self.chunks.end_epoch(event);
        }
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

    /// Unmaps the retiring batch at `position`, whose work has run, from its old addresses.
    fn unmap_retirement(&mut self, position: usize, device: &PoolDevice) -> Result<()> {
        let retirement = self.chunks.finish_retirement(position);
        device.backend.release_event(retirement.event);
        for run in retirement.runs {
            let (addr, bytes) = self.chunks.extent(&run);
            device.call(|backend| backend.unmap(addr, bytes))?;
        }
        Ok(())
    }

    /// Unmaps every idle chunk (and every retiring one from its old address), after waiting for the device;
    /// returns the bytes given back.
    pub(super) fn unmap_idle(&mut self, device: &PoolDevice) -> Result<u64> {
        let runs = self.chunks.idle_runs(usize::MAX);
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
