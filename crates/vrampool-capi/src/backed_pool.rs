//! A pool together with the device it takes its memory from, as the C functions use it: streams are
//! registered with a CUDA device before the pool sees them, and failures are counted for the stats.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use serde::Serialize;
use vrampool::{AnyPool, BackendKind, Pool, PoolReport, PoolSpec, PoolStats, ReportLimit, StreamId, StreamUses};

use crate::device_backend::{AddressRange, OpenedDevice, open_device};
use crate::error::CapiError;
use crate::known_streams::KnownStreams;
use crate::pool_counters::Counters;

/// The most segments the JSON report lists (`vrampool_pool_stats_json`): 1024.
pub const MAX_REPORTED_SEGMENTS: usize = 1024;

/// The most live blocks the JSON report lists (`vrampool_pool_stats_json`): 4096, so that the report of a
/// pool of millions of blocks takes less than a megabyte.
pub const MAX_REPORTED_BLOCKS: usize = 4096;

/// What the JSON report lists of a pool.
const REPORT_LIMIT: ReportLimit = ReportLimit { segments: MAX_REPORTED_SEGMENTS, blocks: MAX_REPORTED_BLOCKS };

/// The JSON object of [`BackedPool::to_json`], written straight to text.
#[derive(Serialize)]
struct JsonReport<'a> {
    device: Option<usize>,
    strategy: &'static str,
    backend: String,
    config: &'a str,
    utilization: f64,
    stats: &'a PoolStats,
    failed_allocations: u64,
    last_failure: Option<String>,
    streams_registered: usize,
    held_frees: u64,
    report: PoolReport,
}

/// A pool of the C ABI: the pool, its config string, and what the C functions keep beside it.
pub(crate) struct BackedPool {
    /// The pool, called without a vtable: the entry points' allocations and frees inline the strategy's;
    /// frees of blocks used on other streams are held back until that work has run.
    pool: StreamUses<AnyPool>,
    /// The config string the pool was made from, with every key that differs from its default.
    config: String,
    /// The streams registered with the device, for CUDA devices.
    streams: Option<KnownStreams>,
    failed_allocations: AtomicU64,
    last_failure: Mutex<Option<String>>,
    /// The address range of a simulated or host device, given back after the pool (fields drop in order).
    _range: Option<AddressRange>,
}

impl BackedPool {
    /// Makes the pool `spec` describes on device `ordinal`, of the kind its `backend` key names or else
    /// `default_kind`.
    pub(crate) fn build(spec: &PoolSpec, default_kind: BackendKind, ordinal: usize) -> Result<Self, CapiError> {
        let kind = spec.backend.unwrap_or(default_kind);
        let OpenedDevice { opened, range } = open_device(kind, ordinal, spec.page_size)?;
        let pool = spec.build_any(opened.backend)?;
        let config = PoolSpec { backend: Some(kind), ..spec.clone() }.to_string();
        Ok(BackedPool {
            pool: StreamUses::new(pool),
            config,
            streams: opened.cuda.map(KnownStreams::new),
            failed_allocations: AtomicU64::new(0),
            last_failure: Mutex::new(None),
            _range: range,
        })
    }

    /// The pool.
    #[cfg(test)]
    pub(crate) fn pool(&self) -> &AnyPool {
        self.pool.inner()
    }

    /// Allocates `size` bytes aligned to `alignment` for use on `stream`; returns the address.
    ///
    /// # Safety
    /// On a CUDA device, `stream` is 0 or a `CUstream` of the device's primary context that stays alive
    /// for as long as the pool (it is registered with the device on first sight). On other devices any
    /// number is a stream label.
    #[inline]
    pub(crate) unsafe fn allocate(&self, size: u64, alignment: u64, stream: u64) -> Result<u64, CapiError> {
        if let Some(streams) = &self.streams {
            // SAFETY: the caller's contract is the one `ensure` asks for.
            unsafe { streams.ensure(stream) };
        }
        match self.pool.allocate(size, alignment, StreamId(stream)) {
            Ok(allocation) => Ok(allocation.addr),
            Err(err) => {
                self.failed_allocations.fetch_add(1, Ordering::Relaxed);
                *self.last_failure.lock() = Some(err.to_string());
                Err(err.into())
            }
        }
    }

    /// Frees the allocation that starts at `addr`; where other streams were noted for it
    /// ([`BackedPool::record_stream`]), the pool gets it back once their queued work has run.
    #[inline]
    pub(crate) fn free(&self, addr: u64) -> Result<(), CapiError> {
        Ok(self.pool.free(addr)?)
    }

    /// Notes that work queued on `stream` uses the live block at `addr`.
    ///
    /// # Safety
    /// As for [`BackedPool::allocate`]: on a CUDA device, `stream` is 0 or a `CUstream` of the device's
    /// primary context that stays alive for as long as the pool.
    pub(crate) unsafe fn record_stream(&self, addr: u64, stream: u64) {
        if let Some(streams) = &self.streams {
            // SAFETY: the caller's contract is the one `ensure` asks for.
            unsafe { streams.ensure(stream) };
        }
        self.pool.record_stream(addr, StreamId(stream));
    }

    /// Sets the most the pool may hold from the device (`None`: its configured cap); returns the limit in
    /// force.
    pub(crate) fn set_limit(&self, bytes: Option<u64>) -> Result<u64, CapiError> {
        Ok(self.pool.set_limit(bytes)?)
    }

    /// Starts the peaks of allocated and reserved bytes again from their values now.
    pub(crate) fn reset_peaks(&self) {
        self.pool.reset_peaks();
    }

    /// Every segment and live block of the pool.
    pub(crate) fn report(&self) -> PoolReport {
        self.pool.report()
    }

    /// The pool's counters, without its detailed report.
    pub(crate) fn counters(&self) -> Counters {
        Counters::new(&self.pool.stats(), self.pool.counters(), self.failed_allocations.load(Ordering::Relaxed))
    }

    /// Gives wholly free memory back to the device; returns the bytes given back.
    pub(crate) fn trim(&self) -> Result<u64, CapiError> {
        Ok(self.pool.trim()?)
    }

    /// The pool's counters and its detailed report as one JSON object: `device` (or null), `strategy`,
    /// `backend`, `config`, `utilization`, `stats` (the counters: `allocated_bytes`, `reserved_bytes` as
    /// `{current, peak}`, ...), `failed_allocations`, `last_failure`, `streams_registered`, `held_frees`, and
    /// `report`: the segments and live blocks at the lowest addresses, at most [`MAX_REPORTED_SEGMENTS`]
    /// and [`MAX_REPORTED_BLOCKS`], with `segments_left_out` and `blocks_left_out` counting the others. Its
    /// memory is bounded, whatever the pool holds.
    pub(crate) fn to_json(&self, device: Option<usize>) -> String {
        let stats = self.pool.stats();
        let report = JsonReport {
            device,
            strategy: self.pool.strategy(),
            backend: self.pool.backend().name(),
            config: &self.config,
            utilization: stats.utilization(),
            stats: &stats,
            failed_allocations: self.failed_allocations.load(Ordering::Relaxed),
            last_failure: self.last_failure.lock().clone(),
            streams_registered: self.streams.as_ref().map_or(0, KnownStreams::len),
            held_frees: self.pool.counters().held_now,
            report: self.pool.report_within(REPORT_LIMIT),
        };
        serde_json::to_string(&report).expect("a report holds only numbers and strings")
    }
}

#[cfg(test)]
mod tests {
    use vrampool::DEFAULT_ALIGNMENT;

    use super::*;
    use crate::status::Status;

    fn host_pool(text: &str) -> BackedPool {
        BackedPool::build(&PoolSpec::parse(text).unwrap(), BackendKind::Host, 0).unwrap()
    }

    #[test]
    fn allocations_frees_and_failures_show_in_the_json() {
        let pool = host_pool("strategy=dynamic,initial_size=64MiB,cap=128MiB");
        // SAFETY: host memory: streams are labels.
        let a = unsafe { pool.allocate(1 << 20, DEFAULT_ALIGNMENT, 7) }.unwrap();
        // SAFETY: as above.
        let err = unsafe { pool.allocate(1 << 30, DEFAULT_ALIGNMENT, 7) }.unwrap_err();
        assert_eq!(err.status(), Status::OutOfMemory, "{err}");
        let json: serde_json::Value = serde_json::from_str(&pool.to_json(Some(2))).unwrap();
        assert_eq!(json["device"], 2);
        assert_eq!(json["strategy"], "dynamic");
        assert_eq!(json["config"], "strategy=dynamic,backend=host,initial_size=64MiB,cap=128MiB");
        assert_eq!(json["stats"]["allocated_bytes"]["current"], 1 << 20);
        assert_eq!(json["failed_allocations"], 1);
        assert!(json["last_failure"].as_str().unwrap().contains("1073741824"), "{}", json["last_failure"]);
        assert_eq!(json["report"]["blocks"][0]["addr"], a);
        assert_eq!(json["report"]["blocks"][0]["stream"], 7);
        pool.free(a).unwrap();
        assert_eq!(pool.free(a).unwrap_err().status(), Status::NotLive);
        assert!(pool.trim().unwrap() > 0, "the emptied pool gives memory back");
    }

    #[test]
    fn a_config_the_device_cannot_hold_is_a_config_error() {
        let spec = PoolSpec::parse("strategy=dynamic,initial_size=8GiB").unwrap();
        let err = BackedPool::build(&spec, BackendKind::Host, 0).err().unwrap();
        assert!(err.is_config(), "{err}");
        assert!(err.to_string().contains("initial_size"), "{err}");
    }
}
