//! A pool described by one string, the same everywhere: the command line, the environment variable of the
//! PyTorch library, the C API. `strategy=hybrid,coverage=0.9,watermark=0.8,initial_size=512MiB`; the empty
//! string is the default, the adaptive pool, whose every choice within its cap adapts to the workload.
//!
//! Keys (all optional, each given once; unknown keys, bad values and a key given twice are errors naming the
//! key, and so is a key the adaptive pool has no use for, in a string that makes one, with what takes its
//! place there), from
//! [`CONFIG_KEYS`]:
//!
//! | key | sets | values | default | in the adaptive pool (the default) |
//! | --- | --- | --- | --- | --- |
//! | `strategy` | any pool | `fixed`, `dynamic`, `hybrid`, `adaptive` | `adaptive` | applies |
//! | `backend` | any pool | `sim`, `host`, `cuda`, `cuda-vm` (for front ends that make the device) | the front end's | applies |
//! | `page_size` | any pool | virtual memory: bytes per physical page, a multiple of the device's granularity (larger pages mean fewer, cheaper driver calls and coarser reclaiming) | the device's granularity | it sizes its pages itself, from the device's granularity up to the memory it holds divided by `pages_per_pool` (name strategy=dynamic or strategy=hybrid to map pages of one size) |
//! | `block_size` | fixed pool | bytes | `4MiB` | it sets the fixed pool (name strategy=fixed) |
//! | `block_count` | fixed pool | a count | `2048` | it sets the fixed pool (name strategy=fixed) |
//! | `fallback` | fixed pool | `backend` or `reject` | `backend` | it sets the fixed pool (name strategy=fixed) |
//! | `initial_size` | dynamic pool, hybrid's region | bytes | `256MiB` | it maps memory only under blocks, a page at a time, after moving idle pages there (name strategy=dynamic or strategy=hybrid to choose how a pool grows) |
//! | `growth_factor` | dynamic pool, hybrid's region | a number above 1 | `1.5` (the hybrid's region: `1.01`) | it maps memory only under blocks, a page at a time, after moving idle pages there (name strategy=dynamic or strategy=hybrid to choose how a pool grows) |
//! | `cap` | dynamic pool, hybrid's region | a fraction of the device in (0, 1] (`0.8`) or a size (`80GiB`) | `0.8` | applies |
//! | `virtual_memory` | dynamic pool, hybrid's region | `auto` or `off` | `auto` | applies |
//! | `reclaim_idle` | dynamic pool, hybrid's region | `true` or `false` | `true` | it always moves idle pages before it maps new memory, aliasing those queued work still uses on one stream, growing around them on several (waiting for them only at its cap), and places blocks away from addresses still retiring (name strategy=dynamic or strategy=hybrid to choose) |
//! | `wait_for_idle` | dynamic pool, hybrid's region | `true` or `false` | `false` (the hybrid's region: `true`) | it always moves idle pages before it maps new memory, aliasing those queued work still uses on one stream, growing around them on several (waiting for them only at its cap), and places blocks away from addresses still retiring (name strategy=dynamic or strategy=hybrid to choose) |
//! | `alias_in_use` | dynamic pool, hybrid's region | `true` or `false` | `true` | it always moves idle pages before it maps new memory, aliasing those queued work still uses on one stream, growing around them on several (waiting for them only at its cap), and places blocks away from addresses still retiring (name strategy=dynamic or strategy=hybrid to choose) |
//! | `shards` | dynamic pool, hybrid's region | with virtual memory: the most shards threads that allocate at once spread over, each a range with its own lock, 1 to 64 | `16` | applies |
//! | `avoid_retiring` | dynamic pool, hybrid's region | `true` or `false` | `true` | it always moves idle pages before it maps new memory, aliasing those queued work still uses on one stream, growing around them on several (waiting for them only at its cap), and places blocks away from addresses still retiring (name strategy=dynamic or strategy=hybrid to choose) |
//! | `paging` | dynamic pool, hybrid's region | virtual memory: `device` (the device's pages, grown by the growth factor) or `adaptive` (pages sized from the pool's memory as it grows, blocks placed where the fewest pages are missing, idle pages moved before any new memory) | `device` | its pages are always adaptive (name strategy=dynamic or strategy=hybrid to choose) |
//! | `pages_per_pool` | dynamic pool, hybrid's region | with adaptive pages: a new page holds at most the pool's memory divided by this, 1 or more (more: smaller pages, less memory idle in them, more driver calls) | `256` (with adaptive pages) | applies |
//! | `driver_per_mille` | dynamic pool, hybrid's region | with adaptive pages: thousandths of the time that moving idle pages may take in the driver, 0 to 1000 (1000: no bound; past it, new pages are mapped instead, but for a block lacking a 32nd of the pool, which may take up to 3 times it) | `10` (with adaptive pages) | applies |
//! | `classes` | hybrid pool | given classes, `SIZExCOUNT` joined by `+` (`4KiBx512+1MiBx64`) | learned | it keeps no size classes: every request is placed in its one range of pages, where blocks of every size share pages (name strategy=hybrid for classes) |
//! | `warmup` | hybrid pool | requests | `1024` | it keeps no size classes: every request is placed in its one range of pages, where blocks of every size share pages (name strategy=hybrid for classes) |
//! | `coverage` | hybrid pool | a fraction of requests | `0.9` | it keeps no size classes: every request is placed in its one range of pages, where blocks of every size share pages (name strategy=hybrid for classes) |
//! | `max_waste` | hybrid pool | a fraction of a block | `0.1` | it keeps no size classes: every request is placed in its one range of pages, where blocks of every size share pages (name strategy=hybrid for classes) |
//! | `waste_floor` | hybrid pool | bytes | `16KiB` | it keeps no size classes: every request is placed in its one range of pages, where blocks of every size share pages (name strategy=hybrid for classes) |
//! | `cached_waste` | hybrid pool | a fraction of a block | `0.5` | it keeps no size classes: every request is placed in its one range of pages, where blocks of every size share pages (name strategy=hybrid for classes) |
//! | `max_classes` | hybrid pool | a count | `128` | it keeps no size classes: every request is placed in its one range of pages, where blocks of every size share pages (name strategy=hybrid for classes) |
//! | `max_class_size` | hybrid pool | bytes | `4MiB` | it keeps no size classes: every request is placed in its one range of pages, where blocks of every size share pages (name strategy=hybrid for classes) |
//! | `headroom` | hybrid pool | a multiple of the blocks seen live, 1 or more | `2` | it keeps no size classes: every request is placed in its one range of pages, where blocks of every size share pages (name strategy=hybrid for classes) |
//! | `watermark` | hybrid pool | a fraction of the class blocks in use | `0.8` | it never grows ahead of need (name strategy=hybrid for a watermark) |
//! | `deterministic` | hybrid pool | `true` or `false` | `false` | it does all its work on the allocating thread, so its replays always repeat exactly (name strategy=hybrid for a pool that grows in the background) |
//! | `drain_before_growth` | hybrid pool | `true` or `false` | `false` | it keeps no size classes: every request is placed in its one range of pages, where blocks of every size share pages (name strategy=hybrid for classes) |
//!
//! Sizes take the units B, KiB, MiB, GiB, TiB (and KB, MB, GB, TB as powers of ten), or none for bytes.

use std::fmt;
use std::sync::Arc;

use crate::adaptive::{AdaptiveConfig, AdaptivePool};
use crate::any_pool::AnyPool;
use crate::backend::Backend;
use crate::config_keys::{CONFIG_KEYS, ConfigKey, KeyScope, bad, find, key_of_field};
use crate::dynamic::{DynamicConfig, DynamicPool, Paging};
use crate::error::{Error, Result};
use crate::excerpt::excerpt;
use crate::fixed::{FixedConfig, FixedPool};
use crate::hybrid::{HybridConfig, HybridPool};
use crate::pool::Pool;

/// Which strategy a [`PoolSpec`] makes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// [`FixedPool`].
    Fixed,
    /// [`DynamicPool`].
    Dynamic,
    /// [`HybridPool`].
    Hybrid,
    /// [`AdaptivePool`] (the default).
    #[default]
    Adaptive,
}

impl Strategy {
    /// All strategies, in the order reports list them.
    pub const ALL: [Strategy; 4] = [Strategy::Fixed, Strategy::Dynamic, Strategy::Hybrid, Strategy::Adaptive];

    /// The strategies whose parameters a user tunes, which `advise` sweeps: all but the adaptive pool,
    /// which has none to sweep.
    pub const TUNABLE: [Strategy; 3] = [Strategy::Fixed, Strategy::Dynamic, Strategy::Hybrid];

    /// The strategy's name: `fixed`, `dynamic`, `hybrid`, `adaptive`.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Fixed => "fixed",
            Strategy::Dynamic => "dynamic",
            Strategy::Hybrid => "hybrid",
            Strategy::Adaptive => "adaptive",
        }
    }
}

impl std::str::FromStr for Strategy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Strategy::ALL
            .into_iter()
            .find(|st| st.name() == s)
            .ok_or_else(|| bad("strategy", format!("`{}` is not one of fixed, dynamic, hybrid, adaptive", excerpt(s))))
    }
}

/// Which device a front end should make a pool on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// The simulated device.
    Sim,
    /// Host memory.
    Host,
    /// CUDA segments (`cuMemAlloc`).
    Cuda,
    /// CUDA virtual memory.
    CudaVirtual,
}

impl BackendKind {
    /// The name in config strings.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Sim => "sim",
            BackendKind::Host => "host",
            BackendKind::Cuda => "cuda",
            BackendKind::CudaVirtual => "cuda-vm",
        }
    }
}

/// A pool described completely: strategy, each strategy's configuration, and optionally the device.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolSpec {
    /// The strategy.
    pub strategy: Strategy,
    /// The device, where the string names one.
    pub backend: Option<BackendKind>,
    /// Bytes per physical page on a virtual-memory device, where the string names it (the default of the
    /// front end that opens the device otherwise).
    pub page_size: Option<u64>,
    /// The fixed pool's configuration.
    pub fixed: FixedConfig,
    /// The dynamic pool's configuration.
    pub dynamic: DynamicConfig,
    /// The hybrid's configuration, its region's included.
    pub hybrid: HybridConfig,
    /// The adaptive pool's configuration.
    pub adaptive: AdaptiveConfig,
}

impl PoolSpec {
    /// Parses a config string; the empty string is the default (the adaptive pool). A key given twice is an
    /// error naming it; so is a key that does not apply to the adaptive pool where the string makes one, with
    /// what takes its place there.
    pub fn parse(text: &str) -> Result<Self> {
        let mut spec = PoolSpec::default();
        let mut named: Vec<&ConfigKey> = Vec::new();
        for item in text.split(',').map(str::trim).filter(|item| !item.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| bad(item, "expected key=value"))?;
            let found = find(key).ok_or_else(|| bad(key, "unknown key"))?;
            if named.iter().any(|given| given.name == found.name) {
                return Err(bad(key, "given twice: each key may be given once"));
            }
            found.set(&mut spec, value)?;
            named.push(found);
        }
        if spec.strategy == Strategy::Adaptive
            && let Some(err) = named.iter().find_map(|key| key.refuse_in_adaptive())
        {
            return Err(err);
        }
        if matches!(spec.strategy, Strategy::Dynamic | Strategy::Hybrid)
            && spec.dynamic().paging == Paging::Device
            && let Some(err) = named.iter().find_map(|key| key.refuse_on_device_pages())
        {
            return Err(err);
        }
        Ok(spec)
    }

    /// Sets one key.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        find(key).ok_or_else(|| bad(key, "unknown key"))?.set(self, value)
    }

    /// The dynamic configuration in force: the region's for the hybrid and the adaptive pool, the dynamic
    /// pool's otherwise.
    pub fn dynamic(&self) -> DynamicConfig {
        match self.strategy {
            Strategy::Hybrid => self.hybrid.dynamic.clone(),
            Strategy::Adaptive => self.adaptive.region(),
            _ => self.dynamic.clone(),
        }
    }

    /// Checks every value against a device of `capacity` bytes, as building the pool would.
    pub fn validate(&self, capacity: u64) -> Result<()> {
        let checked = match self.strategy {
            Strategy::Fixed => self.fixed.validate(capacity).map(|_| ()),
            Strategy::Dynamic => self.dynamic.validate(capacity).map(|_| ()),
            Strategy::Hybrid => self.hybrid.validate_against(capacity).map(|_| ()),
            Strategy::Adaptive => self.adaptive.validate(capacity),
        };
        checked.map_err(named_by_key)
    }

    /// Makes the pool on `backend`.
    pub fn build(&self, backend: Arc<dyn Backend>) -> Result<Arc<dyn Pool>> {
        Ok(match self.build_any(backend)? {
            AnyPool::Fixed(pool) => Arc::new(pool),
            AnyPool::Dynamic(pool) => Arc::new(pool),
            AnyPool::Hybrid(pool) => Arc::new(pool),
            AnyPool::Adaptive(pool) => Arc::new(pool),
        })
    }

    /// Makes the pool this spec describes on `backend`, as an [`AnyPool`] (no vtable between a caller
    /// and the strategy).
    pub fn build_any(&self, backend: Arc<dyn Backend>) -> Result<AnyPool> {
        let built = match self.strategy {
            Strategy::Fixed => FixedPool::new(backend, self.fixed.clone()).map(AnyPool::Fixed),
            Strategy::Dynamic => DynamicPool::new(backend, self.dynamic.clone()).map(AnyPool::Dynamic),
            Strategy::Hybrid => HybridPool::new(backend, self.hybrid.clone()).map(AnyPool::Hybrid),
            Strategy::Adaptive => AdaptivePool::new(backend, self.adaptive.clone()).map(AnyPool::Adaptive),
        };
        built.map_err(named_by_key)
    }

    /// The keys that matter for the strategy, `key=value` in the order of [`CONFIG_KEYS`]: the strategy, the
    /// device's keys where set, and the strategy's keys that differ from their defaults.
    fn keys(&self) -> Vec<(&'static str, String)> {
        let default = PoolSpec { strategy: self.strategy, ..PoolSpec::default() };
        CONFIG_KEYS
            .iter()
            .filter(|key| key.applies_to(self.strategy))
            .filter_map(|key| {
                let value = key.get(self)?;
                (key.scope == KeyScope::Any || Some(&value) != key.get(&default).as_ref()).then_some((key.name, value))
            })
            .collect()
    }
}

/// The config string: the strategy and every key that differs from its default.
impl fmt::Display for PoolSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<String> = self.keys().into_iter().map(|(k, v)| format!("{k}={v}")).collect();
        f.write_str(&keys.join(","))
    }
}

impl std::str::FromStr for PoolSpec {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        PoolSpec::parse(s)
    }
}

/// `err` with a refused field named by its key in config strings, which is what the user wrote.
fn named_by_key(err: Error) -> Error {
    match err {
        Error::InvalidConfig { field, value, reason } => {
            Error::InvalidConfig { field: key_of_field(field), value, reason }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dynamic::Cap;

    #[test]
    fn the_empty_string_is_the_default() {
        assert_eq!(PoolSpec::parse("").unwrap(), PoolSpec::default());
        assert_eq!(PoolSpec::default().to_string(), "strategy=adaptive");
        // Each strategy keeps its own defaults: 1.5 for the dynamic pool, 1.01 for the hybrid's region.
        let dynamic = PoolSpec::parse("strategy=dynamic").unwrap();
        assert_eq!((dynamic.dynamic.growth_factor, dynamic.hybrid.dynamic.growth_factor), (1.5, 1.01));
        let both = PoolSpec::parse("strategy=hybrid,growth_factor=1.2").unwrap();
        assert_eq!((both.dynamic.growth_factor, both.hybrid.dynamic.growth_factor), (1.2, 1.2));
    }

    /// The adaptive pool takes the keys that bound it; a key it has no use for is refused, whichever way
    /// round the string names it and the strategy, with what takes its place.
    #[test]
    fn keys_the_adaptive_pool_has_no_use_for_are_refused_with_what_replaced_them() {
        let spec = PoolSpec::parse("cap=64GiB,virtual_memory=off,backend=host").unwrap();
        assert_eq!(spec.strategy, Strategy::Adaptive);
        assert_eq!(spec.to_string(), "strategy=adaptive,backend=host,cap=64GiB,virtual_memory=off");
        assert_eq!(PoolSpec::parse(&spec.to_string()).unwrap(), spec);
        for (text, key, replaced) in [
            ("page_size=16MiB", "page_size", "sizes its pages itself"),
            ("growth_factor=1.2,strategy=adaptive", "growth_factor", "a page at a time"),
            ("strategy=adaptive,initial_size=1GiB", "initial_size", "a page at a time"),
            ("coverage=0.8", "coverage", "no size classes"),
            ("deterministic=true", "deterministic", "on the allocating thread"),
            ("watermark=0.5", "watermark", "never grows ahead"),
            ("alias_in_use=false", "alias_in_use", "moves idle pages"),
            ("block_size=1MiB", "block_size", "strategy=fixed"),
        ] {
            match PoolSpec::parse(text) {
                Err(err @ Error::BadConfigString { .. }) => {
                    let message = err.to_string();
                    assert!(message.contains(key) && message.contains(replaced), "{text}: {message}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        assert!(PoolSpec::parse("page_size=16MiB,strategy=hybrid").is_ok(), "the hybrid takes it");
    }

    /// The page keys size adaptive pages wherever a pool has them, whichever way round the string names the
    /// keys and `paging`, and are refused where the pool maps the device's pages.
    #[test]
    fn page_keys_size_adaptive_pages_and_are_refused_on_the_devices_pages() {
        use crate::dynamic::PagePolicy;
        let tuned = PagePolicy { pages_per_pool: 128, driver_per_mille: 5, ..PagePolicy::default() };
        let adaptive = PoolSpec::parse("pages_per_pool=128,driver_per_mille=5").unwrap();
        assert_eq!(adaptive.adaptive.pages, tuned);
        assert_eq!(adaptive.dynamic().paging, Paging::Adaptive(tuned), "the range the default runs as");
        assert_eq!(adaptive.to_string(), "strategy=adaptive,pages_per_pool=128,driver_per_mille=5");
        for text in [
            "strategy=dynamic,paging=adaptive,pages_per_pool=128,driver_per_mille=5",
            "pages_per_pool=128,strategy=dynamic,driver_per_mille=5,paging=adaptive",
        ] {
            let spec = PoolSpec::parse(text).unwrap();
            assert_eq!(spec.dynamic.paging, Paging::Adaptive(tuned), "{text}");
            assert_eq!(spec.to_string(), "strategy=dynamic,paging=adaptive,pages_per_pool=128,driver_per_mille=5");
        }
        let hybrid = PoolSpec::parse("strategy=hybrid,paging=adaptive,pages_per_pool=64").unwrap();
        assert_eq!(
            hybrid.hybrid.dynamic.paging,
            Paging::Adaptive(PagePolicy { pages_per_pool: 64, ..PagePolicy::default() })
        );
        assert_eq!(
            PoolSpec::parse("strategy=dynamic,paging=adaptive").unwrap().to_string(),
            "strategy=dynamic,paging=adaptive"
        );
        for (text, key, reason) in [
            ("strategy=dynamic,pages_per_pool=64", "pages_per_pool", "paging=adaptive"),
            ("strategy=hybrid,driver_per_mille=5", "driver_per_mille", "paging=adaptive"),
            ("pages_per_pool=0", "pages_per_pool", "1 or more"),
            ("pages_per_pool=many", "pages_per_pool", "not a number"),
            ("driver_per_mille=1001", "driver_per_mille", "0 to 1000"),
            ("driver_per_mille=-1", "driver_per_mille", "not a number"),
        ] {
            match PoolSpec::parse(text) {
                Err(err @ Error::BadConfigString { .. }) => {
                    let message = err.to_string();
                    assert!(message.contains(key) && message.contains(reason), "{text}: {message}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn strings_round_trip() {
        for text in [
            "strategy=fixed,block_size=8MiB,block_count=100,fallback=reject",
            "strategy=dynamic,initial_size=1GiB,growth_factor=1.25,cap=0.5,virtual_memory=off",
            "strategy=dynamic,cap=64GiB,reclaim_idle=false",
            "strategy=hybrid,backend=host,classes=4KiBx512+1MiBx64,coverage=0.95,watermark=0.7,deterministic=true",
            "strategy=dynamic,page_size=32MiB,growth_factor=1.1",
            "strategy=hybrid,growth_factor=1.1,warmup=1000,max_waste=0.25,waste_floor=4KiB,max_classes=16,headroom=1.5",
            "strategy=hybrid,cached_waste=0.25",
            "strategy=hybrid,drain_before_growth=true",
        ] {
            let spec = PoolSpec::parse(text).unwrap();
            assert_eq!(spec.to_string(), text);
            assert_eq!(PoolSpec::parse(&spec.to_string()).unwrap(), spec);
        }
    }

    #[test]
    fn bad_strings_name_the_key() {
        for (text, key) in [
            ("strategy=magic", "strategy"),
            ("colour=blue", "colour"),
            ("block_size=big", "block_size"),
            ("strategy=dynamic,growth_factor=fast", "growth_factor"),
            ("strategy=hybrid,classes=4KiB", "classes"),
            ("deterministic=maybe", "deterministic"),
            ("strategy=hybrid,drain_before_growth=sometimes", "drain_before_growth"),
            ("watermark", "watermark"),
            ("page_size=3KiB", "page_size"),
            ("strategy=hybrid,waste_floor=lots", "waste_floor"),
            ("strategy=hybrid,cached_waste=lots", "cached_waste"),
        ] {
            match PoolSpec::parse(text) {
                Err(Error::BadConfigString { key: k, .. }) => assert_eq!(k, key, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        let err = PoolSpec::parse("strategy=dynamic,growth_factor=1.0").unwrap().validate(1 << 40).unwrap_err();
        assert!(err.to_string().contains("growth_factor"), "{err}");
        // Values refused by the strategy's own checks are named by their keys, not by the config's fields.
        for (text, key, field) in [
            ("strategy=hybrid,max_waste=2", "max_waste", "max_rounding_waste"),
            ("strategy=hybrid,cached_waste=1.5", "cached_waste", "max_cached_waste"),
            ("strategy=hybrid,headroom=0.5", "headroom", "slab_headroom"),
        ] {
            let spec = PoolSpec::parse(text).unwrap();
            for err in [
                spec.validate(1 << 40).unwrap_err(),
                spec.build_any(Arc::new(crate::SimDevice::default())).unwrap_err(),
            ] {
                let message = err.to_string();
                assert!(message.contains(key) && !message.contains(field), "{text}: {message}");
            }
        }
    }

    #[test]
    fn a_key_given_twice_is_an_error_naming_it() {
        for (text, key) in [
            ("cap=0.5,cap=0.8", "cap"),
            ("strategy=dynamic,growth_factor=1.2,strategy=fixed", "strategy"),
            ("classes=4KiBx1, classes = 8KiBx1", "classes"),
            ("backend=host,backend=host", "backend"),
        ] {
            match PoolSpec::parse(text) {
                Err(err @ Error::BadConfigString { .. }) => {
                    assert_eq!(
                        err.to_string(),
                        format!("bad config string at `{key}`: given twice: each key may be given once")
                    );
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn cap_is_a_fraction_in_0_to_1_or_a_size() {
        let cap = |text: &str| PoolSpec::parse(&format!("strategy=dynamic,cap={text}")).map(|spec| spec.dynamic.cap);
        assert_eq!(cap("0.8"), Ok(Cap::Fraction(0.8)));
        assert_eq!(cap("1"), Ok(Cap::Fraction(1.0)));
        assert_eq!(cap("1.0"), Ok(Cap::Fraction(1.0)));
        assert_eq!(cap("0.000001"), Ok(Cap::Fraction(0.000001)));
        assert_eq!(cap("80GiB"), Ok(Cap::Bytes(80 << 30)));
        assert_eq!(cap("1.5GiB"), Ok(Cap::Bytes(3 << 29)));
        assert_eq!(cap("104973056"), Ok(Cap::Bytes(104973056)), "a whole number above 1 is bytes");
        assert_eq!(cap("0B"), Ok(Cap::Bytes(0)));
        for text in
            ["1.5", "2.0", "0", "0.0", "-0.5", "-1", "NaN", "inf", "1e9", "1e-400", "", "x", "18446744073709551616"]
        {
            match cap(text) {
                Err(Error::BadConfigString { key, reason }) => {
                    assert_eq!(key, "cap", "{text}");
                    assert!(reason.contains("neither a fraction of the device in (0, 1]"), "{text}: {reason}");
                }
                other => panic!("cap={text}: {other:?}"),
            }
        }
        // Every cap prints as text that reads back to it.
        for value in
            [Cap::Fraction(0.8), Cap::Fraction(1.0), Cap::Bytes(0), Cap::Bytes(1), Cap::Bytes(2), Cap::Bytes(1000)]
        {
            let spec = PoolSpec {
                strategy: Strategy::Dynamic,
                dynamic: DynamicConfig::default().cap(value),
                ..PoolSpec::default()
            };
            assert_eq!(PoolSpec::parse(&spec.to_string()).unwrap().dynamic.cap, value, "{spec}");
        }
    }

    #[test]
    fn errors_quote_a_short_excerpt_of_long_input() {
        let long = "9".repeat(1 << 20);
        for text in [
            format!("{long}=1"),
            long.clone(),
            format!("strategy={long}"),
            format!("block_size={long}"),
            format!("classes={long}"),
            format!("classes=4KiBx{long}"),
            format!("cap={long}x"),
            format!("backend={long}"),
            format!("deterministic={long}"),
        ] {
            let message = PoolSpec::parse(&text).unwrap_err().to_string();
            assert!(message.len() < 300, "{} bytes: {}", message.len(), &message[..300]);
            assert!(message.contains("99999...") && message.contains("bytes)"), "{message}");
        }
    }

    #[test]
    fn every_strategy_builds() {
        for strategy in ["fixed", "dynamic", "hybrid", "adaptive"] {
            let extra = if strategy == "adaptive" { "" } else { ",block_count=8" };
            let spec = PoolSpec::parse(&format!("strategy={strategy}{extra}")).unwrap();
            let pool = spec.build(Arc::new(crate::SimDevice::default())).unwrap();
            assert_eq!(pool.strategy(), strategy);
            let any = spec.build_any(Arc::new(crate::SimDevice::default())).unwrap();
            assert_eq!(any.strategy(), strategy);
            let block = any.allocate(1 << 20, 256, crate::StreamId::DEFAULT).unwrap();
            assert_eq!(any.stats().allocated_bytes.current, 1 << 20);
            any.free(block.addr).unwrap();
            assert_eq!(any.report().stats.active_allocations, 0);
            assert_eq!(any.backend().name(), "sim");
            any.trim().unwrap();
        }
    }
}
