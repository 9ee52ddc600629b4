//! How a hybrid pool is set up.

use serde::{Deserialize, Serialize};

use super::waste_bound::WasteBound;
use crate::byte_format::format_bytes;
use crate::dynamic::DynamicConfig;
use crate::error::{Error, Result};
use crate::units::{KIB, MAX_BLOCK_SIZE, MIB, MIN_BLOCK};

/// The most classes a hybrid pool holds, learned ([`HybridConfig::max_classes`]) or given
/// ([`HybridConfig::classes`]): the map from a block's address to its class keeps the class in 8 bits.
pub const MAX_CLASSES: usize = 255;

/// One size class given explicitly: its block size and the most blocks it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassSpec {
    /// Bytes per block, a positive multiple of 256, at most [`MAX_BLOCK_SIZE`].
    pub block_size: u64,
    /// The most blocks the class holds (its capacity), at least 1. The class at its full count must fit
    /// in the device ([`HybridConfig::validate_against`]); a pool gives it no more blocks than fit in its
    /// region's cap ([`crate::HybridPool::classes`] says how many it got).
    pub block_count: u64,
}

/// How a [`crate::HybridPool`] is set up.
///
/// The core's classes are either given ([`HybridConfig::classes`]) or learned: the first
/// [`HybridConfig::warmup_requests`] requests (or those until [`crate::HybridPool::freeze`]) are served by
/// the dynamic region while their sizes are counted; then the smallest set of classes that covers
/// [`HybridConfig::coverage`] of the requests is chosen, each class's capacity sized from the most blocks
/// of the class seen live at once (times [`HybridConfig::slab_headroom`]).
///
/// A request goes to the class with the smallest block that holds it, provided the block exceeds the
/// request rounded up to 256 bytes by at most [`HybridConfig::max_rounding_waste`] of it (10% by default) or
/// by [`HybridConfig::waste_floor`] bytes (16 KiB by default), whichever is larger: the rounding waste of the
/// core is bounded. A request that no class serves so may still take a block the next larger class has
/// cached, within the looser [`HybridConfig::max_cached_waste`] (50% by default); else the region serves it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HybridConfig {
    /// Explicit classes; empty (the default) means learn them during warm-up.
    pub classes: Vec<ClassSpec>,
    /// Requests observed before the classes are learned. Default: 1024 (one or two steps of training).
    pub warmup_requests: u64,
    /// The share of requests the learned classes must cover, in (0, 1]. Default: 0.9.
    pub coverage: f64,
    /// The most a block may exceed its request (rounded to 256 bytes), as a fraction. Default: 0.1: on the
    /// bundled traces the hybrid reserves about as much as with a tighter bound, and on sizes spread
    /// log-uniformly its classes serve more of the requests, so fewer go to the region (docs/BENCHMARKS.md).
    pub max_rounding_waste: f64,
    /// Bytes a block may always exceed its request by, where that is more than
    /// [`HybridConfig::max_rounding_waste`] allows: small requests share few classes, at a cost of at most
    /// this much per small block. Default: 16 KiB: on sizes spread log-uniformly the classes serve many
    /// more of the requests, for about as much memory on the bundled traces (docs/BENCHMARKS.md).
    #[serde(default = "default_waste_floor")]
    pub waste_floor: u64,
    /// The most a cached block may exceed a request that no class serves within
    /// [`HybridConfig::max_rounding_waste`], as a fraction: such a request takes a free block already cached
    /// in the next larger class, if that class's blocks exceed it by at most this much (or by
    /// [`HybridConfig::waste_floor`]), rather than go to the region; no block is carved for it. At most
    /// `max_rounding_waste`: off. Default: 0.5. The block is idle memory the pool holds already, where the
    /// region would place the request anew and perhaps grow: the hybrid reserves as much or less with it,
    /// and sends fewer requests to the region (docs/BENCHMARKS.md).
    #[serde(default = "default_cached_waste")]
    pub max_cached_waste: f64,
    /// The largest block a learned class may have (and never more than [`MAX_BLOCK_SIZE`]); larger requests
    /// go to the region, which packs them tightly. Default: 4 MiB: larger classes send fewer requests of a
    /// churn of spread sizes to the region, but reserved more at the peak on GPT-2 generation and on resnet_train_fixed (docs/BENCHMARKS.md).
    pub max_class_size: u64,
    /// The most classes learned, 1 to [`MAX_CLASSES`] (255). Default: 128. On the bundled traces the
    /// coverage bound stops the learner first (docs/BENCHMARKS.md has what it does on spread sizes).
    pub max_classes: usize,
    /// A class's capacity per block of the class seen live at once during warm-up, at least 1.0.
    /// Default: 2.0 (capacity costs no memory: blocks are carved when needed, and free ones are given back
    /// to the region when it runs short: [`HybridConfig::drain_before_growth`]).
    pub slab_headroom: f64,
    /// When the share of core blocks in use passes this, the dynamic region is grown ahead of need, in
    /// (0, 1]. Default: 0.8.
    pub watermark: f64,
    /// Grow ahead of need on the allocating thread instead of a background worker, so that replays repeat
    /// exactly. Default: false.
    pub deterministic: bool,
    /// Whether the classes give every free block they hold back to the region before it grows (true), or
    /// only when the region's cap or the device refuses a growth, or on [`crate::Pool::trim`] (false).
    /// Default: false. Given back, the blocks hold no memory the region needs, but each class then carves
    /// its blocks again, one region allocation each, as its requests come, which costs a churn more
    /// instructions and cache misses per step; which way reserves less depends on the workload
    /// (docs/BENCHMARKS.md).
    #[serde(default)]
    pub drain_before_growth: bool,
    /// The dynamic region. Default: [`DynamicConfig::default`] with a growth factor of 1.01: on virtual
    /// memory the region moves idle pages to where they are needed, so growing by little more than the
    /// request keeps the most memory free. And with [`DynamicConfig::wait_for_idle`]: on a GPU that runs
    /// behind the program, where idle pages still in use cannot be aliased ([`DynamicConfig::alias_in_use`]:
    /// several streams), the region waits for them rather than grow around them, so it reserves what it
    /// would on an idle GPU, for the host's time (docs/BENCHMARKS.md has both on a two-stream workload;
    /// the adaptive pool grows around them).
    pub dynamic: DynamicConfig,
}

impl Default for HybridConfig {
    fn default() -> Self {
        HybridConfig {
            classes: Vec::new(),
            warmup_requests: 1024,
            coverage: 0.9,
            max_rounding_waste: 0.1,
            waste_floor: default_waste_floor(),
            max_cached_waste: default_cached_waste(),
            max_class_size: 4 * MIB,
            max_classes: 128,
            slab_headroom: 2.0,
            watermark: 0.8,
            deterministic: false,
            drain_before_growth: false,
            dynamic: DynamicConfig::default().growth_factor(1.01).wait_for_idle(true),
        }
    }
}

/// The default [`HybridConfig::max_cached_waste`]: 0.5.
fn default_cached_waste() -> f64 {
    0.5
}

/// The default [`HybridConfig::waste_floor`]: 16 KiB.
fn default_waste_floor() -> u64 {
    16 * KIB
}

impl HybridConfig {
    /// Sets explicit classes.
    pub fn classes(mut self, classes: Vec<ClassSpec>) -> Self {
        self.classes = classes;
        self
    }

    /// Sets the number of warm-up requests.
    pub fn warmup_requests(mut self, requests: u64) -> Self {
        self.warmup_requests = requests;
        self
    }

    /// Sets the coverage the learned classes must reach.
    pub fn coverage(mut self, coverage: f64) -> Self {
        self.coverage = coverage;
        self
    }

    /// Sets the bound on rounding waste.
    pub fn max_rounding_waste(mut self, waste: f64) -> Self {
        self.max_rounding_waste = waste;
        self
    }

    /// Sets the bytes a block may always exceed its request by.
    pub fn waste_floor(mut self, bytes: u64) -> Self {
        self.waste_floor = bytes;
        self
    }

    /// Sets the most a cached block may exceed a request that no class serves.
    pub fn max_cached_waste(mut self, waste: f64) -> Self {
        self.max_cached_waste = waste;
        self
    }

    /// The bound on the rounding waste of a class block.
    pub(crate) fn waste_bound(&self) -> WasteBound {
        WasteBound { fraction: self.max_rounding_waste, floor: self.waste_floor }
    }

    /// The bound on the rounding waste of a cached block serving a request no class serves.
    pub(crate) fn cached_waste_bound(&self) -> WasteBound {
        WasteBound { fraction: self.max_cached_waste, floor: self.waste_floor }
    }

    /// Sets the watermark.
    pub fn watermark(mut self, watermark: f64) -> Self {
        self.watermark = watermark;
        self
    }

    /// Sets the slab headroom.
    pub fn slab_headroom(mut self, headroom: f64) -> Self {
        self.slab_headroom = headroom;
        self
    }

    /// Sets whether background work runs on the allocating thread.
    pub fn deterministic(mut self, deterministic: bool) -> Self {
        self.deterministic = deterministic;
        self
    }

    /// Sets whether the classes give their free blocks back to the region before it grows.
    pub fn drain_before_growth(mut self, drain: bool) -> Self {
        self.drain_before_growth = drain;
        self
    }

    /// Sets the dynamic region's configuration.
    pub fn dynamic(mut self, dynamic: DynamicConfig) -> Self {
        self.dynamic = dynamic;
        self
    }

    /// Checks the values that are the hybrid's own (the dynamic region checks its own).
    pub fn validate(&self) -> Result<()> {
        let fraction = |field: &'static str, value: f64| {
            if value > 0.0 && value <= 1.0 {
                Ok(())
            } else {
                Err(Error::invalid_config(field, value, "must be in (0, 1]"))
            }
        };
        fraction("coverage", self.coverage)?;
        fraction("watermark", self.watermark)?;
        let share = |field: &'static str, value: f64| {
            if (0.0..=1.0).contains(&value) {
                Ok(())
            } else {
                Err(Error::invalid_config(field, value, "must be in [0, 1]"))
            }
        };
        share("max_rounding_waste", self.max_rounding_waste)?;
        share("max_cached_waste", self.max_cached_waste)?;
        if !(self.slab_headroom >= 1.0 && self.slab_headroom.is_finite()) {
            return Err(Error::invalid_config("slab_headroom", self.slab_headroom, "must be at least 1.0"));
        }
        if self.max_class_size < MIN_BLOCK {
            return Err(Error::invalid_config("max_class_size", self.max_class_size, "must be at least 256"));
        }
        if self.max_classes == 0 || self.max_classes > MAX_CLASSES {
            return Err(Error::invalid_config("max_classes", self.max_classes, "must be 1 to 255"));
        }
        if self.classes.len() > MAX_CLASSES {
            return Err(Error::invalid_config("classes", self.classes.len(), "at most 255 classes"));
        }
        let mut sizes: Vec<u64> = self.classes.iter().map(|c| c.block_size).collect();
        for class in &self.classes {
            if class.block_size == 0 || class.block_size % MIN_BLOCK != 0 || class.block_size > MAX_BLOCK_SIZE {
                return Err(Error::invalid_config(
                    "classes",
                    class.block_size,
                    format!("block sizes must be positive multiples of 256, at most {MAX_BLOCK_SIZE}"),
                ));
            }
            if class.block_count == 0 || class.block_count > u64::from(u32::MAX - 1) {
                return Err(Error::invalid_config(
                    "classes",
                    class.block_count,
                    "block counts must be 1 to 4294967294",
                ));
            }
        }
        sizes.sort_unstable();
        if let Some(pair) = sizes.windows(2).find(|p| p[0] == p[1]) {
            return Err(Error::invalid_config("classes", pair[0], "two classes have the same block size"));
        }
        Ok(())
    }

    /// Checks every value against a device of `capacity` bytes, as making the pool does before it reserves
    /// anything: the hybrid's own ([`HybridConfig::validate`]), the region's ([`DynamicConfig::validate`]),
    /// and that each given class, every block of it at its full count, fits in the device. O(keys +
    /// classes), whatever the counts. Returns the region's cap in bytes.
    pub fn validate_against(&self, capacity: u64) -> Result<u64> {
        self.validate()?;
        let cap = self.dynamic.validate(capacity)?;
        for class in &self.classes {
            let bytes = class.block_size.checked_mul(class.block_count);
            if bytes.is_none_or(|bytes| bytes > capacity) {
                let needed = bytes.map_or_else(|| format!("more than {}", u64::MAX), |bytes| bytes.to_string());
                return Err(Error::invalid_config(
                    "classes",
                    format!("{}x{}", format_bytes(class.block_size), class.block_count),
                    format!("the class takes {needed} bytes at full count, more than the device's {capacity} bytes"),
                ));
            }
        }
        Ok(cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_bad_values_are_named() {
        HybridConfig::default().validate().unwrap();
        HybridConfig { max_classes: MAX_CLASSES, ..HybridConfig::default() }.validate().unwrap();
        HybridConfig::default()
            .classes((1..=MAX_CLASSES as u64).map(|i| ClassSpec { block_size: i * 256, block_count: 1 }).collect())
            .validate()
            .unwrap();
        for (config, field) in [
            (HybridConfig::default().coverage(0.0), "coverage"),
            (HybridConfig::default().watermark(1.5), "watermark"),
            (HybridConfig::default().max_rounding_waste(-0.1), "max_rounding_waste"),
            (HybridConfig::default().max_cached_waste(1.5), "max_cached_waste"),
            (HybridConfig::default().slab_headroom(0.5), "slab_headroom"),
            (HybridConfig { max_classes: 0, ..HybridConfig::default() }, "max_classes"),
            (HybridConfig { max_classes: MAX_CLASSES + 1, ..HybridConfig::default() }, "max_classes"),
            (
                HybridConfig::default().classes(
                    (1..=MAX_CLASSES as u64 + 1).map(|i| ClassSpec { block_size: i * 256, block_count: 1 }).collect(),
                ),
                "classes",
            ),
            (HybridConfig::default().classes(vec![ClassSpec { block_size: 300, block_count: 1 }]), "classes"),
            (HybridConfig::default().classes(vec![ClassSpec { block_size: 1 << 56, block_count: 1 }]), "classes"),
            (
                HybridConfig::default().classes(vec![
                    ClassSpec { block_size: 512, block_count: 1 },
                    ClassSpec { block_size: 512, block_count: 2 },
                ]),
                "classes",
            ),
        ] {
            let err = config.validate().unwrap_err();
            assert!(matches!(err, Error::InvalidConfig { field: f, .. } if f == field), "{err}");
        }
    }

    #[test]
    fn each_given_class_must_fit_in_the_device_at_full_count() {
        let classes = |specs: &[(u64, u64)]| {
            HybridConfig::default()
                .classes(specs.iter().map(|&(block_size, block_count)| ClassSpec { block_size, block_count }).collect())
        };
        // Together the classes may ask for more than the device: they share the region.
        let capacity = 1000 * MIB;
        assert_eq!(classes(&[(MIB, 1000), (4 * KIB, 256000)]).validate_against(capacity), Ok(800 * MIB));
        let err = classes(&[(4 * KIB, 8), (MIB, 1001)]).validate_against(capacity).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid configuration: classes = 1MiBx1001: the class takes 1049624576 bytes at full count, more \
             than the device's 1048576000 bytes"
        );
        // The most blocks a class may have, on an H200, and counts whose bytes pass 2^64: refused at once.
        let err = classes(&[(256, u32::MAX as u64 - 1)]).validate_against(141_000_000_000).unwrap_err();
        assert!(err.to_string().contains("takes 1099511627264 bytes"), "{err}");
        let err = classes(&[(1 << 55, 1024)]).validate_against(u64::MAX).unwrap_err();
        assert!(err.to_string().contains("takes more than 18446744073709551615 bytes"), "{err}");
        // The hybrid's and the region's own checks come first.
        let err = classes(&[(MIB, 1)]).coverage(2.0).validate_against(capacity).unwrap_err();
        assert!(matches!(err, Error::InvalidConfig { field: "coverage", .. }), "{err}");
        let region = DynamicConfig::default().initial_size(900 * MIB);
        let err = classes(&[(MIB, 1)]).dynamic(region).validate_against(capacity).unwrap_err();
        assert!(matches!(err, Error::InvalidConfig { field: "initial_size", .. }), "{err}");
    }
}
