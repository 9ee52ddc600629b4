//! The device a dynamic pool draws on, as its spaces see it: the backend, the pool's counters of what it
//! holds and asks, the order of its streams, and its growth rule.

use std::sync::Arc;

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
    /// How much to ask the device for (the cap resolved against the device).
    pub(super) policy: GrowthPolicy,
}

impl PoolDevice {
    /// Makes one call of the device's memory functions, `work`, counted among the pool's backend calls
    /// whether it succeeds or not.
    pub(super) fn call<T>(&self, work: impl FnOnce(&dyn Backend) -> Result<T>) -> Result<T> {
        self.counters.count_call();
        work(&*self.backend)
    }
}
