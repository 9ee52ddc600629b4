//! The counters of what a pool holds from its device and asks of it: reserved bytes and their peak, device
//! calls and their time, and the rare events (growths, moves, refusals). They change at device calls and
//! refusals only, never on an allocation served from memory already held, so plain atomics on shared
//! lines suit them.

use std::sync::atomic::{AtomicU64, Ordering};

/// Rare events, counted with plain atomics.
#[derive(Debug, Default)]
pub(crate) struct RareCounters {
    pub(crate) fallbacks: AtomicU64,
    pub(crate) ooms: AtomicU64,
    pub(crate) growths: AtomicU64,
    pub(crate) backend_calls: AtomicU64,
    pub(crate) chunks_moved: AtomicU64,
    pub(crate) chunks_aliased: AtomicU64,
    pub(crate) trimmed_bytes: AtomicU64,
    pub(crate) pre_expansions: AtomicU64,
    pub(crate) device_time_ns: AtomicU64,
    pub(crate) wait_time_ns: AtomicU64,
}

/// Reserved bytes, their peak, and the rare events of one pool.
#[derive(Debug, Default)]
pub(crate) struct ReservedCounters {
    reserved: AtomicU64,
    reserved_peak: AtomicU64,
    pub(crate) rare: RareCounters,
}

impl ReservedCounters {
    /// Adds `bytes` to the reserved bytes.
    pub(crate) fn add_reserved(&self, bytes: u64) {
        let now = self.reserved.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.reserved_peak.fetch_max(now, Ordering::Relaxed);
    }

    /// Takes `bytes` from the reserved bytes.
    pub(crate) fn sub_reserved(&self, bytes: u64) {
        self.reserved.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Bytes reserved now.
    pub(crate) fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Relaxed)
    }

    /// The most bytes reserved at once (since the last [`ReservedCounters::reset_peak`]).
    pub(crate) fn reserved_peak(&self) -> u64 {
        self.reserved_peak.load(Ordering::Relaxed)
    }

    /// Starts the peak again from the bytes reserved now.
    pub(crate) fn reset_peak(&self) {
        self.reserved_peak.store(self.reserved(), Ordering::Relaxed);
    }

    /// Counts one backend call.
    pub(crate) fn count_call(&self) {
        self.rare.backend_calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Runs `work` (device calls or waits made for a caller) and adds its wall time to `total`.
    pub(crate) fn timed<T>(total: &AtomicU64, work: impl FnOnce() -> T) -> T {
        let start = std::time::Instant::now();
        let result = work();
        total.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_stays_at_the_most_reserved() {
        let c = ReservedCounters::default();
        c.add_reserved(100);
        c.add_reserved(50);
        c.sub_reserved(120);
        c.add_reserved(10);
        assert_eq!((c.reserved(), c.reserved_peak()), (40, 150));
    }

    #[test]
    fn timed_work_adds_its_time_and_returns_its_result() {
        let total = AtomicU64::new(5);
        let value = ReservedCounters::timed(&total, || {
            std::thread::sleep(std::time::Duration::from_millis(2));
            7
        });
        assert_eq!(value, 7);
        assert!(total.load(Ordering::Relaxed) >= 5 + 2_000_000);
    }
}
