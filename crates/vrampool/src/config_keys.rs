//! The keys of the config strings, in one table: each key's name, the pools it sets, how its value is
//! parsed and written back, the configuration field it names in error messages, and what the reference
//! says of its values. [`PoolSpec`]'s parser and printer, its error messages and the documented reference
//! (the table at the top of `pool_spec.rs`, checked against this one by a test) all come from it; the C
//! header's list of keys is checked against it by a test of the C ABI crate.

use crate::byte_format::{format_bytes, parse_bytes};
use crate::dynamic::{Cap, DynamicConfig, PagePolicy, Paging, VirtualMemory};
use crate::error::{Error, Result};
use crate::excerpt::excerpt;
use crate::fixed::Fallback;
use crate::hybrid::ClassSpec;
use crate::pool_spec::{BackendKind, PoolSpec, Strategy};
use crate::units::MIB;

/// The pools a config key sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyScope {
    /// Every pool: the strategy and the device.
    Any,
    /// The fixed pool.
    Fixed,
    /// The dynamic pool, and the hybrid's region.
    Dynamic,
    /// The hybrid pool.
    Hybrid,
}

impl KeyScope {
    /// Whether a key of this scope matters for a pool of `strategy`, other than the adaptive pool (whose
    /// keys [`ConfigKey::in_adaptive`] names).
    pub fn applies_to(self, strategy: Strategy) -> bool {
        match self {
            KeyScope::Any => true,
            KeyScope::Fixed => strategy == Strategy::Fixed,
            KeyScope::Dynamic => matches!(strategy, Strategy::Dynamic | Strategy::Hybrid),
            KeyScope::Hybrid => strategy == Strategy::Hybrid,
        }
    }

    /// The strategy whose default pool gives the key's default in the reference.
    fn reference_strategy(self) -> Strategy {
        match self {
            KeyScope::Any => Strategy::default(),
            KeyScope::Fixed => Strategy::Fixed,
            KeyScope::Dynamic => Strategy::Dynamic,
            KeyScope::Hybrid => Strategy::Hybrid,
        }
    }

    /// The scope as the reference names it.
    pub fn name(self) -> &'static str {
        match self {
            KeyScope::Any => "any pool",
            KeyScope::Fixed => "fixed pool",
            KeyScope::Dynamic => "dynamic pool, hybrid's region",
            KeyScope::Hybrid => "hybrid pool",
        }
    }
}

/// One key of the config strings.
#[derive(Clone, Copy, Debug)]
pub struct ConfigKey {
    /// The key as written: `growth_factor`.
    pub name: &'static str,
    /// The pools it sets.
    pub scope: KeyScope,
    /// Its values, as the reference describes them.
    pub values: &'static str,
    /// What the reference gives as its default where the default pool has no value for it (the key is
    /// then left out of printed config strings).
    unset: &'static str,
    /// The configuration field it sets, where that is named otherwise: validation errors name the field,
    /// and are reported with the key instead.
    field: Option<&'static str>,
    /// Where the key does not apply to the adaptive pool (the default): what takes its place there. A config
    /// string that sets it for the adaptive pool is refused with this ([`ConfigKey::refuse_in_adaptive`]).
    replaced_in_adaptive: Option<&'static str>,
    /// Whether the key sizes adaptive pages ([`PagePolicy`]): a dynamic pool or a hybrid's region on the
    /// device's pages has no use for it ([`ConfigKey::refuse_on_device_pages`]).
    sizes_adaptive_pages: bool,
    /// Sets the key's field (every field it sets, for a dynamic key) from its value.
    set: fn(&mut PoolSpec, Value<'_>) -> Result<()>,
    /// The key's value in a spec, as a config string writes it; `None` where the spec has none.
    get: fn(&PoolSpec) -> Option<String>,
}

impl ConfigKey {
    /// A key whose default pool has a value.
    const fn new(
        name: &'static str,
        scope: KeyScope,
        values: &'static str,
        set: fn(&mut PoolSpec, Value<'_>) -> Result<()>,
        get: fn(&PoolSpec) -> Option<String>,
    ) -> Self {
        ConfigKey {
            name,
            scope,
            values,
            unset: "",
            field: None,
            replaced_in_adaptive: None,
            sizes_adaptive_pages: false,
            set,
            get,
        }
    }

    /// The key, which does not apply to the adaptive pool: `replaced_by` says what takes its place there.
    const fn replaced_in_adaptive(mut self, replaced_by: &'static str) -> Self {
        self.replaced_in_adaptive = Some(replaced_by);
        self
    }

    /// Whether the key matters for a pool of `strategy`.
    pub fn applies_to(&self, strategy: Strategy) -> bool {
        match strategy {
            Strategy::Adaptive => self.replaced_in_adaptive.is_none(),
            _ => self.scope.applies_to(strategy),
        }
    }

    /// What the reference says of the key in the adaptive pool (the default): that it applies, or what
    /// takes its place.
    pub fn in_adaptive(&self) -> &'static str {
        self.replaced_in_adaptive.unwrap_or("applies")
    }

    /// The error for a config string that sets the key for the adaptive pool, where it does not apply; `None`
    /// where it does.
    pub(crate) fn refuse_in_adaptive(&self) -> Option<Error> {
        self.replaced_in_adaptive.map(|replaced_by| {
            bad(self.name, format!("does not apply to the adaptive pool (the default): {replaced_by}"))
        })
    }

    /// The key, which sizes adaptive pages only.
    const fn sizing_adaptive_pages(mut self) -> Self {
        self.sizes_adaptive_pages = true;
        self
    }

    /// The error for a config string that sets the key for a pool on the device's pages, where it sizes
    /// adaptive pages only; `None` where it does not.
    pub(crate) fn refuse_on_device_pages(&self) -> Option<Error> {
        self.sizes_adaptive_pages
            .then(|| bad(self.name, "sizes adaptive pages only: add paging=adaptive (the device's pages are one size)"))
    }

    /// The key, reported in errors in place of the configuration field `field`.
    const fn naming(mut self, field: &'static str) -> Self {
        self.field = Some(field);
        self
    }

    /// The key, whose default the reference gives as `unset` where the default pool has no value for it.
    const fn unset(mut self, unset: &'static str) -> Self {
        self.unset = unset;
        self
    }

    /// Sets the key on `spec` from `value`; an error naming the key where the value does not parse.
    pub(crate) fn set(&self, spec: &mut PoolSpec, value: &str) -> Result<()> {
        (self.set)(spec, Value { key: self.name, text: value })
    }

    /// The key's value in `spec`, as a config string writes it; `None` where `spec` has none.
    pub(crate) fn get(&self, spec: &PoolSpec) -> Option<String> {
        (self.get)(spec)
    }

    /// The key's default as the reference gives it: the value in the default pool of the strategies it sets
    /// (with the hybrid's region's where that differs, for a dynamic key), or what stands for it where there
    /// is none.
    pub fn default_text(&self) -> String {
        let value =
            |strategy| self.get(&PoolSpec { strategy, ..PoolSpec::default() }).filter(|v| !v.is_empty()).map(code);
        if self.scope == KeyScope::Dynamic {
            let (pool, region) = (value(Strategy::Dynamic), value(Strategy::Hybrid));
            if pool != region {
                let [pool, region] = [pool, region].map(|v| v.unwrap_or_else(|| self.unset.to_string()));
                return format!("{pool} (the hybrid's region: {region})");
            }
        }
        value(self.scope.reference_strategy()).unwrap_or_else(|| self.unset.to_string())
    }
}

/// A value as code in the reference: `` `1.5` ``.
fn code(value: String) -> String {
    format!("`{value}`")
}

/// What replaces the keys of the dynamic pool's growth in the adaptive pool.
const GROWS_BY_PAGES: &str = "it maps memory only under blocks, a page at a time, after moving idle pages there \
     (name strategy=dynamic or strategy=hybrid to choose how a pool grows)";

/// What replaces the keys of the idle pages' moves in the adaptive pool.
const ALWAYS_MOVES: &str = "it always moves idle pages before it maps new memory, aliasing those queued work \
     still uses on one stream, growing around them on several (waiting for them only at its cap), and places \
     blocks away from addresses still retiring (name strategy=dynamic or strategy=hybrid to choose)";

/// What replaces the keys of the hybrid's classes in the adaptive pool.
const NO_CLASSES: &str = "it keeps no size classes: every request is placed in its one range of pages, where \
     blocks of every size share pages (name strategy=hybrid for classes)";

/// What replaces the hybrid's background work in the adaptive pool.
const NO_BACKGROUND: &str = "it does all its work on the allocating thread, so its replays always repeat \
     exactly (name strategy=hybrid for a pool that grows in the background)";

/// What replaces the fixed pool's keys in the adaptive pool.
const FIXED_ONLY: &str = "it sets the fixed pool (name strategy=fixed)";

/// Every key of the config strings, in the order strings are printed and the reference lists them.
pub const CONFIG_KEYS: &[ConfigKey] = &[
    ConfigKey::new(
        "strategy",
        KeyScope::Any,
        "`fixed`, `dynamic`, `hybrid`, `adaptive`",
        |spec, v| v.text.parse().map(|value| spec.strategy = value),
        |spec| Some(spec.strategy.name().to_string()),
    ),
    ConfigKey::new(
        "backend",
        KeyScope::Any,
        "`sim`, `host`, `cuda`, `cuda-vm` (for front ends that make the device)",
        |spec, v| {
            spec.backend = Some(match v.text {
                "sim" => BackendKind::Sim,
                "host" => BackendKind::Host,
                "cuda" => BackendKind::Cuda,
                "cuda-vm" => BackendKind::CudaVirtual,
                _ => return Err(v.bad(format!("`{}` is not one of sim, host, cuda, cuda-vm", v.shown()))),
            });
            Ok(())
        },
        |spec| spec.backend.map(|kind| kind.name().to_string()),
    )
    .unset("the front end's"),
    ConfigKey::new(
        "page_size",
        KeyScope::Any,
        "virtual memory: bytes per physical page, a multiple of the device's granularity (larger pages mean \
         fewer, cheaper driver calls and coarser reclaiming)",
        |spec, v| {
            let page = v.bytes()?;
            if page == 0 || page % MIB != 0 {
                return Err(v.bad(format!("`{}` is not a positive multiple of 1 MiB", v.shown())));
            }
            spec.page_size = Some(page);
            Ok(())
        },
        |spec| spec.page_size.map(format_bytes),
    )
    .replaced_in_adaptive(
        "it sizes its pages itself, from the device's granularity up to the memory it holds divided by \
         `pages_per_pool` (name strategy=dynamic or strategy=hybrid to map pages of one size)",
    )
    .unset("the device's granularity"),
    ConfigKey::new(
        "block_size",
        KeyScope::Fixed,
        "bytes",
        |spec, v| v.bytes().map(|value| spec.fixed.block_size = value),
        |spec| Some(format_bytes(spec.fixed.block_size)),
    )
    .replaced_in_adaptive(FIXED_ONLY),
    ConfigKey::new(
        "block_count",
        KeyScope::Fixed,
        "a count",
        |spec, v| v.number().map(|value| spec.fixed.block_count = value),
        |spec| Some(spec.fixed.block_count.to_string()),
    )
    .replaced_in_adaptive(FIXED_ONLY),
    ConfigKey::new(
        "fallback",
        KeyScope::Fixed,
        "`backend` or `reject`",
        |spec, v| {
            spec.fixed.fallback = match v.text {
                "backend" => Fallback::Backend,
                "reject" => Fallback::Reject,
                _ => return Err(v.bad(format!("`{}` is not backend or reject", v.shown()))),
            };
            Ok(())
        },
        |spec| Some(if spec.fixed.fallback == Fallback::Reject { "reject" } else { "backend" }.to_string()),
    )
    .replaced_in_adaptive(FIXED_ONLY),
    ConfigKey::new(
        "initial_size",
        KeyScope::Dynamic,
        "bytes",
        |spec, v| set_dynamic(spec, v.bytes()?, |d, size| d.initial_size = size),
        |spec| Some(format_bytes(spec.dynamic().initial_size)),
    )
    .replaced_in_adaptive(GROWS_BY_PAGES),
    ConfigKey::new(
        "growth_factor",
        KeyScope::Dynamic,
        "a number above 1",
        |spec, v| set_dynamic(spec, v.number()?, |d, factor| d.growth_factor = factor),
        |spec| Some(spec.dynamic().growth_factor.to_string()),
    )
    .replaced_in_adaptive(GROWS_BY_PAGES),
    ConfigKey::new(
        "cap",
        KeyScope::Dynamic,
        "a fraction of the device in (0, 1] (`0.8`) or a size (`80GiB`)",
        |spec, v| {
            let cap = v.cap()?;
            spec.adaptive.cap = cap;
            set_dynamic(spec, cap, |d, cap| d.cap = cap)
        },
        |spec| {
            Some(match spec.dynamic().cap {
                Cap::Fraction(fraction) => fraction.to_string(),
                // `0B` and `1B`, not `0` and `1`, which read back as fractions.
                Cap::Bytes(bytes @ 0..=1) => format!("{bytes}B"),
                Cap::Bytes(bytes) => format_bytes(bytes),
            })
        },
    ),
    ConfigKey::new(
        "virtual_memory",
        KeyScope::Dynamic,
        "`auto` or `off`",
        |spec, v| {
            let virtual_memory = match v.text {
                "auto" => VirtualMemory::Auto,
                "off" => VirtualMemory::Off,
                _ => return Err(v.bad(format!("`{}` is not auto or off", v.shown()))),
            };
            spec.adaptive.virtual_memory = virtual_memory;
            set_dynamic(spec, virtual_memory, |d, vm| d.virtual_memory = vm)
        },
        |spec| Some(if spec.dynamic().virtual_memory == VirtualMemory::Off { "off" } else { "auto" }.to_string()),
    ),
    ConfigKey::new(
        "reclaim_idle",
        KeyScope::Dynamic,
        "`true` or `false`",
        |spec, v| set_dynamic(spec, v.boolean()?, |d, on| d.reclaim_idle = on),
        |spec| Some(spec.dynamic().reclaim_idle.to_string()),
    )
    .replaced_in_adaptive(ALWAYS_MOVES),
    ConfigKey::new(
        "wait_for_idle",
        KeyScope::Dynamic,
        "`true` or `false`",
        |spec, v| set_dynamic(spec, v.boolean()?, |d, on| d.wait_for_idle = on),
        |spec| Some(spec.dynamic().wait_for_idle.to_string()),
    )
    .replaced_in_adaptive(ALWAYS_MOVES),
    ConfigKey::new(
        "alias_in_use",
        KeyScope::Dynamic,
        "`true` or `false`",
        |spec, v| set_dynamic(spec, v.boolean()?, |d, on| d.alias_in_use = on),
        |spec| Some(spec.dynamic().alias_in_use.to_string()),
    )
    .replaced_in_adaptive(ALWAYS_MOVES),
    ConfigKey::new(
        "shards",
        KeyScope::Dynamic,
        "with virtual memory: the most shards threads that allocate at once spread over, each a range with its own lock, 1 to 64",
        |spec, v| {
            let shards = v.number()?;
            spec.adaptive.shards = shards;
            set_dynamic(spec, shards, |d, shards| d.shards = shards)
        },
        |spec| Some(spec.dynamic().shards.to_string()),
    ),
    ConfigKey::new(
        "avoid_retiring",
        KeyScope::Dynamic,
        "`true` or `false`",
        |spec, v| set_dynamic(spec, v.boolean()?, |d, on| d.avoid_retiring = on),
        |spec| Some(spec.dynamic().avoid_retiring.to_string()),
    )
    .replaced_in_adaptive(ALWAYS_MOVES),
    ConfigKey::new(
        "paging",
        KeyScope::Dynamic,
        "virtual memory: `device` (the device's pages, grown by the growth factor) or `adaptive` (pages sized \
         from the pool's memory as it grows, blocks placed where the fewest pages are missing, idle pages \
         moved before any new memory)",
        |spec, v| {
            let paging = match v.text {
                "device" => Paging::Device,
                // With the page keys given so far, whichever way round the string names them.
                "adaptive" => Paging::Adaptive(spec.adaptive.pages),
                _ => return Err(v.bad(format!("`{}` is not device or adaptive", v.text))),
            };
            set_dynamic(spec, paging, |d, paging| d.paging = paging)
        },
        |spec| Some(if spec.dynamic().paging == Paging::Device { "device" } else { "adaptive" }.to_string()),
    )
    .replaced_in_adaptive("its pages are always adaptive (name strategy=dynamic or strategy=hybrid to choose)"),
    ConfigKey::new(
        "pages_per_pool",
        KeyScope::Dynamic,
        "with adaptive pages: a new page holds at most the pool's memory divided by this, 1 or more (more: \
         smaller pages, less memory idle in them, more driver calls)",
        |spec, v| {
            let pages_per_pool = v.number()?;
            if pages_per_pool == 0 {
                return Err(v.bad("`0` is not 1 or more"));
            }
            set_pages(spec, |pages| pages.pages_per_pool = pages_per_pool)
        },
        |spec| adaptive_pages(spec, |pages| pages.pages_per_pool),
    )
    .unset("`256` (with adaptive pages)")
    .sizing_adaptive_pages(),
    ConfigKey::new(
        "driver_per_mille",
        KeyScope::Dynamic,
        "with adaptive pages: thousandths of the time that moving idle pages may take in the driver, 0 to 1000 \
         (1000: no bound; past it, new pages are mapped instead, but for a block lacking a 32nd of the pool, \
         which may take up to 3 times it)",
        |spec, v| {
            let per_mille = v.number()?;
            if per_mille > 1000 {
                return Err(v.bad(format!("`{}` is not 0 to 1000", v.shown())));
            }
            set_pages(spec, |pages| pages.driver_per_mille = per_mille)
        },
        |spec| adaptive_pages(spec, |pages| pages.driver_per_mille),
    )
    .unset("`10` (with adaptive pages)")
    .sizing_adaptive_pages(),
    ConfigKey::new(
        "classes",
        KeyScope::Hybrid,
        "given classes, `SIZExCOUNT` joined by `+` (`4KiBx512+1MiBx64`)",
        |spec, v| {
            spec.hybrid.classes = v
                .text
                .split('+')
                .filter(|c| !c.is_empty())
                .map(|class| {
                    let (size, count) = class
                        .split_once('x')
                        .ok_or_else(|| v.bad(format!("`{}` is not SIZExCOUNT", excerpt(class))))?;
                    Ok(ClassSpec { block_size: v.with(size).bytes()?, block_count: v.with(count).number()? })
                })
                .collect::<Result<_>>()?;
            Ok(())
        },
        |spec| {
            let classes: Vec<String> = spec
                .hybrid
                .classes
                .iter()
                .map(|c| format!("{}x{}", format_bytes(c.block_size), c.block_count))
                .collect();
            Some(classes.join("+"))
        },
    )
    .replaced_in_adaptive(NO_CLASSES)
    .unset("learned"),
    ConfigKey::new(
        "warmup",
        KeyScope::Hybrid,
        "requests",
        |spec, v| v.number().map(|value| spec.hybrid.warmup_requests = value),
        |spec| Some(spec.hybrid.warmup_requests.to_string()),
    )
    .replaced_in_adaptive(NO_CLASSES),
    ConfigKey::new(
        "coverage",
        KeyScope::Hybrid,
        "a fraction of requests",
        |spec, v| v.number().map(|value| spec.hybrid.coverage = value),
        |spec| Some(spec.hybrid.coverage.to_string()),
    )
    .replaced_in_adaptive(NO_CLASSES),
    ConfigKey::new(
        "max_waste",
        KeyScope::Hybrid,
        "a fraction of a block",
        |spec, v| v.number().map(|value| spec.hybrid.max_rounding_waste = value),
        |spec| Some(spec.hybrid.max_rounding_waste.to_string()),
    )
    .replaced_in_adaptive(NO_CLASSES)
    .naming("max_rounding_waste"),
    ConfigKey::new(
        "waste_floor",
        KeyScope::Hybrid,
        "bytes",
        |spec, v| v.bytes().map(|value| spec.hybrid.waste_floor = value),
        |spec| Some(format_bytes(spec.hybrid.waste_floor)),
    )
    .replaced_in_adaptive(NO_CLASSES),
    ConfigKey::new(
        "cached_waste",
        KeyScope::Hybrid,
        "a fraction of a block",
        |spec, v| v.number().map(|value| spec.hybrid.max_cached_waste = value),
        |spec| Some(spec.hybrid.max_cached_waste.to_string()),
    )
    .replaced_in_adaptive(NO_CLASSES)
    .naming("max_cached_waste"),
    ConfigKey::new(
        "max_classes",
        KeyScope::Hybrid,
        "a count",
        |spec, v| v.number().map(|value| spec.hybrid.max_classes = value),
        |spec| Some(spec.hybrid.max_classes.to_string()),
    )
    .replaced_in_adaptive(NO_CLASSES),
    ConfigKey::new(
        "max_class_size",
        KeyScope::Hybrid,
        "bytes",
        |spec, v| v.bytes().map(|value| spec.hybrid.max_class_size = value),
        |spec| Some(format_bytes(spec.hybrid.max_class_size)),
    )
    .replaced_in_adaptive(NO_CLASSES),
    ConfigKey::new(
        "headroom",
        KeyScope::Hybrid,
        "a multiple of the blocks seen live, 1 or more",
        |spec, v| v.number().map(|value| spec.hybrid.slab_headroom = value),
        |spec| Some(spec.hybrid.slab_headroom.to_string()),
    )
    .replaced_in_adaptive(NO_CLASSES)
    .naming("slab_headroom"),
    ConfigKey::new(
        "watermark",
        KeyScope::Hybrid,
        "a fraction of the class blocks in use",
        |spec, v| v.number().map(|value| spec.hybrid.watermark = value),
        |spec| Some(spec.hybrid.watermark.to_string()),
    )
    .replaced_in_adaptive("it never grows ahead of need (name strategy=hybrid for a watermark)"),
    ConfigKey::new(
        "deterministic",
        KeyScope::Hybrid,
        "`true` or `false`",
        |spec, v| v.boolean().map(|value| spec.hybrid.deterministic = value),
        |spec| Some(spec.hybrid.deterministic.to_string()),
    )
    .replaced_in_adaptive(NO_BACKGROUND),
    ConfigKey::new(
        "drain_before_growth",
        KeyScope::Hybrid,
        "`true` or `false`",
        |spec, v| v.boolean().map(|value| spec.hybrid.drain_before_growth = value),
        |spec| Some(spec.hybrid.drain_before_growth.to_string()),
    )
    .replaced_in_adaptive(NO_CLASSES),
];

/// The key named `name`.
pub(crate) fn find(name: &str) -> Option<&'static ConfigKey> {
    CONFIG_KEYS.iter().find(|key| key.name == name)
}

/// The key that sets the configuration field `field` (the field's own name where no key names it
/// otherwise).
pub(crate) fn key_of_field(field: &'static str) -> &'static str {
    CONFIG_KEYS.iter().find(|key| key.field == Some(field)).map_or(field, |key| key.name)
}

/// Sets the field `assign` names to `value` in the dynamic pool's configuration and in the hybrid's
/// region's alike.
fn set_dynamic<T: Copy>(spec: &mut PoolSpec, value: T, assign: fn(&mut DynamicConfig, T)) -> Result<()> {
    assign(&mut spec.dynamic, value);
    assign(&mut spec.hybrid.dynamic, value);
    Ok(())
}

/// Changes the page sizes of adaptive pages: the adaptive pool's, and the dynamic pool's and the hybrid's
/// region's where their pages are adaptive (or become so: `paging=adaptive` takes them as set here).
fn set_pages(spec: &mut PoolSpec, change: impl Fn(&mut PagePolicy)) -> Result<()> {
    change(&mut spec.adaptive.pages);
    for dynamic in [&mut spec.dynamic, &mut spec.hybrid.dynamic] {
        if let Paging::Adaptive(pages) = &mut dynamic.paging {
            change(pages);
        }
    }
    Ok(())
}

/// A field (`field`) of the page sizes in force where the pool's pages are adaptive, where it differs from
/// its default (which config strings leave out, with the device's pages, where it does not apply).
fn adaptive_pages(spec: &PoolSpec, field: fn(&PagePolicy) -> u64) -> Option<String> {
    match spec.dynamic().paging {
        Paging::Adaptive(pages) if field(&pages) != field(&PagePolicy::default()) => Some(field(&pages).to_string()),
        _ => None,
    }
}

/// An error naming `key` (quoted by its start where it is long), for a value it does not take.
pub(crate) fn bad(key: &str, reason: impl Into<String>) -> Error {
    Error::BadConfigString { key: excerpt(key), reason: reason.into() }
}

/// A value given for a key, parsed as the key needs it; its errors name the key.
#[derive(Clone, Copy)]
struct Value<'a> {
    key: &'static str,
    text: &'a str,
}

impl<'a> Value<'a> {
    /// Part of the value, `text`, parsed for the same key.
    fn with(self, text: &'a str) -> Self {
        Value { text, ..self }
    }

    /// An error naming the key.
    fn bad(self, reason: impl Into<String>) -> Error {
        bad(self.key, reason)
    }

    /// The value as error messages quote it.
    fn shown(self) -> String {
        excerpt(self.text)
    }

    /// The value as a number.
    fn number<T: std::str::FromStr>(self) -> Result<T> {
        self.text.parse().map_err(|_| self.bad(format!("`{}` is not a number", self.shown())))
    }

    /// The value as a byte count.
    fn bytes(self) -> Result<u64> {
        parse_bytes(self.text).ok_or_else(|| self.bad(format!("`{}` is not a byte count (like 512MiB)", self.shown())))
    }

    /// The value as a cap: a fraction of the device in (0, 1] (`0.8`, `1`), or a size (`80GiB`; a whole
    /// number above 1 without a unit is bytes). Anything else, `1.5` or `0` among them, is an error.
    fn cap(self) -> Result<Cap> {
        let text = self.text;
        let neither = || {
            self.bad(format!(
                "`{}` is neither a fraction of the device in (0, 1] (like 0.8) nor a size (like 80GiB)",
                self.shown()
            ))
        };
        if text.ends_with(|c: char| c.is_ascii_alphabetic()) {
            return parse_bytes(text).map(Cap::Bytes).ok_or_else(neither);
        }
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            return match text.parse::<u64>() {
                Ok(1) => Ok(Cap::Fraction(1.0)),
                Ok(bytes) if bytes > 1 => Ok(Cap::Bytes(bytes)),
                _ => Err(neither()),
            };
        }
        match text.parse::<f64>() {
            Ok(fraction) if fraction > 0.0 && fraction <= 1.0 => Ok(Cap::Fraction(fraction)),
            _ => Err(neither()),
        }
    }

    /// The value as true or false.
    fn boolean(self) -> Result<bool> {
        match self.text {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(self.bad(format!("`{}` is not true or false", self.shown()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference table of the keys, as the documentation at the top of `pool_spec.rs` shows it: a row per
    /// key, its scope, values and default.
    fn reference_table() -> String {
        let mut table = String::from(
            "| key | sets | values | default | in the adaptive pool (the default) |\n| --- | --- | --- | --- | --- |\n",
        );
        for key in CONFIG_KEYS {
            table += &format!(
                "| `{}` | {} | {} | {} | {} |\n",
                key.name,
                key.scope.name(),
                key.values,
                key.default_text(),
                key.in_adaptive()
            );
        }
        table
    }

    /// The reference table in `pool_spec.rs`'s documentation is the one the key table makes.
    #[test]
    fn the_documented_reference_is_the_key_table() {
        let source = include_str!("pool_spec.rs");
        let documented: String =
            source.lines().filter_map(|line| line.strip_prefix("//! | ")).map(|row| format!("| {row}\n")).collect();
        let expected = reference_table();
        assert!(
            documented == expected,
            "pool_spec.rs documents other keys than the key table; its table should read:\n{}",
            expected.lines().map(|line| format!("//! {line}\n")).collect::<String>()
        );
    }

    #[test]
    fn every_key_is_named_once_and_found_by_its_name() {
        for (i, key) in CONFIG_KEYS.iter().enumerate() {
            assert!(CONFIG_KEYS[..i].iter().all(|other| other.name != key.name), "{} twice", key.name);
            assert_eq!(find(key.name).map(|k| k.name), Some(key.name));
        }
        assert!(find("colour").is_none());
        assert_eq!(key_of_field("slab_headroom"), "headroom");
        assert_eq!(key_of_field("growth_factor"), "growth_factor");
    }

    #[test]
    fn defaults_read_from_the_default_pools() {
        let default = |name| find(name).unwrap().default_text();
        assert_eq!(default("strategy"), "`adaptive`");
        assert_eq!(default("initial_size"), "`256MiB`");
        assert_eq!(default("growth_factor"), "`1.5` (the hybrid's region: `1.01`)");
        assert_eq!(default("classes"), "learned");
        assert_eq!(default("backend"), "the front end's");
        assert_eq!(default("page_size"), "the device's granularity");
        assert_eq!(default("coverage"), "`0.9`");
        assert_eq!(default("block_size"), "`4MiB`");
    }
}
