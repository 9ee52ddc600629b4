//! The interface every strategy implements, and the allocation it hands out.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::buffer::Buffer;
use crate::counters::PoolStats;
use crate::error::Result;
use crate::report::{PoolReport, ReportLimit};
use crate::stream::StreamId;
use crate::units::DEFAULT_ALIGNMENT;

/// Memory handed out by a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Allocation {
    /// The device address of the first byte.
    pub addr: u64,
    /// The bytes requested (the block may be larger).
    pub size: u64,
    /// The stream the allocation belongs to; its free is ordered on this stream.
    pub stream: StreamId,
}

/// A memory pool: the interface the fixed, dynamic and hybrid strategies share.
///
/// Every method is callable from any thread. A call that returns an error leaves the pool exactly as it
/// was.
pub trait Pool: Send + Sync {
    /// The strategy's name: `fixed`, `dynamic` or `hybrid`.
    fn strategy(&self) -> &'static str;

    /// The device the pool takes its memory from.
    fn backend(&self) -> &Arc<dyn Backend>;

    /// Allocates `size` bytes aligned to `alignment` (a power of two; every block is aligned to at least
    /// 256 bytes) for use on `stream`. An alignment larger than any block of the pool can have is
    /// [`Error::AlignmentTooLarge`](crate::Error::AlignmentTooLarge), naming the largest the pool gives.
    fn allocate(&self, size: u64, alignment: u64, stream: StreamId) -> Result<Allocation>;

    /// Frees the allocation that starts at `addr`; the memory can be reused at once on the allocation's
    /// stream and, ordered by an event, on others.
    fn free(&self, addr: u64) -> Result<()>;

    /// The pool's counters.
    fn stats(&self) -> PoolStats;

    /// Every segment and every live block, with the counters.
    fn report(&self) -> PoolReport {
        self.report_within(ReportLimit::ALL)
    }

    /// The report, listing at most `limit`'s segments and live blocks (those at the lowest addresses) and
    /// counting the others ([`PoolReport::segments_left_out`], [`PoolReport::blocks_left_out`]): the memory
    /// it takes grows with the limit, not with what the pool holds. O(n log limit) in the blocks.
    fn report_within(&self, limit: ReportLimit) -> PoolReport;

    /// Gives wholly free memory back to the device; returns the bytes given back.
    fn trim(&self) -> Result<u64>;

    /// Sets the most the pool may hold from the device from now on (PyTorch's per-process memory fraction):
    /// `Some(bytes)` in place of the configured cap, `None` back to the configured cap. Memory held beyond a
    /// lowered limit is kept, but the pool does not grow past it. Returns the limit in force: `bytes` clamped
    /// to what the pool can hold (the device's memory, and a virtual range's size).
    fn set_limit(&self, bytes: Option<u64>) -> Result<u64>;

    /// Starts the peaks of allocated and reserved bytes again from their values now.
    fn reset_peaks(&self);
}

/// Conveniences for every [`Pool`]: default alignment and stream, and buffers that free on drop.
pub trait PoolExt: Pool {
    /// Allocates `size` bytes with the default alignment (256 bytes) on the default stream.
    fn alloc(&self, size: u64) -> Result<Allocation> {
        self.allocate(size, DEFAULT_ALIGNMENT, StreamId::DEFAULT)
    }

    /// A buffer of `size` bytes on the default stream, freed when dropped.
    fn buffer(&self, size: u64) -> Result<Buffer<&Self>> {
        self.buffer_on(size, StreamId::DEFAULT)
    }

    /// A buffer of `size` bytes on `stream`, freed when dropped.
    fn buffer_on(&self, size: u64, stream: StreamId) -> Result<Buffer<&Self>> {
        let allocation = self.allocate(size, DEFAULT_ALIGNMENT, stream)?;
        Ok(Buffer::from_parts(self, allocation))
    }
}

impl<P: Pool + ?Sized> PoolExt for P {}
