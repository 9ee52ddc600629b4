//! Buffers: allocations that free themselves when dropped.

use std::ops::Deref;

use crate::error::Result;
use crate::pool::{Allocation, Pool};
use crate::stream::StreamId;
use crate::units::DEFAULT_ALIGNMENT;

/// An allocation that is freed when the buffer is dropped.
///
/// `H` is how the buffer reaches its pool: a reference (`Buffer<&DynamicPool>`, from
/// [`crate::PoolExt::buffer`]) or a shared handle (`Buffer<Arc<DynamicPool>>`, from [`Buffer::new`]) for
/// buffers that outlive the scope that made them.
#[derive(Debug)]
pub struct Buffer<H>
where
    H: Deref,
    H::Target: Pool,
{
    pool: H,
    allocation: Allocation,
    owned: bool,
}

impl<H> Buffer<H>
where
    H: Deref,
    H::Target: Pool,
{
    /// Allocates a buffer of `size` bytes on `stream` from the pool behind `pool`.
    pub fn new(pool: H, size: u64, stream: StreamId) -> Result<Self> {
        let allocation = pool.allocate(size, DEFAULT_ALIGNMENT, stream)?;
        Ok(Buffer { pool, allocation, owned: true })
    }

    /// Wraps an allocation of `pool` so that it is freed on drop.
    pub fn from_parts(pool: H, allocation: Allocation) -> Self {
        Buffer { pool, allocation, owned: true }
    }

    /// The device address of the first byte.
    pub fn addr(&self) -> u64 {
        self.allocation.addr
    }

    /// The bytes requested.
    pub fn size(&self) -> u64 {
        self.allocation.size
    }

    /// The stream the buffer belongs to.
    pub fn stream(&self) -> StreamId {
        self.allocation.stream
    }

    /// The allocation behind the buffer.
    pub fn allocation(&self) -> Allocation {
        self.allocation
    }

    /// Gives up ownership without freeing: the caller frees the allocation.
    pub fn into_allocation(mut self) -> Allocation {
        self.owned = false;
        self.allocation
    }
}

impl<H> Drop for Buffer<H>
where
    H: Deref,
    H::Target: Pool,
{
    fn drop(&mut self) {
        // The buffer owns its allocation, so the free cannot be refused for bad input; a device error
        // while giving memory back has no caller to go to, and a drop must not panic.
        if self.owned {
            let _ = self.pool.free(self.allocation.addr);
        }
    }
}
