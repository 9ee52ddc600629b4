//! The device a dynamic pool draws on, as its spaces see it: the backend, the pool's counters of what it
//! holds and asks, the order of its streams, and its growth rule.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Mutex, MutexGuard};

use super::growth_policy::GrowthPolicy;
use crate::backend::Backend;
use crate::counters::ReservedCounters;
use crate::error::Result;
use crate::stream_order::StreamOrder;

/// What a space needs from its pool to do device work: one per pool, shared by the pool's shards, read by
/// a space under its shard's lock (and by a growth ahead of need outside it).
#[derive(Debug)]
pub(super) struct PoolDevice {
    /// The device.
    pub(super) backend: Arc<dyn Backend>,
    /// Reserved bytes, device calls and their time, and the rare events of the pool.
    pub(super) counters: ReservedCounters,
    /// The streams the pool has seen and the events that order reuse between them; shared with a cache in
    /// front of the pool, so that the tags of cached blocks mean the same in both.
    pub(super) order: Arc<StreamOrder>,
    /// The growth rule the pool was configured with (the cap resolved against the device).
    pub(super) configured: GrowthPolicy,
    /// The cap set at run time in place of the configured one ([`PoolDevice::set_limit`]); `u64::MAX` for
    /// none.
    limit: AtomicU64,
    /// Held while a shard decides to add memory and adds it, so that two shards never both find room under
    /// the cap for the same bytes ([`PoolDevice::lock_growth`]).
    growth: Mutex<()>,
    /// Bytes that growths ahead of need are adding outside every lock, all shards together.
    pending: AtomicU64,
    /// Shards open: 1 until threads contending for the first open more ([`super::shard_set::ShardSet`]).
    shards_open: AtomicUsize,
}

impl PoolDevice {
    /// The device of a pool configured with `configured`, with no limit set.
    pub(super) fn new(
        backend: Arc<dyn Backend>,
        counters: ReservedCounters,
        order: Arc<StreamOrder>,
        configured: GrowthPolicy,
    ) -> Self {
        PoolDevice {
            backend,
            counters,
            order,
            configured,
            limit: AtomicU64::new(u64::MAX),
            growth: Mutex::new(()),
            pending: AtomicU64::new(0),
            shards_open: AtomicUsize::new(1),
        }
    }

    /// Takes the pool's growth lock: held by a shard from deciding to add memory to recording it, and
    /// while a shard is opened. Taken after a shard's lock, never before one.
    pub(super) fn lock_growth(&self) -> MutexGuard<'_, ()> {
        self.growth.lock()
    }

    /// The bytes the pool's other shards hold or are adding, all counted against the one cap, for a shard
    /// that holds or is adding `own` bytes; 0 while one shard is open. Exact with the growth lock held
    /// (no other shard adds memory meanwhile; one that gives memory back only makes more room).
    pub(super) fn held_elsewhere(&self, own: u64) -> u64 {
        if self.shards_open.load(Ordering::Acquire) <= 1 {
            return 0;
        }
        (self.counters.reserved() + self.pending.load(Ordering::Relaxed)).saturating_sub(own)
    }

    /// Counts `bytes` more (`adding`) or fewer being added outside every lock by a growth ahead of need.
    pub(super) fn count_pending(&self, bytes: u64, adding: bool) {
        if adding {
            self.pending.fetch_add(bytes, Ordering::Relaxed);
        } else {
            self.pending.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    /// Counts one more shard open. Called with the growth lock held, once the shard can be found.
    pub(super) fn count_shard_opened(&self) {
        self.shards_open.fetch_add(1, Ordering::Release);
    }

    /// The growth rule in force: the configured one, with the cap set at run time where there is one.
    #[inline]
    pub(super) fn policy(&self) -> GrowthPolicy {
        match self.limit.load(Ordering::Relaxed) {
            u64::MAX => self.configured,
            cap => GrowthPolicy { cap, ..self.configured },
        }
    }

    /// Sets the cap in force to `cap` (`None`: the configured one again).
    pub(super) fn set_limit(&self, cap: Option<u64>) {
        self.limit.store(cap.unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Makes one call of the device's memory functions, `work`, counted among the pool's backend calls
    /// whether it succeeds or not.
    pub(super) fn call<T>(&self, work: impl FnOnce(&dyn Backend) -> Result<T>) -> Result<T> {
        self.counters.count_call();
        work(&*self.backend)
    }
}
