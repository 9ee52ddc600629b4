//! The device a dynamic pool draws on, as its spaces see it: the backend, the pool's counters of what it
//! holds and asks, the order of its streams, and its growth rule.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::growth_policy::GrowthPolicy;
use crate::backend::Backend;
use crate::counters::ReservedCounters;
use crate::error::Result;
use crate::stream_order::StreamOrder;

/// What a space needs from its pool to do device work: one per pool, read by the space under the pool's
/// lock (and by a growth ahead of need outside it).
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
}

impl PoolDevice {
    /// The device of a pool configured with `configured`, with no limit set.
    pub(super) fn new(
        backend: Arc<dyn Backend>,
        counters: ReservedCounters,
        order: Arc<StreamOrder>,
        configured: GrowthPolicy,
    ) -> Self {
        PoolDevice { backend, counters, order, configured, limit: AtomicU64::new(u64::MAX) }
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
