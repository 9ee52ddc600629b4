//! A pool described by one string, the same everywhere: the command line, the environment variable of the
//! PyTorch library, the C API. `strategy=hybrid,coverage=0.9,watermark=0.8,initial_size=512MiB`.
//!
//! Keys (all optional; unknown keys and bad values are errors naming the key):
//!
//! | key | values | default |
//! | --- | --- | --- |
//! | `strategy` | `fixed`, `dynamic`, `hybrid` | `hybrid` |
//! | `backend` | `sim`, `host`, `cuda`, `cuda-vm` (for front ends that make the device) | the front end's |
//! | `page_size` | virtual memory: bytes per physical page, a multiple of the device's granularity (larger pages mean fewer, cheaper driver calls and coarser reclaiming) | the granularity (2 MiB) |
//! | `block_size`, `block_count`, `fallback` | fixed pool: bytes, count, `backend` or `reject` | 4MiB, 2048, backend |
//! | `initial_size`, `growth_factor`, `cap`, `virtual_memory`, `reclaim_idle`, `wait_for_idle`, `alias_in_use`, `avoid_retiring` | dynamic pool, and the hybrid's region: bytes, number > 1, a fraction (`0.8`) or bytes, `auto` or `off`, bool, bool, bool, bool | 256MiB, 1.5, 0.8, auto, true, false, true, true |
//! | `classes` | hybrid: given classes, `SIZExCOUNT` joined by `+` (`4KiBx512+1MiBx64`) | learned |
//! | `warmup`, `coverage`, `max_waste`, `waste_floor`, `cached_waste`, `max_classes`, `max_class_size`, `headroom`, `watermark`, `deterministic`, `drain_before_growth` | hybrid | 1024, 0.9, 0.1, 16KiB, 0.5, 128, 4MiB, 2.0, 0.8, false, false |
//!
//! The dynamic keys set the dynamic pool, or the hybrid's region, whose growth factor defaults to 1.01 and
//! which waits for idle pages (`wait_for_idle=true`).
//!
//! Sizes take the units B, KiB, MiB, GiB, TiB (and KB, MB, GB, TB as powers of ten), or none for bytes.

use std::fmt;
use std::sync::Arc;

use crate::any_pool::AnyPool;
use crate::backend::Backend;
use crate::dynamic::{Cap, DynamicConfig, DynamicPool, VirtualMemory};
use crate::error::{Error, Result};
use crate::fixed::{Fallback, FixedConfig, FixedPool};
use crate::hybrid::{ClassSpec, HybridConfig, HybridPool};
use crate::pool::Pool;
use crate::units::{GIB, KIB, MIB};

/// Which strategy a [`PoolSpec`] makes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// [`FixedPool`].
    Fixed,
    /// [`DynamicPool`].
    Dynamic,
    /// [`HybridPool`] (the default).
    #[default]
    Hybrid,
}

impl Strategy {
    /// All strategies, in the order reports list them.
    pub const ALL: [Strategy; 3] = [Strategy::Fixed, Strategy::Dynamic, Strategy::Hybrid];

    /// The strategy's name: `fixed`, `dynamic`, `hybrid`.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Fixed => "fixed",
            Strategy::Dynamic => "dynamic",
            Strategy::Hybrid => "hybrid",
        }
    }
}

impl std::str::FromStr for Strategy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Strategy::ALL
            .into_iter()
            .find(|st| st.name() == s)
            .ok_or_else(|| bad("strategy", format!("`{s}` is not one of fixed, dynamic, hybrid")))
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
    /// Bytes per physical page on a virtual-memory device, where the string names it (the device's
    /// granularity otherwise).
    pub page_size: Option<u64>,
    /// The fixed pool's configuration.
    pub fixed: FixedConfig,
    /// The dynamic pool's configuration.
    pub dynamic: DynamicConfig,
    /// The hybrid's configuration, its region's included.
    pub hybrid: HybridConfig,
}

fn bad(key: &str, reason: impl Into<String>) -> Error {
    Error::BadConfigString { key: key.to_string(), reason: reason.into() }
}

/// Parses a byte count: a number with an optional unit (`512`, `4KiB`, `1.5GiB`, `2GB`).
pub fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" | "k" => KIB,
        "MiB" | "M" => MIB,
        "GiB" | "G" => GIB,
        "TiB" | "T" => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return None,
    };
    if number.contains('.') {
        let value: f64 = number.parse().ok()?;
        let bytes = value * scale as f64;
        (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then_some(bytes.round() as u64)
    } else {
        number.parse::<u64>().ok()?.checked_mul(scale)
    }
}

/// Writes a byte count in the largest binary unit that divides it.
pub fn format_bytes(bytes: u64) -> String {
    for (unit, name) in [(1u64 << 40, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")] {
        if bytes >= unit && bytes % unit == 0 {
            return format!("{}{name}", bytes / unit);
        }
    }
    bytes.to_string()
}

fn number<T: std::str::FromStr>(key: &str, value: &str) -> Result<T> {
    value.parse().map_err(|_| bad(key, format!("`{value}` is not a number")))
}

fn bytes(key: &str, value: &str) -> Result<u64> {
    parse_bytes(value).ok_or_else(|| bad(key, format!("`{value}` is not a byte count (like 512MiB)")))
}

fn boolean(key: &str, value: &str) -> Result<bool> {
    match value {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(bad(key, format!("`{value}` is not true or false"))),
    }
}

/// The keys of the dynamic pool and the hybrid's region.
const DYNAMIC_KEYS: [&str; 8] = [
    "initial_size",
    "growth_factor",
    "cap",
    "virtual_memory",
    "reclaim_idle",
    "wait_for_idle",
    "alias_in_use",
    "avoid_retiring",
];

/// Sets one of [`DYNAMIC_KEYS`] on `dynamic`.
fn set_dynamic(dynamic: &mut DynamicConfig, key: &str, value: &str) -> Result<()> {
    match key {
        "initial_size" => dynamic.initial_size = bytes(key, value)?,
        "growth_factor" => dynamic.growth_factor = number(key, value)?,
        "cap" => {
            dynamic.cap = match value.parse::<f64>() {
                Ok(fraction) if fraction <= 1.0 => Cap::Fraction(fraction),
                _ => Cap::Bytes(bytes(key, value)?),
            }
        }
        "virtual_memory" => {
            dynamic.virtual_memory = match value {
                "auto" => VirtualMemory::Auto,
                "off" => VirtualMemory::Off,
                _ => return Err(bad(key, format!("`{value}` is not auto or off"))),
            }
        }
        "reclaim_idle" => dynamic.reclaim_idle = boolean(key, value)?,
        "wait_for_idle" => dynamic.wait_for_idle = boolean(key, value)?,
        "alias_in_use" => dynamic.alias_in_use = boolean(key, value)?,
        "avoid_retiring" => dynamic.avoid_retiring = boolean(key, value)?,
        _ => return Err(bad(key, "unknown key")),
    }
    Ok(())
}

impl PoolSpec {
    /// Parses a config string; the empty string is the default (a learning hybrid).
    pub fn parse(text: &str) -> Result<Self> {
        let mut spec = PoolSpec::default();
        for item in text.split(',').map(str::trim).filter(|item| !item.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| bad(item, "expected key=value"))?;
            spec.set(key, value)?;
        }
        Ok(spec)
    }

    /// Sets one key.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        if DYNAMIC_KEYS.contains(&key) {
            // A dynamic key sets the dynamic pool and the hybrid's region alike.
            set_dynamic(&mut self.dynamic, key, value)?;
            return set_dynamic(&mut self.hybrid.dynamic, key, value);
        }
        match key {
            "strategy" => self.strategy = value.parse()?,
            "backend" => {
                self.backend = Some(match value {
                    "sim" => BackendKind::Sim,
                    "host" => BackendKind::Host,
                    "cuda" => BackendKind::Cuda,
                    "cuda-vm" => BackendKind::CudaVirtual,
                    _ => return Err(bad(key, format!("`{value}` is not one of sim, host, cuda, cuda-vm"))),
                })
            }
            "page_size" => {
                let page = bytes(key, value)?;
                if page == 0 || page % MIB != 0 {
                    return Err(bad(key, format!("`{value}` is not a positive multiple of 1 MiB")));
                }
                self.page_size = Some(page);
            }
            "block_size" => self.fixed.block_size = bytes(key, value)?,
            "block_count" => self.fixed.block_count = number(key, value)?,
            "fallback" => {
                self.fixed.fallback = match value {
                    "backend" => Fallback::Backend,
                    "reject" => Fallback::Reject,
                    _ => return Err(bad(key, format!("`{value}` is not backend or reject"))),
                }
            }
            "classes" => {
                self.hybrid.classes = value
                    .split('+')
                    .filter(|c| !c.is_empty())
                    .map(|class| {
                        let (size, count) =
                            class.split_once('x').ok_or_else(|| bad(key, format!("`{class}` is not SIZExCOUNT")))?;
                        Ok(ClassSpec { block_size: bytes(key, size)?, block_count: number(key, count)? })
                    })
                    .collect::<Result<_>>()?
            }
            "warmup" => self.hybrid.warmup_requests = number(key, value)?,
            "coverage" => self.hybrid.coverage = number(key, value)?,
            "max_waste" => self.hybrid.max_rounding_waste = number(key, value)?,
            "waste_floor" => self.hybrid.waste_floor = bytes(key, value)?,
            "cached_waste" => self.hybrid.max_cached_waste = number(key, value)?,
            "max_classes" => self.hybrid.max_classes = number(key, value)?,
            "max_class_size" => self.hybrid.max_class_size = bytes(key, value)?,
            "headroom" => self.hybrid.slab_headroom = number(key, value)?,
            "watermark" => self.hybrid.watermark = number(key, value)?,
            "deterministic" => self.hybrid.deterministic = boolean(key, value)?,
            "drain_before_growth" => self.hybrid.drain_before_growth = boolean(key, value)?,
            _ => return Err(bad(key, "unknown key")),
        }
        Ok(())
    }

    /// The dynamic configuration in force: the hybrid's region for the hybrid, the dynamic pool's otherwise.
    pub fn dynamic(&self) -> &DynamicConfig {
        match self.strategy {
            Strategy::Hybrid => &self.hybrid.dynamic,
            _ => &self.dynamic,
        }
    }

    /// Checks every value against a device of `capacity` bytes, as building the pool would.
    pub fn validate(&self, capacity: u64) -> Result<()> {
        let checked = match self.strategy {
            Strategy::Fixed => self.fixed.validate(capacity).map(|_| ()),
            Strategy::Dynamic => self.dynamic.validate(capacity).map(|_| ()),
            Strategy::Hybrid => {
                self.hybrid.validate().and_then(|()| self.hybrid.dynamic.validate(capacity).map(|_| ()))
            }
        };
        checked.map_err(named_by_key)
    }

    /// Makes the pool on `backend`.
    pub fn build(&self, backend: Arc<dyn Backend>) -> Result<Arc<dyn Pool>> {
        Ok(match self.build_any(backend)? {
            AnyPool::Fixed(pool) => Arc::new(pool),
            AnyPool::Dynamic(pool) => Arc::new(pool),
            AnyPool::Hybrid(pool) => Arc::new(pool),
        })
    }

    /// Makes the pool this spec describes on `backend`, as an [`AnyPool`] (no vtable between a caller
    /// and the strategy).
    pub fn build_any(&self, backend: Arc<dyn Backend>) -> Result<AnyPool> {
        let built = match self.strategy {
            Strategy::Fixed => FixedPool::new(backend, self.fixed.clone()).map(AnyPool::Fixed),
            Strategy::Dynamic => DynamicPool::new(backend, self.dynamic.clone()).map(AnyPool::Dynamic),
            Strategy::Hybrid => HybridPool::new(backend, self.hybrid.clone()).map(AnyPool::Hybrid),
        };
        built.map_err(named_by_key)
    }

    /// The keys that differ from their defaults and matter for the strategy, `key=value` in the order of
    /// the table above (the strategy first).
    fn keys(&self) -> Vec<(&'static str, String)> {
        let default = PoolSpec::default();
        let mut keys = vec![("strategy", self.strategy.name().to_string())];
        if let Some(backend) = self.backend {
            keys.push(("backend", backend.name().to_string()));
        }
        if let Some(page) = self.page_size {
            keys.push(("page_size", format_bytes(page)));
        }
        let mut push = |key: &'static str, value: String, default_value: String| {
            if value != default_value {
                keys.push((key, value));
            }
        };
        if self.strategy == Strategy::Fixed {
            let (f, d) = (&self.fixed, &default.fixed);
            push("block_size", format_bytes(f.block_size), format_bytes(d.block_size));
            push("block_count", f.block_count.to_string(), d.block_count.to_string());
            let name = |fb: Fallback| if fb == Fallback::Reject { "reject" } else { "backend" }.to_string();
            push("fallback", name(f.fallback), name(d.fallback));
            return keys;
        }
        let (dy, dd) = match self.strategy {
            Strategy::Hybrid => (&self.hybrid.dynamic, &default.hybrid.dynamic),
            _ => (&self.dynamic, &default.dynamic),
        };
        push("initial_size", format_bytes(dy.initial_size), format_bytes(dd.initial_size));
        push("growth_factor", dy.growth_factor.to_string(), dd.growth_factor.to_string());
        let cap = |c: Cap| match c {
            Cap::Fraction(f) => f.to_string(),
            Cap::Bytes(b) => format_bytes(b),
        };
        push("cap", cap(dy.cap), cap(dd.cap));
        let vm = |v: VirtualMemory| if v == VirtualMemory::Off { "off" } else { "auto" }.to_string();
        push("virtual_memory", vm(dy.virtual_memory), vm(dd.virtual_memory));
        push("reclaim_idle", dy.reclaim_idle.to_string(), dd.reclaim_idle.to_string());
        push("wait_for_idle", dy.wait_for_idle.to_string(), dd.wait_for_idle.to_string());
        push("alias_in_use", dy.alias_in_use.to_string(), dd.alias_in_use.to_string());
        push("avoid_retiring", dy.avoid_retiring.to_string(), dd.avoid_retiring.to_string());
        if self.strategy == Strategy::Hybrid {
            let (h, d) = (&self.hybrid, &default.hybrid);
            let classes = |c: &[ClassSpec]| {
                c.iter()
                    .map(|c| format!("{}x{}", format_bytes(c.block_size), c.block_count))
                    .collect::<Vec<_>>()
                    .join("+")
            };
            push("classes", classes(&h.classes), classes(&d.classes));
            push("warmup", h.warmup_requests.to_string(), d.warmup_requests.to_string());
            push("coverage", h.coverage.to_string(), d.coverage.to_string());
            push("max_waste", h.max_rounding_waste.to_string(), d.max_rounding_waste.to_string());
            push("waste_floor", format_bytes(h.waste_floor), format_bytes(d.waste_floor));
            push("cached_waste", h.max_cached_waste.to_string(), d.max_cached_waste.to_string());
            push("max_classes", h.max_classes.to_string(), d.max_classes.to_string());
            push("max_class_size", format_bytes(h.max_class_size), format_bytes(d.max_class_size));
            push("headroom", h.slab_headroom.to_string(), d.slab_headroom.to_string());
            push("watermark", h.watermark.to_string(), d.watermark.to_string());
            push("deterministic", h.deterministic.to_string(), d.deterministic.to_string());
            push("drain_before_growth", h.drain_before_growth.to_string(), d.drain_before_growth.to_string());
        }
        keys
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

/// Configuration fields whose key in a config string has another name.
const FIELD_KEYS: [(&str, &str); 3] =
    [("max_rounding_waste", "max_waste"), ("max_cached_waste", "cached_waste"), ("slab_headroom", "headroom")];

/// `err` with a refused field named by its key in config strings, which is what the user wrote.
fn named_by_key(err: Error) -> Error {
    match err {
        Error::InvalidConfig { field, value, reason } => {
            let key = FIELD_KEYS.iter().find(|(name, _)| *name == field).map_or(field, |(_, key)| *key);
            Error::InvalidConfig { field: key, value, reason }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_bytes("512"), Some(512));
        assert_eq!(parse_bytes("4KiB"), Some(4096));
        assert_eq!(parse_bytes("1.5GiB"), Some(3 * GIB / 2));
        assert_eq!(parse_bytes("2GB"), Some(2_000_000_000));
        assert_eq!(parse_bytes("12 MiB"), Some(12 * MIB));
        assert_eq!(parse_bytes("lots"), None);
        assert_eq!(parse_bytes("4XiB"), None);
        assert_eq!(parse_bytes("99999999999TiB"), None);
        assert_eq!(format_bytes(256 * MIB), "256MiB");
        assert_eq!(format_bytes(1000), "1000");
    }

    #[test]
    fn the_empty_string_is_the_default() {
        assert_eq!(PoolSpec::parse("").unwrap(), PoolSpec::default());
        assert_eq!(PoolSpec::default().to_string(), "strategy=hybrid");
        // Each strategy keeps its own defaults: 1.5 for the dynamic pool, 1.01 for the hybrid's region.
        let dynamic = PoolSpec::parse("strategy=dynamic").unwrap();
        assert_eq!((dynamic.dynamic.growth_factor, dynamic.hybrid.dynamic.growth_factor), (1.5, 1.01));
        let both = PoolSpec::parse("growth_factor=1.2").unwrap();
        assert_eq!((both.dynamic.growth_factor, both.hybrid.dynamic.growth_factor), (1.2, 1.2));
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
            ("growth_factor=fast", "growth_factor"),
            ("classes=4KiB", "classes"),
            ("deterministic=maybe", "deterministic"),
            ("drain_before_growth=sometimes", "drain_before_growth"),
            ("watermark", "watermark"),
            ("page_size=3KiB", "page_size"),
            ("waste_floor=lots", "waste_floor"),
            ("cached_waste=lots", "cached_waste"),
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
            ("max_waste=2", "max_waste", "max_rounding_waste"),
            ("cached_waste=1.5", "cached_waste", "max_cached_waste"),
            ("headroom=0.5", "headroom", "slab_headroom"),
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
    fn every_strategy_builds() {
        for strategy in ["fixed", "dynamic", "hybrid"] {
            let spec = PoolSpec::parse(&format!("strategy={strategy},block_count=8")).unwrap();
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
