//! How an adaptive pool is set up: what a user may still choose, and the hybrid pool it runs as.

use serde::{Deserialize, Serialize};

use crate::dynamic::{Cap, DynamicConfig, PagePolicy, Paging, VirtualMemory};
use crate::error::Result;
use crate::hybrid::HybridConfig;

/// How an [`crate::AdaptivePool`] is set up: the bounds a user sets (the cap, the device's virtual memory),
/// never how the pool adapts within them.
///
/// The pool runs as a [`HybridPool`](crate::HybridPool) ([`AdaptiveConfig::hybrid`]):
///
/// - its size classes are learned from the first requests, as the hybrid's are, and serve the common
///   sizes in O(1) without a lock;
/// - the classes keep their free blocks only while the region has the memory to spare: before the region
///   maps new memory, they give every free block back ([`HybridConfig::drain_before_growth`]), and their
///   blocks are carved apart from the region's own, so that a block a class holds never sits on the pages
///   the region's blocks need;
/// - the region maps pages it sizes from its own size ([`PagePolicy`], [`Paging::Adaptive`]), places each
///   block where the fewest pages are missing, and moves idle pages to where they are needed before it
///   maps any new memory; pages still in use by queued work are aliased on one stream, waited for on
///   several ([`DynamicConfig::wait_for_idle`]);
/// - nothing is grown ahead of need (the hybrid's watermark is off): memory is mapped only under blocks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdaptiveConfig {
    /// The most the pool may hold. Default: 80% of the device's capacity.
    pub cap: Cap,
    /// Whether to use the device's virtual memory. Default: [`VirtualMemory::Auto`]. Without it the region
    /// grows in segments, by the hybrid region's growth factor.
    pub virtual_memory: VirtualMemory,
    /// How large the pages the region maps are. Default: [`PagePolicy::default`].
    pub pages: PagePolicy,
    /// Grow ahead of need and give blocks back on the allocating thread, so that replays repeat exactly.
    /// Default: false.
    pub deterministic: bool,
    /// The most shards the region spreads over for threads that allocate at once
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
            deterministic: false,
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

    /// Sets whether background work runs on the allocating thread.
    pub fn deterministic(mut self, deterministic: bool) -> Self {
        self.deterministic = deterministic;
        self
    }

    /// The region: the hybrid's (a growth factor of 1.01 where it grows in segments, waiting for idle
    /// pages still in use on several streams), with pages the region sizes itself and no first reservation.
    pub fn region(&self) -> DynamicConfig {
        DynamicConfig {
            initial_size: 0,
            cap: self.cap,
            virtual_memory: self.virtual_memory,
            paging: Paging::Adaptive(self.pages),
            shards: self.shards,
            ..HybridConfig::default().dynamic
        }
    }

    /// The hybrid pool the adaptive pool runs as.
    pub fn hybrid(&self) -> HybridConfig {
        HybridConfig {
            drain_before_growth: true,
            watermark: 1.0,
            deterministic: self.deterministic,
            dynamic: self.region(),
            ..HybridConfig::default()
        }
    }

    /// Checks the configuration against a device of `capacity` bytes.
    pub fn validate(&self, capacity: u64) -> Result<()> {
        let hybrid = self.hybrid();
        hybrid.validate()?;
        hybrid.dynamic.validate(capacity).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hybrid_it_runs_as_gives_blocks_back_before_growing_and_never_grows_ahead() {
        let hybrid = AdaptiveConfig::default().hybrid();
        assert!(hybrid.drain_before_growth);
        assert_eq!(hybrid.watermark, 1.0, "the share in use never passes 1");
        assert_eq!(hybrid.dynamic.paging, Paging::Adaptive(PagePolicy::default()));
        assert_eq!(hybrid.dynamic.initial_size, 0);
        assert!(hybrid.dynamic.wait_for_idle && hybrid.dynamic.alias_in_use);
        AdaptiveConfig::default().validate(1 << 40).unwrap();
        let err = AdaptiveConfig::default().cap(Cap::Fraction(2.0)).validate(1 << 40).unwrap_err();
        assert!(err.to_string().contains("cap"), "{err}");
    }
}
