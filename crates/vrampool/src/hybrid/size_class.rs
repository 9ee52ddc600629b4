//! One size class of the hybrid core: a slab of equal blocks and, on virtual memory, its chunk counters.

use super::slab_chunks::SlabChunks;
use crate::slab::Slab;

/// A size class: the blocks that serve one band of request sizes.
#[derive(Debug)]
pub(crate) struct SizeClass {
    pub(crate) slab: Slab,
    /// On virtual memory: which of the slab's chunks hold live blocks (the slab's memory is shared with the
    /// dynamic region). `None` when the slab is a segment of its own.
    pub(crate) chunks: Option<SlabChunks>,
}

impl SizeClass {
    /// Bytes per block.
    pub(crate) fn block_size(&self) -> u64 {
        self.slab.block_size()
    }
}
