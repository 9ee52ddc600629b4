//! Chunks that another structure sharing a dynamic pool's range can give up when the pool needs memory.

/// Something that holds mapped chunks of a dynamic pool's virtual range (a hybrid pool's slabs) and can
/// give up those that hold no live block.
///
/// [`ChunkDonor::claim_idle`] is called with the pool's lock held, before the pool asks the device for new
/// memory; a claimed chunk stays claimed (its owner backs it again through the pool before reuse) unless
/// [`ChunkDonor::unclaim`] hands it back unchanged.
pub trait ChunkDonor: Send + Sync + std::fmt::Debug {
    /// Claims up to `limit` chunks that hold no live block; returns their addresses.
    fn claim_idle(&self, limit: usize) -> Vec<u64>;

    /// Returns claimed chunks that were not taken after all.
    fn unclaim(&self, chunks: &[u64]);
}
