//! Where a dynamic pool's memory comes from, behind one set of verbs: a virtual range grown in place
//! ([`VirtualSpace`]) or separate segments ([`SegmentSpace`]). Each does its own device work; the pool
//! keeps its blocks' records and decides when to call which verb.

use super::config::{DynamicConfig, VirtualMemory};
use super::pool_device::PoolDevice;
use super::segment_space::{SegmentAhead, SegmentSpace};
use super::virtual_space::{ChunksAhead, VirtualSpace};
use crate::backend::Backend;
use crate::error::Result;
use crate::range_allocator::{Carved, RangeAllocator};
use crate::report::SegmentReport;
use crate::request::Request;
use crate::stream_order::FreeTag;

/// A dynamic pool's memory: a virtual range or segments.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "one per pool, so its size costs nothing; a boxed virtual space would cost a pointer chase on every \
              region allocation"
)]
pub(super) enum Space {
    /// Separate segments.
    Segments(SegmentSpace),
    /// One virtual address range.
    Virtual(VirtualSpace),
}

/// What became of a place carved for a block ([`Space::back`]).
#[derive(Debug)]
pub(super) enum Backing {
    /// The block is placed there (perhaps carved elsewhere than first), its memory backed.
    Placed(Carved<FreeTag>),
    /// Backing it needs new memory, this many bytes (`u64::MAX`: some), and the pool would rather take its
    /// cache's blocks back first: the place was given up.
    DrainFirst(u64),
    /// The cap or the device refused the memory: the place was given up.
    Refused,
}

/// A growth ahead of need ([`Space::plan_ahead`]): planned under the pool's lock, made by the device outside
/// it ([`GrowthAhead::make`]), recorded under the lock again ([`Space::finish_ahead`]).
#[derive(Debug)]
pub(super) enum GrowthAhead {
    /// A new segment.
    Segment(SegmentAhead),
    /// Chunks mapped in a virtual range.
    Chunks(ChunksAhead),
}

impl GrowthAhead {
    /// The bytes being added: counted against the cap while the lock is not held.
    pub(super) fn pending_bytes(&self) -> u64 {
        match self {
            GrowthAhead::Segment(segment) => segment.pending_bytes(),
            GrowthAhead::Chunks(chunks) => chunks.pending_bytes(),
        }
    }

    /// Asks the device for the memory. Called without the pool's lock.
    pub(super) fn make(&mut self, device: &PoolDevice) {
        match self {
            GrowthAhead::Segment(segment) => segment.allocate(device),
            GrowthAhead::Chunks(chunks) => chunks.map(device),
        }
    }
}

impl Space {
    /// The space `config` asks for on `device`, holding `initial` bytes (a multiple of the growth unit),
    /// which `ranges` then sub-allocates: a virtual range in chunks of `granularity` bytes where that is
    /// `Some`, else segments. A virtual range with pages the pool sizes itself keeps addresses apart for
    /// the blocks carved for a cache in front of the pool, in `carve_ranges`
    /// ([`VirtualSpace::open`]).
    pub(super) fn open(
        device: &PoolDevice,
        config: &DynamicConfig,
        granularity: Option<u64>,
        initial: u64,
        ranges: &mut RangeAllocator<FreeTag>,
        carve_ranges: &mut Option<RangeAllocator<FreeTag>>,
    ) -> Result<Self> {
        Ok(match granularity {
            Some(granularity) => {
                Space::Virtual(VirtualSpace::open(device, config, granularity, initial, ranges, carve_ranges)?)
            }
            None => Space::Segments(SegmentSpace::open(device, initial, ranges)?),
        })
    }

    /// The granularity a pool with `config` maps at on `backend`, or `None` for segments.
    pub(super) fn granularity(config: &DynamicConfig, backend: &dyn Backend) -> Option<u64> {
        match config.virtual_memory {
            VirtualMemory::Auto => backend.granularity(),
            VirtualMemory::Off => None,
        }
    }

    /// The bytes of address space a virtual range reserved (the most it can ever map); `None` for
    /// segments, which take new addresses as they grow.
    pub(super) fn address_space(&self) -> Option<u64> {
        match self {
            Space::Segments(_) => None,
            Space::Virtual(space) => Some(space.report().size),
        }
    }

    /// The bytes the space holds from the device: its mapped chunks, or its segments.
    pub(super) fn reserved_bytes(&self) -> u64 {
        match self {
            Space::Segments(segments) => segments.reserved_bytes(),
            Space::Virtual(space) => space.report().reserved_bytes,
        }
    }

    /// The virtual range's first address and bytes; `None` for segments, whose addresses are the device's.
    pub(super) fn range(&self) -> Option<(u64, u64)> {
        match self {
            Space::Segments(_) => None,
            Space::Virtual(space) => Some(space.range()),
        }
    }

    /// Whether the space is one virtual range: all its addresses reserved at the start, it grows by mapping
    /// memory under them, so no growth adds addresses.
    pub(super) fn grows_in_place(&self) -> bool {
        matches!(self, Space::Virtual(_))
    }

    /// Whether `addr` lies in the space's addresses.
    pub(super) fn contains(&self, addr: u64) -> bool {
        match self {
            Space::Virtual(space) => space.contains(addr),
            Space::Segments(segments) => segments.contains(addr),
        }
    }

    /// The stretches of memory the space holds, for the pool's report, in address order.
    pub(super) fn report(&self) -> Vec<SegmentReport> {
        match self {
            Space::Virtual(space) => vec![space.report()],
            Space::Segments(segments) => segments.report(),
        }
    }

    /// Backs a block of `request` carved at `carved` ([`VirtualSpace::back`]); a segment's place is backed
    /// already.
    pub(super) fn back(
        &mut self,
        ranges: &mut RangeAllocator<FreeTag>,
        carved: Carved<FreeTag>,
        request: Request,
        pending: u64,
        device: &PoolDevice,
        drain_first: impl FnOnce() -> bool,
    ) -> Result<Backing> {
        match self {
            Space::Virtual(space) => space.back(ranges, carved, request, pending, device, drain_first),
            Space::Segments(_) => Ok(Backing::Placed(carved)),
        }
    }

    /// Gives back a place carved for a block that will not be handed out, with no device work.
    pub(super) fn unplace(&mut self, ranges: &mut RangeAllocator<FreeTag>, carved: Carved<FreeTag>) {
        match self {
            Space::Virtual(space) => space.unplace(ranges, carved),
            Space::Segments(_) => ranges.free(carved.node, carved.tag),
        }
    }

    /// Forgets a freed block on `[offset, offset + span)`, whose addresses the pool gave back already.
    pub(super) fn release_span(&mut self, offset: u64, span: u64, device: &PoolDevice) {
        if let Space::Virtual(space) = self {
            space.release_span(offset, span, device);
        }
    }

    /// Adds addresses that hold `need` bytes ([`SegmentSpace::grow`]); false when the cap or the device
    /// refuses them, and always for a virtual range, whose addresses are fixed.
    pub(super) fn grow(
        &mut self,
        ranges: &mut RangeAllocator<FreeTag>,
        need: u64,
        pending: u64,
        device: &PoolDevice,
    ) -> Result<bool> {
        match self {
            Space::Segments(segments) => segments.grow(ranges, need, pending, device),
            Space::Virtual(_) => Ok(false),
        }
    }

    /// Gives memory no block uses back to the device: a virtual range's idle chunks, or wholly free
    /// segments. Returns the bytes given back.
    pub(super) fn trim(&mut self, ranges: &mut RangeAllocator<FreeTag>, device: &PoolDevice) -> Result<u64> {
        match self {
            Space::Virtual(space) => space.unmap_idle(device),
            Space::Segments(segments) => segments.free_unused(ranges, device),
        }
    }

    /// Plans a growth of `bytes` ahead of need; `None` where there is nothing to grow.
    pub(super) fn plan_ahead(&mut self, ranges: &mut RangeAllocator<FreeTag>, bytes: u64) -> Option<GrowthAhead> {
        match self {
            Space::Virtual(space) => space.plan_ahead(ranges, bytes).map(GrowthAhead::Chunks),
            Space::Segments(segments) => Some(GrowthAhead::Segment(segments.plan_ahead(bytes))),
        }
    }

    /// Records a growth ahead of need the device made; returns the bytes added.
    pub(super) fn finish_ahead(
        &mut self,
        ranges: &mut RangeAllocator<FreeTag>,
        ahead: GrowthAhead,
        device: &PoolDevice,
    ) -> Result<u64> {
        match (self, ahead) {
            (Space::Virtual(space), GrowthAhead::Chunks(chunks)) => space.finish_ahead(ranges, chunks, device),
            (Space::Segments(segments), GrowthAhead::Segment(segment)) => {
                segments.finish_ahead(ranges, segment, device)
            }
            _ => unreachable!("a growth ahead is planned and finished by the same space"),
        }
    }

    /// Gives everything the space holds back to `backend` when the pool is dropped.
    pub(super) fn release(&mut self, backend: &dyn Backend) {
        match self {
            Space::Virtual(space) => space.release(backend),
            Space::Segments(segments) => segments.release(backend),
        }
    }
}
