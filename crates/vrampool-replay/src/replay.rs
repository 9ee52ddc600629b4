//! Running a plan through one pool on the simulated device.

use std::sync::Arc;
use std::time::{Duration, Instant};

use vrampool::{
    Backend, BackendKind, ClassSpec, DEFAULT_ALIGNMENT, Error as PoolError, Pool, PoolSpec, SimDevice, SimDeviceConfig,
    StreamId,
};
use vrampool_cuda::{DeviceRequest, open_backend};
use vrampool_trace::{Event, EventKind};

use crate::error::{Error, Result};
use crate::replay_plan::{Operation, ReplayPlan};
use crate::replay_result::{ReplayResult, TimelinePoint};

/// How a replay runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayOptions {
    /// The simulated device's memory in bytes. Default: 141 GB, an H200.
    pub capacity: u64,
    /// Points of live and reserved bytes kept along the replay. Default: 1000.
    pub timeline_points: usize,
    /// How far the simulated GPU runs behind the program, in microseconds of trace time
    /// ([`SimDeviceConfig::gpu_lag_us`]): memory freed is known idle only this long after its free, as on a
    /// GPU still running the work queued before it. Default: 0 (an idle GPU).
    pub gpu_lag_us: u64,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions { capacity: SimDeviceConfig::default().capacity, timeline_points: 1000, gpu_lag_us: 0 }
    }
}

/// Marks a slot whose allocation was refused (its free is skipped).
const NO_BLOCK: u64 = u64::MAX;

/// Replays `plan` through a pool made from `spec` on a fresh simulated device.
///
/// The hybrid pool runs deterministically (its background work inline) so that a replay repeats exactly.
/// Allocations refused for lack of memory are counted and their frees skipped; any other pool error ends
/// the replay. The pool's own CPU time is measured around the pool calls only.
pub fn replay(plan: &ReplayPlan, spec: &PoolSpec, options: &ReplayOptions) -> Result<ReplayResult> {
    replay_logged(plan, spec, options, &mut |_| Ok(()))
}

/// [`replay`], passing every allocation and free the pool performed, with the pool's addresses, to `log`.
pub fn replay_logged(
    plan: &ReplayPlan,
    spec: &PoolSpec,
    options: &ReplayOptions,
    log: &mut dyn FnMut(Event) -> vrampool_trace::Result<()>,
) -> Result<ReplayResult> {
    let sim = SimDeviceConfig::default().capacity(options.capacity).gpu_lag_us(options.gpu_lag_us);
    let request = DeviceRequest::new(BackendKind::Sim, 0, spec.page_size).sim(sim);
    let opened = open_backend(request).map_err(|err| pool_error(plan, spec, err.into()))?;
    let target = ReplayTarget { backend: opened.backend, simulated: opened.simulated, used_bytes: None };
    replay_on(plan, spec, options, target, log)
}

/// The error of the pool `spec` describes, met while replaying `plan`.
fn pool_error(plan: &ReplayPlan, spec: &PoolSpec, source: PoolError) -> Error {
    Error::Pool {
        trace: plan.name.clone(),
        strategy: spec.strategy.name(),
        config: spec.to_string(),
        source: Box::new(source),
    }
}

/// The device a replay runs on, and how to read what it has in use.
pub struct ReplayTarget<'a> {
    /// The device the pool is made on.
    pub backend: Arc<dyn Backend>,
    /// The same device when it is simulated, for its modelled driver time.
    pub simulated: Option<Arc<SimDevice>>,
    /// Reads the device's memory in use, as its driver reports it: read at the start, whenever the pool's
    /// reserved bytes pass their highest reading so far, and at every timeline point.
    pub used_bytes: Option<&'a dyn Fn() -> Option<u64>>,
}

/// Replays `plan` through a pool made from `spec` on the device of `target`: the simulated device for
/// [`replay`], or a real one to check that it allocates as the simulation does.
pub fn replay_on(
    plan: &ReplayPlan,
    spec: &PoolSpec,
    options: &ReplayOptions,
    target: ReplayTarget<'_>,
    log: &mut dyn FnMut(Event) -> vrampool_trace::Result<()>,
) -> Result<ReplayResult> {
    // The config reported is the one given; the replay itself runs the hybrid's background work inline.
    let given = spec;
    let mut spec = spec.clone();
    spec.hybrid.deterministic = true;
    let pool_error = |source: PoolError| pool_error(plan, given, source);
    let used_before = target.used_bytes.and_then(|read| read());
    let mut device_peak: Option<u64> = None;
    let probe = |device_peak: &mut Option<u64>| {
        if let (Some(read), Some(before)) = (target.used_bytes, used_before)
            && let Some(now) = read()
        {
            let used = now.saturating_sub(before);
            *device_peak = Some(device_peak.map_or(used, |peak| peak.max(used)));
        }
    };
    let pool = spec.build(target.backend.clone()).map_err(pool_error)?;
    let pool = &*pool;
    let mut addrs = vec![NO_BLOCK; plan.slots as usize];
    let mut sizes = vec![0u64; plan.slots as usize];
    let mut start_time = plan.times_us.first().copied().unwrap_or(0);
    for op in &plan.initial {
        run(pool, *op, &mut addrs, &mut sizes).map_err(pool_error)?;
        if let Operation::Alloc { slot, size, stream } = *op
            && addrs[slot as usize] != NO_BLOCK
        {
            log(Event::new(start_time, EventKind::Alloc, addrs[slot as usize], size, stream))
                .map_err(Error::EventLog)?;
        }
    }
    let total = plan.operations.len();
    let step = total.div_ceil(options.timeline_points.max(1)).max(1);
    let mut timeline = Vec::with_capacity(total / step + 2);
    let sample = |done: usize, pool: &dyn Pool, timeline: &mut Vec<TimelinePoint>| {
        let stats = pool.stats();
        timeline.push(TimelinePoint {
            operation: done as u64,
            live_bytes: stats.allocated_bytes.current,
            reserved_bytes: stats.reserved_bytes.current,
        });
    };
    sample(0, pool, &mut timeline);
    probe(&mut device_peak);
    let mut probed_reserved = pool.stats().reserved_bytes.current;
    let mut busy = Duration::ZERO;
    // A simulated GPU keeps the trace's time, for its lag and for the clock the pool times its optional device
    // work by (the clock's upkeep is counted in the pool's time).
    let simulated = target.simulated.as_deref();
    for (chunk_index, chunk) in plan.operations.chunks(step).enumerate() {
        let first = chunk_index * step;
        let mut started = Instant::now();
        for (i, op) in chunk.iter().enumerate() {
            if let Some(sim) = simulated {
                sim.advance_clock(plan.times_us[first + i]);
            }
            run(pool, *op, &mut addrs, &mut sizes).map_err(pool_error)?;
            // The driver is read whenever the pool holds more than at the last reading, so that a short-lived
            // segment (a fixed pool's fallback) is seen however briefly it lives; the driver's time is not the
            // pool's, so it is left out of the time measured.
            if target.used_bytes.is_some() {
                let reserved = pool.stats().reserved_bytes.current;
                if reserved > probed_reserved {
                    probed_reserved = reserved;
                    busy += started.elapsed();
                    probe(&mut device_peak);
                    started = Instant::now();
                }
            }
        }
        busy += started.elapsed();
        for (i, op) in chunk.iter().enumerate() {
            start_time = plan.times_us[first + i];
            let (kind, slot) = match *op {
                Operation::Alloc { slot, .. } => (EventKind::Alloc, slot),
                Operation::Free { slot } => (EventKind::Free, slot),
            };
            let addr = addrs[slot as usize];
            // A freed slot keeps its address for the log; a refused one has none.
            if addr != NO_BLOCK {
                let stream = match *op {
                    Operation::Alloc { stream, .. } => stream,
                    Operation::Free { .. } => 0,
                };
                log(Event::new(start_time, kind, addr, sizes[slot as usize], stream)).map_err(Error::EventLog)?;
            }
        }
        sample(first + chunk.len(), pool, &mut timeline);
        probe(&mut device_peak);
    }
    let report = pool.report();
    let stats = report.stats;
    let device = target.simulated.as_ref().map(|sim| sim.counters()).unwrap_or_default();
    Ok(ReplayResult {
        trace: plan.name.clone(),
        strategy: spec.strategy,
        config: given.to_string(),
        events: plan.events,
        duration_us: plan.duration_us,
        operations: (plan.initial.len() + total) as u64,
        peak_live_bytes: stats.allocated_bytes.peak,
        peak_reserved_bytes: stats.reserved_bytes.peak,
        utilization: stats.utilization(),
        fallbacks: stats.fallbacks,
        ooms: stats.ooms,
        backend_calls: stats.backend_calls,
        driver_time_us: device.driver_time_ns as f64 / 1000.0,
        host_blocked_us: device.host_blocked_ns as f64 / 1000.0,
        device_peak_used_bytes: device_peak,
        replay_ns_per_event: busy.as_nanos() as f64 / plan.events.max(1) as f64,
        classes: report
            .classes
            .iter()
            .map(|c| ClassSpec { block_size: c.block_size, block_count: c.block_count })
            .collect(),
        stats,
        timeline,
    })
}

/// Runs one operation. A refused allocation leaves its slot empty; its free is then skipped.
#[inline]
fn run(pool: &dyn Pool, op: Operation, addrs: &mut [u64], sizes: &mut [u64]) -> vrampool::Result<()> {
    match op {
        Operation::Alloc { slot, size, stream } => match pool.allocate(size, DEFAULT_ALIGNMENT, StreamId(stream)) {
            Ok(allocation) => {
                addrs[slot as usize] = allocation.addr;
                sizes[slot as usize] = size;
                Ok(())
            }
            Err(err) if err.is_out_of_memory() => Ok(()),
            Err(err) => Err(err),
        },
        Operation::Free { slot } => match addrs[slot as usize] {
            NO_BLOCK => Ok(()),
            addr => pool.free(addr),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vrampool::MIB;

    /// A fixed pool of 4 blocks of 1 MiB; a 16 MiB request between two timeline points takes a fallback
    /// segment that is freed before the next point.
    fn plan_with_a_short_fallback() -> ReplayPlan {
        let mut operations = Vec::new();
        for slot in 0..100 {
            operations.push(Operation::Alloc { slot, size: 4096, stream: 0 });
            operations.push(Operation::Free { slot });
        }
        operations.push(Operation::Alloc { slot: 100, size: 16 * MIB, stream: 0 });
        operations.push(Operation::Free { slot: 100 });
        ReplayPlan {
            name: "short-fallback".into(),
            times_us: (0..operations.len() as i64).collect(),
            events: operations.len() as u64,
            operations,
            slots: 101,
            ..ReplayPlan::default()
        }
    }

    #[test]
    fn the_driver_is_read_at_every_new_high_of_reserved_bytes() {
        let plan = plan_with_a_short_fallback();
        let spec = PoolSpec::parse("strategy=fixed,block_size=1MiB,block_count=4").unwrap();
        let device = Arc::new(SimDevice::default());
        let reader = device.clone();
        let used = move || Some(reader.counters().used_bytes);
        let target = ReplayTarget { backend: device.clone(), simulated: Some(device), used_bytes: Some(&used) };
        let options = ReplayOptions { timeline_points: 1, ..ReplayOptions::default() };
        let result = replay_on(&plan, &spec, &options, target, &mut |_| Ok(())).unwrap();
        assert_eq!(result.fallbacks, 1);
        assert_eq!(result.peak_reserved_bytes, 20 * MIB);
        // The only timeline readings are at the start and the end, when 4 MiB are held.
        assert_eq!(result.timeline.last().map(|point| point.reserved_bytes), Some(4 * MIB));
        assert_eq!(result.device_peak_used_bytes, Some(20 * MIB));
    }

    #[test]
    fn a_simulated_replay_reads_no_driver() {
        let plan = plan_with_a_short_fallback();
        let spec = PoolSpec::parse("strategy=fixed,block_size=1MiB,block_count=4").unwrap();
        let result = replay(&plan, &spec, &ReplayOptions::default()).unwrap();
        assert_eq!(result.device_peak_used_bytes, None);
        assert_eq!(result.peak_reserved_bytes, 20 * MIB);
    }
}
