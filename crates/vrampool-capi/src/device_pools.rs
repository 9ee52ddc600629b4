//! One pool per device for the PyTorch entry points, made on the first allocation on each device from
//! the config string in `VRAMPOOL_CONF`.
//!
//! A config that can never work (a bad key or value, or values the device cannot hold) is reported once
//! on stderr and makes every allocation fail with that reason; it never falls back to a default. A device
//! that fails to open (no driver, a failed driver call) is reported once per device and tried again at the
//! next allocation.

use std::io::Write;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use vrampool::{BackendKind, DynamicConfig, MIB, PoolSpec, Strategy, VirtualMemory, excerpt};

use crate::backed_pool::BackedPool;
use crate::error::CapiError;
use crate::pool_api::NO_LIMIT;

/// The most devices the PyTorch entry points serve (ordinals 0 to 63).
pub const MAX_DEVICES: usize = 64;

/// The environment variable that holds the config string of the device pools.
pub const CONFIG_VARIABLE: &str = "VRAMPOOL_CONF";

/// The device where `VRAMPOOL_CONF` names no `backend`: CUDA virtual memory of the device's ordinal.
pub const DEFAULT_DEVICE_BACKEND: BackendKind = BackendKind::CudaVirtual;

/// Where a private pool (`vrampool_device_private_pool_create`) starts: one 2 MiB unit, what `cuMemAlloc` hands out at
/// least; it grows by the device config's growth factor.
pub const PRIVATE_INITIAL_SIZE: u64 = 2 * MIB;

/// The config of a private pool beside device pools of `spec`: the dynamic pool on the same device and
/// page size, with the same cap and growth factor, starting from [`PRIVATE_INITIAL_SIZE`] in plain segments.
/// Segments, because a pool on virtual memory moves idle pages and so records and waits for events even on
/// one stream, which a CUDA graph capture forbids.
pub(crate) fn private_spec(spec: &PoolSpec) -> PoolSpec {
    let device = spec.dynamic();
    let dynamic = DynamicConfig {
        initial_size: PRIVATE_INITIAL_SIZE,
        growth_factor: device.growth_factor,
        cap: device.cap,
        virtual_memory: VirtualMemory::Off,
        ..DynamicConfig::default()
    };
    PoolSpec {
        strategy: Strategy::Dynamic,
        backend: spec.backend,
        page_size: spec.page_size,
        dynamic,
        ..PoolSpec::default()
    }
}

/// One device's pool, once made.
struct DeviceSlot {
    pool: OnceLock<BackedPool>,
    /// Held while the pool is made; holds the config error that stops it ever being made.
    making: Mutex<Option<CapiError>>,
    /// Whether a failure to open the device was reported on stderr.
    device_failure_reported: AtomicBool,
    /// The limit set before the pool was made, applied when it is ([`NO_LIMIT`] for none).
    limit: AtomicU64,
}

impl Default for DeviceSlot {
    fn default() -> Self {
        DeviceSlot {
            pool: OnceLock::new(),
            making: Mutex::new(None),
            device_failure_reported: AtomicBool::new(false),
            limit: AtomicU64::new(NO_LIMIT),
        }
    }
}

/// Where the config string comes from.
enum ConfigSource {
    /// `VRAMPOOL_CONF`, read when the first pool is made.
    Environment,
    /// Given (`None`: every default).
    #[cfg(test)]
    Given(Option<String>),
}

/// The config string of the device pools, read once.
struct Config {
    /// The string, as given.
    text: Option<String>,
    /// The parsed config, or why it is refused.
    spec: Result<PoolSpec, CapiError>,
}

impl Config {
    fn new(text: Option<String>) -> Self {
        let spec = match &text {
            None => Ok(PoolSpec::default()),
            Some(text) => PoolSpec::parse(text).map_err(|source| CapiError::EnvConfig { text: excerpt(text), source }),
        };
        Config { text, spec }
    }

    fn from_env() -> Self {
        match std::env::var_os(CONFIG_VARIABLE) {
            None => Config::new(None),
            Some(value) => match value.into_string() {
                Ok(text) => Config::new(Some(text)),
                Err(_) => Config { text: None, spec: Err(CapiError::EnvConfigNotUtf8) },
            },
        }
    }
}

/// The pools of the PyTorch entry points, one per device.
pub(crate) struct DevicePools {
    source: ConfigSource,
    /// The config, read when the first pool is made (so a program may set `VRAMPOOL_CONF` until then).
    config: OnceLock<Config>,
    slots: Box<[DeviceSlot]>,
    /// Whether a config error was reported on stderr.
    config_reported: AtomicBool,
}

impl DevicePools {
    /// The device pools configured by `VRAMPOOL_CONF` (unset: every default), read when the first pool is
    /// made.
    pub(crate) fn from_env() -> Self {
        DevicePools::with_source(ConfigSource::Environment)
    }

    /// The device pools configured by `text` (`None`: every default).
    #[cfg(test)]
    pub(crate) fn new(text: Option<String>) -> Self {
        DevicePools::with_source(ConfigSource::Given(text))
    }

    fn with_source(source: ConfigSource) -> Self {
        DevicePools {
            source,
            config: OnceLock::new(),
            slots: (0..MAX_DEVICES).map(|_| DeviceSlot::default()).collect(),
            config_reported: AtomicBool::new(false),
        }
    }

    fn config(&self) -> &Config {
        self.config.get_or_init(|| match &self.source {
            ConfigSource::Environment => Config::from_env(),
            #[cfg(test)]
            ConfigSource::Given(text) => Config::new(text.clone()),
        })
    }

    /// The ordinal of a device number from C, if this library serves it.
    pub(crate) fn ordinal(function: &'static str, device: i32) -> Result<usize, CapiError> {
        // `ok_or_else`: an error built eagerly costs its construction and drop on every call.
        usize::try_from(device).ok().filter(|&ordinal| ordinal < MAX_DEVICES).ok_or_else(|| CapiError::BadDevice {
            function,
            device: device.into(),
            last: MAX_DEVICES - 1,
        })
    }

    /// The pool of device `ordinal` (below [`MAX_DEVICES`]) if it has been made.
    pub(crate) fn existing(&self, ordinal: usize) -> Option<&BackedPool> {
        self.slots[ordinal].pool.get()
    }

    /// The pool of device `ordinal`, or why there is none: the config error where the config is refused,
    /// else that no allocation has made it yet.
    #[inline]
    pub(crate) fn existing_or_why(&self, function: &'static str, ordinal: usize) -> Result<&BackedPool, CapiError> {
        match self.existing(ordinal) {
            Some(pool) => Ok(pool),
            None => Err(self.why_none(function, ordinal)),
        }
    }

    /// Why device `ordinal` has no pool. Out of line: every free and stats call looks the pool up first.
    #[cold]
    fn why_none(&self, function: &'static str, ordinal: usize) -> CapiError {
        self.config_error(ordinal).unwrap_or(CapiError::NoDevicePool { function, device: ordinal })
    }

    /// Every pool made so far, with its ordinal.
    pub(crate) fn all(&self) -> impl Iterator<Item = (usize, &BackedPool)> {
        self.slots.iter().enumerate().filter_map(|(ordinal, slot)| slot.pool.get().map(|pool| (ordinal, pool)))
    }

    /// The config error that stops device `ordinal`'s pool being made, if there is one.
    fn config_error(&self, ordinal: usize) -> Option<CapiError> {
        match self.config.get().map(|config| &config.spec) {
            Some(Err(err)) => Some(err.clone()),
            _ => self.slots[ordinal].making.lock().clone(),
        }
    }

    /// The pool of device `ordinal` (below [`MAX_DEVICES`]), made now if this is the first use.
    #[inline]
    pub(crate) fn get_or_make(&self, ordinal: usize) -> Result<&BackedPool, CapiError> {
        match self.slots[ordinal].pool.get() {
            Some(pool) => Ok(pool),
            None => self.make(ordinal),
        }
    }

    #[cold]
    fn make(&self, ordinal: usize) -> Result<&BackedPool, CapiError> {
        let config = self.config();
        let spec = match &config.spec {
            Ok(spec) => spec,
            Err(err) => {
                self.report_config(err);
                return Err(err.clone());
            }
        };
        let slot = &self.slots[ordinal];
        let mut making = slot.making.lock();
        if let Some(pool) = slot.pool.get() {
            return Ok(pool);
        }
        if let Some(err) = making.as_ref() {
            return Err(err.clone());
        }
        match BackedPool::build(spec, DEFAULT_DEVICE_BACKEND, ordinal) {
            Ok(pool) => {
                let limit = slot.limit.load(Ordering::Relaxed);
                if limit != NO_LIMIT {
                    pool.set_limit(Some(limit))?;
                }
                Ok(slot.pool.get_or_init(|| pool))
            }
            Err(err) if err.is_config() => {
                let err = match (err, &config.text) {
                    (CapiError::Pool(source), Some(text)) => CapiError::EnvConfig { text: excerpt(text), source },
                    (err, _) => err,
                };
                *making = Some(err.clone());
                self.report_config(&err);
                Err(err)
            }
            Err(err) => {
                if !slot.device_failure_reported.swap(true, Ordering::Relaxed) {
                    report(&format!(
                        "vrampool: the pool of device {ordinal} could not be made: {err}; allocations on the \
                         device fail until it can be (it is tried again at each allocation)"
                    ));
                }
                Err(err)
            }
        }
    }

    /// Sets the limit of device `ordinal`'s pool (`None`: its configured cap), now where the pool exists and
    /// when it is made otherwise; returns the limit in force (the one given, before the pool is made).
    pub(crate) fn set_limit(&self, ordinal: usize, bytes: Option<u64>) -> Result<u64, CapiError> {
        let slot = &self.slots[ordinal];
        let _making = slot.making.lock();
        slot.limit.store(bytes.unwrap_or(NO_LIMIT), Ordering::Relaxed);
        match slot.pool.get() {
            Some(pool) => pool.set_limit(bytes),
            None => Ok(bytes.unwrap_or(NO_LIMIT)),
        }
    }

    /// A private pool on device `ordinal` ([`private_spec`] of the device pools' config).
    pub(crate) fn make_private(&self, ordinal: usize) -> Result<BackedPool, CapiError> {
        let spec = match &self.config().spec {
            Ok(spec) => private_spec(spec),
            Err(err) => {
                self.report_config(err);
                return Err(err.clone());
            }
        };
        BackedPool::build(&spec, DEFAULT_DEVICE_BACKEND, ordinal)
    }

    /// Reports a config error on stderr, the first time only.
    fn report_config(&self, err: &CapiError) {
        if !self.config_reported.swap(true, Ordering::Relaxed) {
            report(&format!(
                "vrampool: {err}. Every allocation through vrampool fails (returns NULL) until {CONFIG_VARIABLE} is \
                 fixed; vrampool does not fall back to a default."
            ));
        }
    }
}

/// Writes one line on stderr; a closed stderr is ignored (a library must not fail for want of a log).
pub(crate) fn report(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::Status;

    #[test]
    fn each_device_gets_its_own_pool_on_first_use() {
        let pools = DevicePools::new(Some("backend=host,strategy=dynamic,initial_size=64MiB".into()));
        assert!(pools.existing(0).is_none());
        assert_eq!(pools.existing_or_why("f", 0).err().unwrap().status(), Status::NoPool);
        let first = pools.get_or_make(0).unwrap() as *const BackedPool;
        assert_eq!(pools.get_or_make(0).unwrap() as *const BackedPool, first, "made once");
        pools.get_or_make(5).unwrap();
        let ordinals: Vec<usize> = pools.all().map(|(ordinal, _)| ordinal).collect();
        assert_eq!(ordinals, [0, 5]);
    }

    /// Threads that all use a device for the first time at once all get the same pool.
    #[test]
    fn threads_using_a_device_first_at_once_share_one_pool() {
        let pools = DevicePools::new(Some("backend=host,strategy=dynamic,initial_size=64MiB".into()));
        let barrier = std::sync::Barrier::new(8);
        let made: Vec<usize> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..8)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        pools.get_or_make(2).unwrap() as *const BackedPool as usize
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        assert!(made.iter().all(|&p| p == made[0]), "one pool for every thread");
        assert_eq!(pools.all().count(), 1);
    }

    #[test]
    fn a_bad_config_fails_every_time_naming_the_key() {
        let pools = DevicePools::new(Some("backend=host,colour=blue".into()));
        for _ in 0..3 {
            let err = pools.get_or_make(0).err().unwrap();
            assert_eq!(err.status(), Status::BadConfig);
            assert!(err.to_string().contains("`colour`"), "{err}");
            assert!(err.to_string().contains("VRAMPOOL_CONF"), "{err}");
        }
        assert!(pools.config_reported.load(Ordering::Relaxed));
        assert!(pools.existing_or_why("f", 0).err().unwrap().to_string().contains("colour"));
    }

    #[test]
    fn a_long_config_is_quoted_by_its_start() {
        let long = format!("backend=host,{}", "colour=blue,".repeat(100_000));
        let pools = DevicePools::new(Some(long));
        let message = pools.get_or_make(0).err().unwrap().to_string();
        assert!(message.len() < 300, "{} bytes: {}", message.len(), &message[..300]);
        // The first 100 characters.
        let quoted = format!("backend=host,{}col... (1200013 bytes)", "colour=blue,".repeat(7));
        assert!(message.starts_with(&format!("VRAMPOOL_CONF=`{quoted}` is invalid")), "{message}");
    }

    #[test]
    fn values_the_device_cannot_hold_are_a_config_error_too() {
        let pools = DevicePools::new(Some("backend=host,strategy=dynamic,initial_size=16GiB".into()));
        for _ in 0..2 {
            let err = pools.get_or_make(1).err().unwrap();
            assert_eq!(err.status(), Status::BadConfig, "{err}");
            assert!(err.to_string().starts_with("VRAMPOOL_CONF=`"), "{err}");
            assert!(err.to_string().contains("initial_size"), "{err}");
        }
    }

    #[test]
    fn private_pools_are_dynamic_on_segments_with_the_device_cap() {
        let pools = DevicePools::new(Some("backend=host,strategy=hybrid,cap=2GiB,growth_factor=1.2".into()));
        let private = pools.make_private(0).unwrap();
        let json: serde_json::Value = serde_json::from_str(&private.to_json(None)).unwrap();
        assert_eq!(json["strategy"], "dynamic");
        let config = json["config"].as_str().unwrap();
        for key in ["backend=host", "initial_size=2MiB", "cap=2GiB", "growth_factor=1.2", "virtual_memory=off"] {
            assert!(config.contains(key), "{key} in {config}");
        }
        let bad = DevicePools::new(Some("backend=host,colour=blue".into()));
        assert_eq!(bad.make_private(0).err().unwrap().status(), Status::BadConfig);
    }

    #[test]
    fn ordinals_out_of_range_are_refused() {
        assert_eq!(DevicePools::ordinal("f", 3).unwrap(), 3);
        for device in [-1, MAX_DEVICES as i32, i32::MAX] {
            let err = DevicePools::ordinal("f", device).unwrap_err();
            assert_eq!(err.status(), Status::BadArgument, "{err}");
        }
    }
}
