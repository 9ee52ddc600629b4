//! The fixed-size pool: one reservation, equal blocks, an O(1) lock-free free list.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::config::{Fallback, FixedConfig};
use crate::backend::Backend;
use crate::counters::{PoolStats, ReservedCounters, Stat, StatsCounters};
use crate::error::{Error, Result};
use crate::fallback_segments::{FallbackSegments, segment_bytes};
use crate::pool::{Allocation, Pool};
use crate::report::{BlockReport, Listing, PoolReport, ReportLimit, SegmentKind, SegmentReport};
use crate::request::Request;
use crate::slab::Slab;
use crate::stream::StreamId;
use crate::stream_homes::StreamHomes;
use crate::stream_order::StreamOrder;
use crate::thread_slot;

/// Why a request went to the fallback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FallbackReason {
    /// Larger than a block.
    Oversize,
    /// More alignment than a block has.
    Alignment,
    /// Every block taken.
    Exhausted,
}

impl FallbackReason {
    const ALL: [FallbackReason; 3] = [FallbackReason::Oversize, FallbackReason::Alignment, FallbackReason::Exhausted];

    fn name(self) -> &'static str {
        match self {
            FallbackReason::Oversize => "oversize",
            FallbackReason::Alignment => "alignment",
            FallbackReason::Exhausted => "exhausted",
        }
    }
}

/// The seed's fixed-size pool, done right.
///
/// One reservation at construction ([`FixedConfig::block_size`] × [`FixedConfig::block_count`], in whole
/// units of the backend's [`Backend::segment_unit`]), cut into equal blocks. Allocation and free are O(1)
/// and take no lock: each thread keeps the blocks it freed last in a short list of its own and takes them
/// back with one atomic compare-and-swap, the rest on a lock-free stack of its own (taking from the others'
/// stacks and lists when its own are empty), and a block's index is `(addr - base) / block_size`. Each block has a
/// state word, so a second free or a foreign or interior address is an error and never touches the free
/// lists. Requests that no block serves follow [`FixedConfig::fallback`].
#[derive(Debug)]
pub struct FixedPool {
    backend: Arc<dyn Backend>,
    config: FixedConfig,
    reservation: u64,
    slab: Slab,
    fallbacks: FallbackSegments,
    fallback_reasons: [AtomicU64; 3],
    order: StreamOrder,
    /// The thread that allocates on each stream, where the blocks others free for it are kept.
    homes: StreamHomes,
    counters: StatsCounters,
    device: ReservedCounters,
    /// The most the pool may hold, its reservation and fallback segments together, set at run time
    /// ([`Pool::set_limit`]); `u64::MAX` for none (the device's memory).
    limit: AtomicU64,
}

impl FixedPool {
    /// Makes the pool's one reservation on `backend`.
    pub fn new(backend: Arc<dyn Backend>, config: FixedConfig) -> Result<Self> {
        let reservation = segment_bytes(&*backend, config.validate(backend.capacity())?)?;
        let base = backend.allocate_segment(reservation)?;
        let slab = match Slab::new(base, config.block_size, config.block_count as u32) {
            Ok(slab) => slab,
            Err(err) => {
                // The device gets its memory back: a pool that could not be made holds nothing.
                let _ = backend.free_segment(base, reservation);
                return Err(err);
            }
        };
        let device = ReservedCounters::default();
        device.add_reserved(reservation);
        device.count_call();
        Ok(FixedPool {
            backend,
            config,
            reservation,
            slab,
            fallbacks: FallbackSegments::default(),
            fallback_reasons: Default::default(),
            order: StreamOrder::default(),
            homes: StreamHomes::default(),
            counters: StatsCounters::default(),
            device,
            limit: AtomicU64::new(u64::MAX),
        })
    }

    /// The configuration the pool was made with.
    pub fn config(&self) -> &FixedConfig {
        &self.config
    }

    /// The largest alignment a block has.
    pub fn block_alignment(&self) -> u64 {
        self.slab.block_alignment()
    }

    #[cold]
    fn fallback(&self, request: Request, stream: StreamId, reason: FallbackReason) -> Result<Allocation> {
        let block_size = self.config.block_size;
        let capacity = self.backend.capacity();
        if request.span > capacity {
            return Err(self.out_of_memory(request.size, capacity));
        }
        let limit = self.limit.load(Ordering::Relaxed);
        if limit != u64::MAX && request.span > limit.saturating_sub(self.device.reserved()) {
            return Err(self.out_of_memory(request.size, limit));
        }
        if self.config.fallback == Fallback::Reject {
            return Err(match reason {
                FallbackReason::Oversize => {
                    Error::BlockTooSmall { requested: request.size, block_size, fitting_block_size: request.span }
                }
                FallbackReason::Alignment => {
                    Error::AlignmentTooLarge { alignment: request.align, max: self.slab.block_alignment() }
                }
                FallbackReason::Exhausted => self.out_of_memory(request.size, self.reservation),
            });
        }
        let segment_align = self.backend.segment_alignment();
        if request.align > segment_align.max(self.slab.block_alignment()) {
            return Err(Error::AlignmentTooLarge {
                alignment: request.align,
                max: segment_align.max(self.slab.block_alignment()),
            });
        }
        self.device.count_call();
        let (addr, held) = match self.fallbacks.allocate(&*self.backend, request.span, request.size, stream) {
            Ok(segment) => segment,
            Err(err) if err.is_out_of_memory() => return Err(self.out_of_memory(request.size, capacity)),
            Err(err) => return Err(err),
        };
        self.device.add_reserved(held);
        self.device.rare.fallbacks.fetch_add(1, Ordering::Relaxed);
        self.fallback_reasons[reason as usize].fetch_add(1, Ordering::Relaxed);
        self.counters.on_allocate(thread_slot::current(), request.size);
        Ok(Allocation { addr, size: request.size, stream })
    }

    fn out_of_memory(&self, requested: u64, cap: u64) -> Error {
        self.device.rare.ooms.fetch_add(1, Ordering::Relaxed);
        Error::OutOfMemory { requested, live: self.counters.allocated(), reserved: self.device.reserved(), cap }
    }

    #[cold]
    fn free_outside(&self, addr: u64) -> Result<()> {
        match self.fallbacks.free(&*self.backend, addr) {
            Some(Ok(freed)) => {
                self.device.count_call();
                self.device.sub_reserved(freed.span);
                self.counters.on_free(thread_slot::current(), freed.size);
                Ok(())
            }
            Some(Err(err)) => Err(err),
            None => match self.fallbacks.containing(addr) {
                Some(block) => Err(Error::InteriorAddress { addr, block }),
                None => Err(Error::ForeignAddress { addr }),
            },
        }
    }

    /// The common allocation: a block from the calling thread's own list of blocks it freed last, freed on
    /// the same stream. `None`, with nothing changed, for anything else. Kept apart from
    /// [`FixedPool::allocate_any`] so that the common case checks the request with a few comparisons and
    /// touches nothing else (docs/BENCHMARKS.md has what that saves with [`FixedPool::free_hot`]).
    #[inline(always)]
    fn allocate_hot(&self, size: u64, alignment: u64, stream: StreamId) -> Option<u64> {
        // Block sizes are multiples of 256, so `size` fits a block when its 256-byte span does; and a
        // block's alignment is at least 256, so comparing the alignment asked for is enough.
        if size == 0 || size > self.config.block_size || !alignment.is_power_of_two() {
            return None;
        }
        if alignment > self.slab.block_alignment() {
            return None;
        }
        let stream_index = self.order.index_of(stream);
        let slot = thread_slot::current();
        self.homes.note(stream_index, slot);
        let (index, tag) = self.slab.take_hot(slot, stream_index, size)?;
        if !tag.reusable_on(stream_index) {
            // Rare: a block this thread freed on another stream. The general path orders its reuse.
            self.slab.put_back(slot, index, tag);
            return None;
        }
        self.counters.on_allocate(slot, size);
        Some(self.slab.block_addr(index))
    }

    /// Any allocation: checks the request, takes a block from anywhere in the slab, orders its reuse across
    /// streams, or falls back.
    #[inline(never)]
    fn allocate_any(&self, size: u64, alignment: u64, stream: StreamId) -> Result<Allocation> {
        let request = Request::new(size, alignment)?;
        if request.span > self.config.block_size {
            return self.fallback(request, stream, FallbackReason::Oversize);
        }
        if request.align > self.slab.block_alignment() {
            return self.fallback(request, stream, FallbackReason::Alignment);
        }
        let stream_index = self.order.index_of(stream);
        let slot = thread_slot::current();
        self.homes.note(stream_index, slot);
        let Some((index, tag)) = self.slab.take(slot, stream_index, size) else {
            return self.fallback(request, stream, FallbackReason::Exhausted);
        };
        if let Err(err) = self.order.order_reuse(&*self.backend, tag, stream_index) {
            self.slab.put_back(slot, index, tag);
            return Err(err);
        }
        self.counters.on_allocate(slot, size);
        Ok(Allocation { addr: self.slab.block_addr(index), size, stream })
    }

    /// The common free: a live block of the slab, freed while the pool has seen one stream, into the
    /// calling thread's own list. `false`, with nothing changed, for anything else (a bad address
    /// included: [`FixedPool::free_any`] names the error).
    #[inline(always)]
    fn free_hot(&self, addr: u64) -> bool {
        if !self.slab.contains(addr) || self.order.is_multi_stream() {
            return false;
        }
        let Ok(block) = self.slab.live_block(addr) else { return false };
        let tag = self.order.single_stream_tag(block.stream_index());
        let slot = thread_slot::current();
        if !self.slab.release_hot(slot, block, tag, addr) {
            return false;
        }
        self.counters.on_free(slot, block.size());
        true
    }

    /// Any free: a block of the slab (tagged with its stream's sequence number, and kept where the thread
    /// that allocates on its stream takes blocks), a fallback segment, or the error a bad address gets.
    #[inline(never)]
    fn free_any(&self, addr: u64) -> Result<()> {
        if !self.slab.contains(addr) {
            return self.free_outside(addr);
        }
        let block = self.slab.live_block(addr)?;
        let tag = self.order.tag_free(block.stream_index());
        let slot = thread_slot::current();
        self.slab.release(self.homes.keeper(block.stream_index(), slot), block, tag)?;
        self.counters.on_free(slot, block.size());
        Ok(())
    }
}

impl Pool for FixedPool {
    fn strategy(&self) -> &'static str {
        "fixed"
    }

    fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    #[inline]
    fn allocate(&self, size: u64, alignment: u64, stream: StreamId) -> Result<Allocation> {
        match self.allocate_hot(size, alignment, stream) {
            Some(addr) => Ok(Allocation { addr, size, stream }),
            None => self.allocate_any(size, alignment, stream),
        }
    }

    #[inline]
    fn free(&self, addr: u64) -> Result<()> {
        if self.free_hot(addr) { Ok(()) } else { self.free_any(addr) }
    }

    /// The limit bounds the fallback segments: the reservation is made once and kept.
    fn set_limit(&self, bytes: Option<u64>) -> Result<u64> {
        let limit = bytes.unwrap_or(u64::MAX).min(self.backend.capacity());
        self.limit.store(if bytes.is_some() { limit } else { u64::MAX }, Ordering::Relaxed);
        Ok(limit)
    }

    fn reset_peaks(&self) {
        self.counters.reset_peak();
        self.device.reset_peak();
    }

    fn stats(&self) -> PoolStats {
        let reading = self.counters.read();
        let rare = &self.device.rare;
        PoolStats {
            allocated_bytes: Stat { current: reading.allocated, peak: reading.allocated_peak },
            reserved_bytes: Stat { current: self.device.reserved(), peak: self.device.reserved_peak() },
            active_allocations: reading.allocations - reading.frees,
            allocations: reading.allocations,
            frees: reading.frees,
            fallbacks: rare.fallbacks.load(Ordering::Relaxed),
            fallback_reasons: FallbackReason::ALL
                .iter()
                .map(|&r| (r.name().to_string(), self.fallback_reasons[r as usize].load(Ordering::Relaxed)))
                .filter(|&(_, n)| n > 0)
                .collect(),
            ooms: rare.ooms.load(Ordering::Relaxed),
            growths: 0,
            pre_expansions: 0,
            backend_calls: rare.backend_calls.load(Ordering::Relaxed),
            chunks_moved: 0,
            chunks_aliased: 0,
            trimmed_bytes: 0,
            events_recorded: self.order.counters.events_recorded.load(Ordering::Relaxed),
            stream_waits: self.order.counters.stream_waits.load(Ordering::Relaxed),
            synchronizations: self.order.counters.synchronizations.load(Ordering::Relaxed),
            event_waits: self.order.counters.event_waits.load(Ordering::Relaxed),
            device_time_ns: 0,
            wait_time_ns: 0,
        }
    }

    fn report_within(&self, limit: ReportLimit) -> PoolReport {
        let mut segments = Listing::new(limit.segments);
        segments.segment(SegmentReport {
            kind: SegmentKind::Reservation,
            addr: self.slab.base(),
            size: self.reservation,
            reserved_bytes: self.reservation,
        });
        let mut blocks = Listing::new(limit.blocks);
        for (index, size, stream_index) in self.slab.live_blocks() {
            blocks.block(BlockReport {
                addr: self.slab.block_addr(index),
                size,
                block_size: self.config.block_size,
                stream: self.order.stream_of(stream_index),
                fallback: false,
            });
        }
        self.fallbacks.report(&mut segments, &mut blocks);
        PoolReport::listed(self, segments, blocks)
    }

    /// A fixed pool holds its one reservation for its whole life and gives fallback segments back at
    /// free, so there is never wholly free memory to trim: returns 0.
    fn trim(&self) -> Result<u64> {
        Ok(0)
    }
}

impl Drop for FixedPool {
    fn drop(&mut self) {
        self.order.release_all(&*self.backend);
        self.fallbacks.release_all(&*self.backend);
        let _ = self.backend.free_segment(self.slab.base(), self.reservation);
    }
}
