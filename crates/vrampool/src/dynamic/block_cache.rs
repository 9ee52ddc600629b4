//! Free blocks held by a cache in front of a dynamic pool (the hybrid's size classes), which the pool
//! takes back when it runs short of memory.

use crate::stream_order::FreeTag;

/// A holder of free blocks carved from a dynamic pool: the pool asks it to give them back, with the tags of
/// the streams that freed them, before it gives up on a request (and, where the cache asked for that,
/// before it asks the device for more memory).
pub(crate) trait BlockCache: Send + Sync + std::fmt::Debug {
    /// Gives up cached free blocks holding at least `bytes` in all, the largest first (every one for
    /// `u64::MAX`, or where they hold fewer): `(address, tag)` of each; the pool frees them.
    fn drain(&self, bytes: u64) -> Vec<(u64, FreeTag)>;

    /// Whether no block is cached (a hint: blocks may be cached at any time).
    fn is_empty(&self) -> bool;
}
