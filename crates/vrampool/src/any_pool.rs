//! A pool of whichever strategy a config string names, called without a vtable.

use std::sync::Arc;

use crate::adaptive::AdaptivePool;
use crate::backend::Backend;
use crate::counters::PoolStats;
use crate::dynamic::DynamicPool;
use crate::error::Result;
use crate::fixed::FixedPool;
use crate::hybrid::HybridPool;
use crate::pool::{Allocation, Pool};
use crate::report::{PoolReport, ReportLimit};
use crate::stream::StreamId;

/// One of the strategies, chosen at run time ([`crate::PoolSpec::build_any`]).
///
/// It is a [`Pool`] like `Arc<dyn Pool>`, but its calls go to the strategy through a `match`, which the
/// compiler can inline into the caller. vrampool's C ABI holds its pools so, for the instructions that saves
/// on every call (docs/BENCHMARKS.md).
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "one per pool, so its size costs nothing; a boxed strategy would cost a pointer chase on every call"
)]
pub enum AnyPool {
    /// A [`FixedPool`].
    Fixed(FixedPool),
    /// A [`DynamicPool`].
    Dynamic(DynamicPool),
    /// A [`HybridPool`].
    Hybrid(HybridPool),
    /// An [`AdaptivePool`].
    Adaptive(AdaptivePool),
}

impl Pool for AnyPool {
    fn strategy(&self) -> &'static str {
        match self {
            AnyPool::Fixed(pool) => pool.strategy(),
            AnyPool::Dynamic(pool) => pool.strategy(),
            AnyPool::Hybrid(pool) => pool.strategy(),
            AnyPool::Adaptive(pool) => pool.strategy(),
        }
    }

    fn backend(&self) -> &Arc<dyn Backend> {
        match self {
            AnyPool::Fixed(pool) => pool.backend(),
            AnyPool::Dynamic(pool) => pool.backend(),
            AnyPool::Hybrid(pool) => pool.backend(),
            AnyPool::Adaptive(pool) => pool.backend(),
        }
    }

    #[inline]
    fn allocate(&self, size: u64, alignment: u64, stream: StreamId) -> Result<Allocation> {
        match self {
            AnyPool::Fixed(pool) => pool.allocate(size, alignment, stream),
            AnyPool::Dynamic(pool) => pool.allocate(size, alignment, stream),
            AnyPool::Hybrid(pool) => pool.allocate(size, alignment, stream),
            AnyPool::Adaptive(pool) => pool.allocate(size, alignment, stream),
        }
    }

    #[inline]
    fn free(&self, addr: u64) -> Result<()> {
        match self {
            AnyPool::Fixed(pool) => pool.free(addr),
            AnyPool::Dynamic(pool) => pool.free(addr),
            AnyPool::Hybrid(pool) => pool.free(addr),
            AnyPool::Adaptive(pool) => pool.free(addr),
        }
    }

    fn set_limit(&self, bytes: Option<u64>) -> Result<u64> {
        match self {
            AnyPool::Fixed(pool) => pool.set_limit(bytes),
            AnyPool::Dynamic(pool) => pool.set_limit(bytes),
            AnyPool::Hybrid(pool) => pool.set_limit(bytes),
            AnyPool::Adaptive(pool) => pool.set_limit(bytes),
        }
    }

    fn reset_peaks(&self) {
        match self {
            AnyPool::Fixed(pool) => pool.reset_peaks(),
            AnyPool::Dynamic(pool) => pool.reset_peaks(),
            AnyPool::Hybrid(pool) => pool.reset_peaks(),
            AnyPool::Adaptive(pool) => pool.reset_peaks(),
        }
    }

    fn stats(&self) -> PoolStats {
        match self {
            AnyPool::Fixed(pool) => pool.stats(),
            AnyPool::Dynamic(pool) => pool.stats(),
            AnyPool::Hybrid(pool) => pool.stats(),
            AnyPool::Adaptive(pool) => pool.stats(),
        }
    }

    fn report_within(&self, limit: ReportLimit) -> PoolReport {
        match self {
            AnyPool::Fixed(pool) => pool.report_within(limit),
            AnyPool::Dynamic(pool) => pool.report_within(limit),
            AnyPool::Hybrid(pool) => pool.report_within(limit),
            AnyPool::Adaptive(pool) => pool.report_within(limit),
        }
    }

    fn trim(&self) -> Result<u64> {
        match self {
            AnyPool::Fixed(pool) => pool.trim(),
            AnyPool::Dynamic(pool) => pool.trim(),
            AnyPool::Hybrid(pool) => pool.trim(),
            AnyPool::Adaptive(pool) => pool.trim(),
        }
    }
}
