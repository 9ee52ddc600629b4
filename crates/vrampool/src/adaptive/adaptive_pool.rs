//! The adaptive pool: a dynamic pool set up by [`AdaptiveConfig`], under a name of its own.

use std::sync::Arc;

use super::config::AdaptiveConfig;
use crate::backend::Backend;
use crate::counters::PoolStats;
use crate::dynamic::DynamicPool;
use crate::error::Result;
use crate::pool::{Allocation, Pool};
use crate::report::{PoolReport, ReportLimit};
use crate::stream::StreamId;

/// vrampool's default pool: one range of virtual addresses that sizes its own pages, places each block
/// where the fewest pages are missing, and moves idle pages under it before it maps new memory
/// ([`AdaptiveConfig`] says how).
///
/// Every call goes to the [`DynamicPool`] it runs as; its reports name it `adaptive`.
#[derive(Debug)]
pub struct AdaptivePool {
    config: AdaptiveConfig,
    region: DynamicPool,
}

impl AdaptivePool {
    /// Makes the pool on `backend`.
    pub fn new(backend: Arc<dyn Backend>, config: AdaptiveConfig) -> Result<Self> {
        let region = DynamicPool::new(backend, config.region())?;
        Ok(AdaptivePool { config, region })
    }

    /// The configuration the pool was made with.
    pub fn config(&self) -> &AdaptiveConfig {
        &self.config
    }

    /// The dynamic pool it runs as.
    pub fn region(&self) -> &DynamicPool {
        &self.region
    }
}

impl Pool for AdaptivePool {
    fn strategy(&self) -> &'static str {
        "adaptive"
    }

    fn backend(&self) -> &Arc<dyn Backend> {
        self.region.backend()
    }

    #[inline]
    fn allocate(&self, size: u64, alignment: u64, stream: StreamId) -> Result<Allocation> {
        self.region.allocate(size, alignment, stream)
    }

    #[inline]
    fn free(&self, addr: u64) -> Result<()> {
        self.region.free(addr)
    }

    fn stats(&self) -> PoolStats {
        self.region.stats()
    }

    fn report_within(&self, limit: ReportLimit) -> PoolReport {
        let mut report = self.region.report_within(limit);
        report.strategy = self.strategy().into();
        report
    }

    fn trim(&self) -> Result<u64> {
        self.region.trim()
    }

    fn set_limit(&self, bytes: Option<u64>) -> Result<u64> {
        self.region.set_limit(bytes)
    }

    fn reset_peaks(&self) {
        self.region.reset_peaks()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimDevice;
    use crate::units::MIB;

    #[test]
    fn it_serves_frees_and_names_itself() {
        let pool = AdaptivePool::new(Arc::new(SimDevice::default()), AdaptiveConfig::default()).unwrap();
        assert_eq!(pool.stats().reserved_bytes.current, 0, "nothing is mapped before a block needs it");
        let a = pool.allocate(3 * MIB, 256, StreamId::DEFAULT).unwrap();
        assert!(pool.stats().reserved_bytes.current >= 3 * MIB);
        assert_eq!(pool.report().strategy, "adaptive");
        pool.free(a.addr).unwrap();
        assert!(pool.free(a.addr).is_err());
        assert_eq!(pool.stats().allocated_bytes.current, 0);
    }
}
