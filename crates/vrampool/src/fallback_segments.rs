//! Allocations served by a backend segment of their own, outside a pool's main structure.

use std::collections::BTreeMap;

use parking_lot::Mutex;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::report::{BlockReport, Listing, SegmentKind, SegmentReport};
use crate::stream::StreamId;
use crate::units::round_up_to;

/// The bytes a segment that holds `bytes` takes on `backend`: `bytes` rounded up to its segment unit.
pub(crate) fn segment_bytes(backend: &dyn Backend, bytes: u64) -> Result<u64> {
    round_up_to(bytes, backend.segment_unit().max(1)).ok_or(Error::OutOfMemory {
        requested: bytes,
        live: 0,
        reserved: 0,
        cap: backend.capacity(),
    })
}

/// One fallback allocation: its segment and what was asked for.
#[derive(Clone, Copy, Debug)]
struct FallbackSegment {
    span: u64,
    size: u64,
    stream: StreamId,
}

/// The fallback allocations of a pool, each in its own segment, keyed by address.
#[derive(Debug, Default)]
pub(crate) struct FallbackSegments {
    segments: Mutex<BTreeMap<u64, FallbackSegment>>,
}

/// What a fallback free gave back.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FreedFallback {
    pub(crate) span: u64,
    pub(crate) size: u64,
}

impl FallbackSegments {
    /// Allocates a segment for a request spanning `span` bytes (`size` asked for), in whole units of the
    /// backend's [`Backend::segment_unit`]; returns its address and the bytes it holds.
    pub(crate) fn allocate(&self, backend: &dyn Backend, span: u64, size: u64, stream: StreamId) -> Result<(u64, u64)> {
        let span = segment_bytes(backend, span)?;
        let mut segments = self.segments.lock();
        let addr = backend.allocate_segment(span)?;
        segments.insert(addr, FallbackSegment { span, size, stream });
        Ok((addr, span))
    }

    /// Frees the fallback allocation at `addr`; `None` if there is none there. On a device error the
    /// allocation stays.
    pub(crate) fn free(&self, backend: &dyn Backend, addr: u64) -> Option<Result<FreedFallback>> {
        let mut segments = self.segments.lock();
        let segment = *segments.get(&addr)?;
        Some(backend.free_segment(addr, segment.span).map(|()| {
            segments.remove(&addr);
            FreedFallback { span: segment.span, size: segment.size }
        }))
    }

    /// The fallback segment that contains `addr`, as its start address.
    pub(crate) fn containing(&self, addr: u64) -> Option<u64> {
        let segments = self.segments.lock();
        segments.range(..=addr).next_back().filter(|(start, s)| addr < *start + s.span).map(|(start, _)| *start)
    }

    /// The segments and blocks, for a report.
    pub(crate) fn report(&self, segments_out: &mut Listing<SegmentReport>, blocks_out: &mut Listing<BlockReport>) {
        for (&addr, s) in self.segments.lock().iter() {
            segments_out.segment(SegmentReport {
                kind: SegmentKind::Fallback,
                addr,
                size: s.span,
                reserved_bytes: s.span,
            });
            blocks_out.block(BlockReport { addr, size: s.size, block_size: s.span, stream: s.stream, fallback: true });
        }
    }

    /// Frees every segment (when the pool is dropped).
    pub(crate) fn release_all(&self, backend: &dyn Backend) {
        for (addr, s) in std::mem::take(&mut *self.segments.lock()) {
            let _ = backend.free_segment(addr, s.span);
        }
    }
}
