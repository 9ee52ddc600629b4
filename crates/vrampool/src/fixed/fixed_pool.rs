//! The fixed-size pool: one reservation, equal blocks, an O(1) lock-free free list.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use super::config::{Fallback, FixedConfig};
use crate::backend::Backend;
use crate::block_stack::{BlockLinks, BlockStack};
use crate::error::{Error, Result};
use crate::fallback_segments::FallbackSegments;
use crate::pool::{Allocation, Pool};
use crate::report::{BlockReport, PoolReport, SegmentKind, SegmentReport};
use crate::request::Request;
use crate::stats::{PoolStats, Stat};
use crate::stats_counters::StatsCounters;
use crate::stream::StreamId;
use crate::stream_order::{FreeTag, StreamOrder};
use crate::thread_slot::{self, ALL_SLOTS, SHARED_SLOT};

/// A block's state word: the live bit, the stream index and the requested size.
const LIVE: u64 = 1 << 63;
const STREAM_SHIFT: u32 = 56;
const SIZE_MASK: u64 = (1 << STREAM_SHIFT) - 1;

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

/// Per block: its state and, while free, the tag of the stream that freed it.
#[derive(Debug, Default)]
struct BlockSlot {
    state: AtomicU64,
    free_tag: AtomicU64,
}

/// The seed's fixed-size pool, done right.
///
/// One reservation at construction ([`FixedConfig::block_size`] × [`FixedConfig::block_count`]), cut into
/// equal blocks. Allocation and free are O(1) and take no lock: each thread pops and pushes blocks on a
/// lock-free stack of its own (taking from the others' when its own is empty), and a block's index is
/// `(addr - base) / block_size`. Each block has a state word, so a second free or a foreign or interior
/// address is an error and never touches the free lists. Requests that no block serves follow
/// [`FixedConfig::fallback`].
#[derive(Debug)]
pub struct FixedPool {
    backend: Arc<dyn Backend>,
    config: FixedConfig,
    base: u64,
    reservation: u64,
    block_shift: Option<u32>,
    block_align: u64,
    blocks: Box<[BlockSlot]>,
    links: BlockLinks,
    stacks: Box<[CachePadded<BlockStack>]>,
    fallbacks: FallbackSegments,
    fallback_reasons: [AtomicU64; 3],
    order: StreamOrder,
    counters: StatsCounters,
}

impl FixedPool {
    /// Makes the pool's one reservation on `backend`.
    pub fn new(backend: Arc<dyn Backend>, config: FixedConfig) -> Result<Self> {
        let reservation = config.validate(backend.capacity())?;
        let base = backend.allocate_segment(reservation)?;
        let count = config.block_count as usize;
        let links = BlockLinks::new(count);
        let stacks: Box<[CachePadded<BlockStack>]> =
            (0..ALL_SLOTS).map(|_| CachePadded::new(BlockStack::default())).collect();
        for index in (0..count as u32).rev() {
            stacks[SHARED_SLOT].push(&links, index);
        }
        let block_align = 1u64 << base.trailing_zeros().min(config.block_size.trailing_zeros());
        let counters = StatsCounters::default();
        counters.add_reserved(reservation);
        counters.count_call();
        Ok(FixedPool {
            block_shift: config.block_size.is_power_of_two().then(|| config.block_size.trailing_zeros()),
            blocks: (0..count).map(|_| BlockSlot::default()).collect(),
            backend,
            config,
            base,
            reservation,
            block_align,
            links,
            stacks,
            fallbacks: FallbackSegments::default(),
            fallback_reasons: Default::default(),
            order: StreamOrder::default(),
            counters,
        })
    }

    /// The configuration the pool was made with.
    pub fn config(&self) -> &FixedConfig {
        &self.config
    }

    /// The largest alignment a block has.
    pub fn block_alignment(&self) -> u64 {
        self.block_align
    }

    #[inline]
    fn block_addr(&self, index: u32) -> u64 {
        self.base + u64::from(index) * self.config.block_size
    }

    /// The block index of `offset` bytes past the base, and how far into that block it is.
    #[inline]
    fn block_of(&self, offset: u64) -> (u64, u64) {
        match self.block_shift {
            Some(shift) => (offset >> shift, offset & (self.config.block_size - 1)),
            None => (offset / self.config.block_size, offset % self.config.block_size),
        }
    }

    #[inline]
    fn pop_block(&self) -> Option<u32> {
        let (slot, _) = thread_slot::current();
        if let Some(index) = self.stacks[slot].pop(&self.links) {
            return Some(index);
        }
        self.steal_block(slot)
    }

    #[cold]
    fn steal_block(&self, slot: usize) -> Option<u32> {
        if let Some(index) = self.stacks[SHARED_SLOT].pop(&self.links) {
            return Some(index);
        }
        (1..ALL_SLOTS)
            .map(|k| (slot + k) % ALL_SLOTS)
            .filter(|&other| other != SHARED_SLOT && !self.stacks[other].is_empty())
            .find_map(|other| self.stacks[other].pop(&self.links))
    }

    #[inline]
    fn push_block(&self, index: u32) {
        let (slot, _) = thread_slot::current();
        self.stacks[slot].push(&self.links, index);
    }

    #[cold]
    fn fallback(&self, request: Request, stream: StreamId, reason: FallbackReason) -> Result<Allocation> {
        let block_size = self.config.block_size;
        let capacity = self.backend.capacity();
        if request.span > capacity {
            return Err(self.out_of_memory(request.size, capacity));
        }
        if self.config.fallback == Fallback::Reject {
            return Err(match reason {
                FallbackReason::Oversize => {
                    Error::BlockTooSmall { requested: request.size, block_size, fitting_block_size: request.span }
                }
                FallbackReason::Alignment => {
                    Error::AlignmentTooLarge { alignment: request.align, max: self.block_align }
                }
                FallbackReason::Exhausted => self.out_of_memory(request.size, self.reservation),
            });
        }
        let segment_align = self.backend.segment_alignment();
        if request.align > segment_align.max(self.block_align) {
            return Err(Error::AlignmentTooLarge {
                alignment: request.align,
                max: segment_align.max(self.block_align),
            });
        }
        self.counters.count_call();
        let addr = match self.fallbacks.allocate(&*self.backend, request.span, request.size, stream) {
            Ok(addr) => addr,
            Err(err) if err.is_out_of_memory() => return Err(self.out_of_memory(request.size, capacity)),
            Err(err) => return Err(err),
        };
        self.counters.add_reserved(request.span);
        self.counters.rare.fallbacks.fetch_add(1, Ordering::Relaxed);
        self.fallback_reasons[reason as usize].fetch_add(1, Ordering::Relaxed);
        self.counters.on_allocate(request.size);
        Ok(Allocation { addr, size: request.size, stream })
    }

    fn out_of_memory(&self, requested: u64, cap: u64) -> Error {
        self.counters.rare.ooms.fetch_add(1, Ordering::Relaxed);
        Error::OutOfMemory { requested, live: self.counters.allocated(), reserved: self.counters.reserved(), cap }
    }

    #[cold]
    fn free_outside(&self, addr: u64) -> Result<()> {
        match self.fallbacks.free(&*self.backend, addr) {
            Some(Ok(freed)) => {
                self.counters.count_call();
                self.counters.sub_reserved(freed.span);
                self.counters.on_free(freed.size);
                Ok(())
            }
            Some(Err(err)) => Err(err),
            None => match self.fallbacks.containing(addr) {
                Some(block) => Err(Error::InteriorAddress { addr, block }),
                None => Err(Error::ForeignAddress { addr }),
            },
        }
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
        let request = Request::new(size, alignment)?;
        if request.span > self.config.block_size {
            return self.fallback(request, stream, FallbackReason::Oversize);
        }
        if request.align > self.block_align {
            return self.fallback(request, stream, FallbackReason::Alignment);
        }
        let stream_index = self.order.index_of(stream);
        let Some(index) = self.pop_block() else {
            return self.fallback(request, stream, FallbackReason::Exhausted);
        };
        let block = &self.blocks[index as usize];
        let tag = FreeTag::unpack_single(block.free_tag.load(Ordering::Relaxed));
        if let Err(err) = self.order.order_reuse(&*self.backend, tag, stream_index) {
            self.push_block(index);
            return Err(err);
        }
        block.state.store(LIVE | ((stream_index as u64) << STREAM_SHIFT) | size, Ordering::Relaxed);
        self.counters.on_allocate(size);
        Ok(Allocation { addr: self.block_addr(index), size, stream })
    }

    #[inline]
    fn free(&self, addr: u64) -> Result<()> {
        let Some(offset) = addr.checked_sub(self.base).filter(|&offset| offset < self.reservation) else {
            return self.free_outside(addr);
        };
        let (index, within) = self.block_of(offset);
        if within != 0 {
            return Err(Error::InteriorAddress { addr, block: addr - within });
        }
        let block = &self.blocks[index as usize];
        let state = block.state.load(Ordering::Relaxed);
        if state & LIVE == 0 {
            return Err(Error::NotLive { addr });
        }
        let stream_index = ((state & !LIVE) >> STREAM_SHIFT) as usize;
        let tag = self.order.tag_free(&*self.backend, stream_index)?;
        if block.state.compare_exchange(state, 0, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            // Another thread freed it first.
            return Err(Error::NotLive { addr });
        }
        block.free_tag.store(tag.pack_single(), Ordering::Relaxed);
        self.push_block(index as u32);
        self.counters.on_free(state & SIZE_MASK);
        Ok(())
    }

    fn stats(&self) -> PoolStats {
        let reading = self.counters.read();
        let rare = &self.counters.rare;
        PoolStats {
            allocated_bytes: Stat { current: reading.allocated, peak: reading.allocated_peak },
            reserved_bytes: Stat { current: reading.reserved, peak: reading.reserved_peak },
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
            backend_calls: rare.backend_calls.load(Ordering::Relaxed),
            chunks_moved: 0,
            trimmed_bytes: 0,
            events_recorded: self.order.counters.events_recorded.load(Ordering::Relaxed),
            stream_waits: self.order.counters.stream_waits.load(Ordering::Relaxed),
            synchronizations: self.order.counters.synchronizations.load(Ordering::Relaxed),
        }
    }

    fn report(&self) -> PoolReport {
        let mut segments = vec![SegmentReport {
            kind: SegmentKind::Reservation,
            addr: self.base,
            size: self.reservation,
            reserved_bytes: self.reservation,
        }];
        let mut blocks: Vec<BlockReport> = self
            .blocks
            .iter()
            .enumerate()
            .filter_map(|(index, block)| {
                let state = block.state.load(Ordering::Relaxed);
                (state & LIVE != 0).then(|| BlockReport {
                    addr: self.block_addr(index as u32),
                    size: state & SIZE_MASK,
                    block_size: self.config.block_size,
                    stream: self.order.stream_of(((state & !LIVE) >> STREAM_SHIFT) as usize),
                    fallback: false,
                })
            })
            .collect();
        self.fallbacks.report(&mut segments, &mut blocks);
        segments.sort_by_key(|s| s.addr);
        blocks.sort_by_key(|b| b.addr);
        PoolReport {
            strategy: self.strategy().into(),
            backend: self.backend.name(),
            stats: self.stats(),
            segments,
            blocks,
        }
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
        let _ = self.backend.free_segment(self.base, self.reservation);
    }
}
