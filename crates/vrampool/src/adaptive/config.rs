//! How an adaptive pool is set up: what a user may still choose, and the dynamic pool it runs as.

use serde::{Deserialize, Serialize};

use crate::dynamic::{Cap, DynamicConfig, PagePolicy, Paging, VirtualMemory};
use crate::error::Result;

/// How an [`crate::AdaptivePool`] is set up: the bounds a user sets (the cap, the device's virtual memory),
/// never how the pool adapts within them.
///
/// The pool runs as a [`DynamicPool`](crate::DynamicPool) ([`AdaptiveConfig::region`]) on one range of
/// virtual addresses:
///
/// - every request is placed in that range, best fit among the places where the fewest pages are missing,
///   so blocks of every size share pages and fill each other's gaps;
/// - the range maps pages it sizes from its own size ([`PagePolicy`], [`Paging::Adaptive`]), and only
///   under blocks: nothing is mapped ahead of need;
/// - before it maps new memory it moves idle pages to where they are needed, within a budget of driver
///   time; pages still in use by queued work are aliased on one stream, and on several grown around
///   rather than waited for ([`DynamicConfig::wait_for_idle`] off): the host waits for the device only
///   where the cap leaves no room to grow.
///
/// It keeps no size classes in front of the range: on workloads the bundled traces do not hold, blocks
/// kept for classes held memory the range needed (docs/BENCHMARKS.md has the figures). A pool that trades
/// memory for the fastest requests is `strategy=hybrid`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdaptiveConfig {
    /// The most the pool may hold. Default: 80% of the device's capacity.
    pub cap: Cap,
    /// Whether to use the device's virtual memory. Default: [`VirtualMemory::Auto`]. Without it the range
    /// grows in segments, by a growth factor of 1.01.
    pub virtual_memory: VirtualMemory,
    /// How large the pages the range maps are. Default: [`PagePolicy::default`].
    pub pages: PagePolicy,
    /// The most shards the range spreads over for threads that allocate at once
    /// ([`DynamicConfig::shards`]). Default: 16.
    #[serde(default = "default_shards")]
    pub shards: usize,
}

/// The default [`AdaptiveConfig::shards`]: the dynamic pool's.
fn default_shards() -> usize {
    DynamicConfig::default().shards
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        AdaptiveConfig {
            cap: Cap::Fraction(0.8),
            virtual_memory: VirtualMemory::Auto,
            pages: PagePolicy::default(),
            shards: default_shards(),
        }
    }
}

impl AdaptiveConfig {
    /// Sets the cap.
    pub fn cap(mut self, cap: Cap) -> Self {
        self.cap = cap;
        self
    }

    /// Sets whether to use virtual memory.
    pub fn virtual_memory(mut self, mode: VirtualMemory) -> Self {
        self.virtual_memory = mode;
        self
    }

    /// Sets the page sizes.
    pub fn pages(mut self, pages: PagePolicy) -> Self {
        self.pages = pages;
        self
    }

    /// Sets the most shards of the region.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }

    /// The dynamic pool the adaptive pool runs as: a growth factor of 1.01 where it grows in segments,
    /// growing around idle pages still in use on several streams rather than waiting for them, with pages
    /// the range sizes itself and no first reservation.
    pub fn region(&self) -> DynamicConfig {
        DynamicConfig {
            initial_size: 0,
            growth_factor: 1.01,
            cap: self.cap,
            virtual_memory: self.virtual_memory,
            wait_for_idle: false,
            paging: Paging::Adaptive(self.pages),
            shards: self.shards,
            ..DynamicConfig::default()
        }
    }

    /// Checks the configuration against a device of `capacity` bytes.
    pub fn validate(&self, capacity: u64) -> Result<()> {
        self.region().validate(capacity).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_region_it_runs_as_maps_only_under_blocks_and_moves_idle_pages() {
        let region = AdaptiveConfig::default().region();
        assert_eq!(region.paging, Paging::Adaptive(PagePolicy::default()));
        assert_eq!(region.initial_size, 0);
        assert_eq!(region.growth_factor, 1.01);
        assert!(region.reclaim_idle && region.alias_in_use);
        assert!(!region.wait_for_idle, "the host waits for the device only at the cap");
        AdaptiveConfig::default().validate(1 << 40).unwrap();
        let err = AdaptiveConfig::default().cap(Cap::Fraction(2.0)).validate(1 << 40).unwrap_err();
        assert!(err.to_string().contains("cap"), "{err}");
    }
}
