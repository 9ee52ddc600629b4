//! How a dynamic pool is set up.

use serde::{Deserialize, Serialize};

use super::page_policy::PagePolicy;
use super::shard_set::MAX_SHARDS;
use crate::error::{Error, Result};
use crate::units::MIB;

/// The most a pool may hold from the device.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cap {
    /// A fraction of the device's capacity, in (0, 1].
    Fraction(f64),
    /// A number of bytes.
    Bytes(u64),
}

impl Cap {
    /// The cap in bytes on a device of `capacity` bytes.
    pub fn bytes(self, capacity: u64) -> u64 {
        match self {
            Cap::Fraction(fraction) => (capacity as f64 * fraction) as u64,
            Cap::Bytes(bytes) => bytes.min(capacity),
        }
    }
}

/// Whether a dynamic pool uses the device's virtual memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VirtualMemory {
    /// Where the device has it (the default): one address range, grown in place.
    #[default]
    Auto,
    /// Never: separate segments.
    Off,
}

/// Which physical pages a dynamic pool maps on virtual memory, and how it grows there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Paging {
    /// The device's own pages (its granularity, or the page size its front end opened it with), grown by
    /// [`DynamicConfig::growth_factor`]; idle pages are moved before new memory is mapped, up to one growth
    /// step's worth between two growths. The default.
    #[default]
    Device,
    /// Pages the pool sizes as it runs ([`PagePolicy`]): a block is placed where it needs the fewest pages
    /// backed, idle pages are moved before any new memory is mapped, and new memory is mapped a page at a
    /// time, as blocks need it (no growth factor).
    Adaptive(PagePolicy),
}

/// How a [`crate::DynamicPool`] is set up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DynamicConfig {
    /// Bytes reserved at construction (rounded up to the granularity). Default: 256 MiB.
    pub initial_size: u64,
    /// Each growth multiplies the reserved bytes by this factor until the new memory holds the request;
    /// must be above 1.0. Default: 1.5.
    pub growth_factor: f64,
    /// The most the pool may hold. Default: 80% of the device's capacity.
    pub cap: Cap,
    /// Whether to use the device's virtual memory. Default: [`VirtualMemory::Auto`].
    pub virtual_memory: VirtualMemory,
    /// With virtual memory: before asking the device for new physical memory, move chunks that sit idle
    /// under wholly free stretches to where they are needed, up to one growth step's worth of chunks
    /// between two growths. Default: true.
    pub reclaim_idle: bool,
    /// With virtual memory and [`DynamicConfig::reclaim_idle`]: when chunks sit idle but
    /// queued work may still use them, and they cannot be aliased ([`DynamicConfig::alias_in_use`]), wait
    /// for the device (the CPU gives up its lead over the GPU) and move them, rather than map new memory
    /// around them. Default: false (chunks still in use are grown around).
    pub wait_for_idle: bool,
    /// With virtual memory and [`DynamicConfig::reclaim_idle`], on a pool used from one stream, where the
    /// device supports it: idle chunks that queued work may still use are given to the new block at once
    /// by mapping their physical memory at its address as well, and unmapped from their old address once
    /// the work queued before has run. The new block's work is queued after that work on the same stream,
    /// as when a caching allocator reuses a freed block, so neither the wait of
    /// [`DynamicConfig::wait_for_idle`] nor the new memory of growing around is needed. The old addresses
    /// stay unusable until then: a block that lands there waits for that work first. Default: true.
    #[serde(default = "default_alias_in_use")]
    pub alias_in_use: bool,
    /// With [`DynamicConfig::alias_in_use`]: a block that lands on old addresses still waiting for their
    /// queued work (where backing it would wait for that work) is carved elsewhere, where its new place
    /// needs no more chunks backed than the first did; it waits only where no such place is found among a
    /// few. Default: true.
    #[serde(default = "default_avoid_retiring")]
    pub avoid_retiring: bool,
    /// With virtual memory: the address space reserved, as a multiple of the cap (room for
    /// fragmentation of addresses, which cost nothing unmapped). Default: 2.
    pub address_space_factor: u64,
    /// With virtual memory: the pages mapped and how the range grows. Default: [`Paging::Device`].
    #[serde(default)]
    pub paging: Paging,
    /// With virtual memory: the most shards the pool spreads over, each a range with a lock of its own,
    /// for threads that allocate at once and keep finding one another holding the lock; 1 to
    /// [`MAX_SHARDS`](crate::MAX_SHARDS). A program whose threads take turns stays in one. Without
    /// virtual memory the pool has one. Default: 16.
    #[serde(default = "default_shards")]
    pub shards: usize,
}

impl Default for DynamicConfig {
    fn default() -> Self {
        DynamicConfig {
            initial_size: 256 * MIB,
            growth_factor: 1.5,
            cap: Cap::Fraction(0.8),
            virtual_memory: VirtualMemory::Auto,
            reclaim_idle: true,
            wait_for_idle: false,
            alias_in_use: true,
            avoid_retiring: true,
            address_space_factor: 2,
            paging: Paging::Device,
            shards: default_shards(),
        }
    }
}

/// The default [`DynamicConfig::shards`]: 16.
fn default_shards() -> usize {
    16
}

/// The default [`DynamicConfig::alias_in_use`]: true.
fn default_alias_in_use() -> bool {
    true
}

/// The default [`DynamicConfig::avoid_retiring`]: true.
fn default_avoid_retiring() -> bool {
    true
}

impl DynamicConfig {
    /// Sets the initial size.
    pub fn initial_size(mut self, bytes: u64) -> Self {
        self.initial_size = bytes;
        self
    }

    /// Sets the growth factor.
    pub fn growth_factor(mut self, factor: f64) -> Self {
        self.growth_factor = factor;
        self
    }

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

    /// Sets whether idle chunks are moved before new memory is asked for.
    pub fn reclaim_idle(mut self, reclaim: bool) -> Self {
        self.reclaim_idle = reclaim;
        self
    }

    /// Sets whether to wait for the device to move idle chunks still in use rather than grow.
    pub fn wait_for_idle(mut self, wait: bool) -> Self {
        self.wait_for_idle = wait;
        self
    }

    /// Sets whether idle chunks still in use are mapped at the new block's address too (on one stream).
    pub fn alias_in_use(mut self, alias: bool) -> Self {
        self.alias_in_use = alias;
        self
    }

    /// Sets whether a block that lands on addresses still retiring is carved elsewhere rather than wait.
    pub fn avoid_retiring(mut self, avoid: bool) -> Self {
        self.avoid_retiring = avoid;
        self
    }

    /// Sets the pages mapped on virtual memory.
    pub fn paging(mut self, paging: Paging) -> Self {
        self.paging = paging;
        self
    }

    /// Sets the most shards.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }

    /// Checks the configuration against a device of `capacity` bytes; returns the cap in bytes.
    pub fn validate(&self, capacity: u64) -> Result<u64> {
        if !(self.growth_factor > 1.0 && self.growth_factor.is_finite()) {
            return Err(Error::invalid_config("growth_factor", self.growth_factor, "must be a number above 1.0"));
        }
        if let Cap::Fraction(fraction) = self.cap
            && !(fraction > 0.0 && fraction <= 1.0)
        {
            return Err(Error::invalid_config("cap", fraction, "a fraction of the device must be in (0, 1]"));
        }
        let cap = self.cap.bytes(capacity);
        if cap == 0 {
            return Err(Error::invalid_config("cap", cap, "must be above 0 bytes"));
        }
        if self.initial_size > cap {
            return Err(Error::invalid_config(
                "initial_size",
                self.initial_size,
                format!("exceeds the cap of {cap} bytes"),
            ));
        }
        if !(1..=MAX_SHARDS).contains(&self.shards) {
            return Err(Error::invalid_config("shards", self.shards, format!("must be 1 to {MAX_SHARDS}")));
        }
        if self.address_space_factor == 0 {
            return Err(Error::invalid_config("address_space_factor", 0, "must be at least 1"));
        }
        Ok(cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_seeds() {
        let c = DynamicConfig::default();
        assert_eq!((c.initial_size, c.growth_factor, c.cap), (256 * MIB, 1.5, Cap::Fraction(0.8)));
        assert_eq!(c.validate(1000 * MIB), Ok(800 * MIB));
    }

    #[test]
    fn growth_factor_must_exceed_one() {
        for bad in [1.0, 0.5, f64::NAN, f64::INFINITY] {
            let err = DynamicConfig::default().growth_factor(bad).validate(u64::MAX).unwrap_err();
            assert!(err.to_string().contains("growth_factor"), "{err}");
        }
        assert!(DynamicConfig::default().growth_factor(1.01).validate(u64::MAX).is_ok());
    }

    #[test]
    fn cap_and_initial_size_are_checked() {
        assert!(DynamicConfig::default().cap(Cap::Fraction(1.5)).validate(u64::MAX).is_err());
        assert!(DynamicConfig::default().cap(Cap::Fraction(0.0)).validate(u64::MAX).is_err());
        let err = DynamicConfig::default().cap(Cap::Bytes(MIB)).validate(u64::MAX).unwrap_err();
        assert!(err.to_string().contains("initial_size = 268435456: exceeds the cap of 1048576 bytes"), "{err}");
    }
}
