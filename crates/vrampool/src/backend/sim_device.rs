//! A simulated GPU: addresses are arithmetic, no memory is touched, every call is counted and timed by a
//! cost model, and calls can be made to fail.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use super::device_ledger::DeviceLedger;
use super::sim_events::SimEvents;
use super::{Backend, CostModel, DeviceAddr, DeviceCounters, DriverClock, EventId, FaultPlan};
use crate::error::{Error, Result};
use crate::stream::StreamId;
use crate::units::MIB;

/// The address space a [`SimDevice`] hands addresses out of by default: 16 TiB, a hundred times an H200's
/// memory.
pub const SIM_ADDRESS_SPACE: u64 = 16 << 40;

/// How a [`SimDevice`] is set up.
#[derive(Clone, Debug, PartialEq)]
pub struct SimDeviceConfig {
    /// Device memory in bytes. Default: 141 GB (141 × 10⁹ bytes), an H200.
    pub capacity: u64,
    /// Virtual-memory granularity, or `None` for a device with segments only. Default: 2 MiB, the H200's.
    pub granularity: Option<u64>,
    /// The time each call costs. Default: [`CostModel::default`], the H200 anchors.
    pub cost_model: CostModel,
    /// The first address handed out. Default: `0x7f00_0000_0000`.
    pub base_address: u64,
    /// The bytes of address space from [`SimDeviceConfig::base_address`] the device hands addresses out of;
    /// a call that finds no room left in it fails ([`Error::AddressSpaceExhausted`]). Default:
    /// [`SIM_ADDRESS_SPACE`].
    pub address_space: u64,
    /// The unit segment sizes are rounded up to ([`Backend::segment_unit`]). Default: 2 MiB, what
    /// `cuMemAlloc` takes on an H200.
    pub segment_unit: u64,
    /// How far the simulated GPU runs behind the program, in microseconds of the device's clock
    /// ([`SimDevice::advance_clock`]): an event completes once the clock has passed its recording time by
    /// this much. Default: 0, every event completes at once (an idle GPU).
    pub gpu_lag_us: u64,
}

impl Default for SimDeviceConfig {
    fn default() -> Self {
        SimDeviceConfig {
            capacity: 141_000_000_000,
            granularity: Some(2 * MIB),
            cost_model: CostModel::default(),
            base_address: 0x7f00_0000_0000,
            address_space: SIM_ADDRESS_SPACE,
            segment_unit: 2 * MIB,
            gpu_lag_us: 0,
        }
    }
}

impl SimDeviceConfig {
    /// Sets the capacity in bytes.
    pub fn capacity(mut self, bytes: u64) -> Self {
        self.capacity = bytes;
        self
    }

    /// Sets the virtual-memory granularity, or turns virtual memory off with `None`.
    pub fn granularity(mut self, granularity: Option<u64>) -> Self {
        self.granularity = granularity;
        self
    }

    /// Maps physical pages of `page` bytes, as the CUDA backend does when given a page size: the
    /// granularity becomes `page`, which must be a positive multiple of the device's granularity (2 MiB by
    /// default). An error naming `page_size` otherwise, or on a device without virtual memory.
    pub fn page_size(mut self, page: u64) -> Result<Self> {
        match self.granularity {
            Some(granularity) if page > 0 && page % granularity == 0 => {
                self.granularity = Some(page);
                Ok(self)
            }
            Some(granularity) => Err(Error::invalid_config(
                "page_size",
                page,
                format!("must be a positive multiple of the device's {granularity}-byte granularity"),
            )),
            None => Err(Error::invalid_config("page_size", page, "the device has no virtual memory")),
        }
    }

    /// Sets the cost model.
    pub fn cost_model(mut self, cost_model: CostModel) -> Self {
        self.cost_model = cost_model;
        self
    }

    /// Sets the first address handed out (devices that must not share addresses start apart).
    pub fn base_address(mut self, addr: u64) -> Self {
        self.base_address = addr;
        self
    }

    /// Sets the bytes of address space the device hands addresses out of.
    pub fn address_space(mut self, bytes: u64) -> Self {
        self.address_space = bytes;
        self
    }

    /// Sets how far the GPU runs behind the program, in microseconds.
    pub fn gpu_lag_us(mut self, lag: u64) -> Self {
        self.gpu_lag_us = lag;
        self
    }

    /// Sets the unit segment sizes are rounded up to (at least 1).
    pub fn segment_unit(mut self, unit: u64) -> Self {
        self.segment_unit = unit.max(1);
        self
    }
}

#[derive(Debug)]
struct SimState {
    ledger: DeviceLedger,
}

/// A simulated device for tests, replays and capacity planning.
///
/// It touches no memory: addresses are arithmetic (segments are laid out back to back, so a pool that
/// merged two segments would be caught by the ledger's checks). It counts every call and byte
/// ([`SimDevice::counters`]), models the driver time each call would take on an H200 ([`CostModel`]),
/// models events as completion flags ([`SimDevice::hold_stream`]) and fails calls on demand
/// ([`SimDevice::set_faults`]).
///
/// Memory calls take one lock of the device's state, in the order they come. Event calls take a lock of
/// their stream's events only (calls on different streams run at once, as a driver's do), and the state's
/// lock as well while a fault plan is set, so that every call is numbered in one order.
#[derive(Debug)]
pub struct SimDevice {
    capacity: u64,
    granularity: Option<u64>,
    segment_unit: u64,
    /// The trace's time in microseconds once a replay has set it ([`SimDevice::advance_clock`]);
    /// [`NO_TRACE_CLOCK`] before. An atomic of its own, so that keeping it costs a replay no lock.
    trace_clock_us: AtomicI64,
    state: Mutex<SimState>,
    events: SimEvents,
    /// Whether a fault plan is set: event calls are then numbered in the state's lock.
    faults_set: AtomicBool,
}

/// [`SimDevice`]'s trace clock before a replay sets it.
const NO_TRACE_CLOCK: i64 = i64::MIN;

impl Default for SimDevice {
    fn default() -> Self {
        Self::new(SimDeviceConfig::default())
    }
}

impl SimDevice {
    /// A simulated device with the given setup.
    pub fn new(config: SimDeviceConfig) -> Self {
        let events = SimEvents::new(i64::try_from(config.gpu_lag_us).unwrap_or(i64::MAX), &config.cost_model);
        let ledger = DeviceLedger::new(
            config.capacity,
            config.granularity,
            config.base_address,
            config.address_space,
            config.cost_model,
        );
        SimDevice {
            capacity: config.capacity,
            granularity: config.granularity,
            segment_unit: config.segment_unit.max(1),
            trace_clock_us: AtomicI64::new(NO_TRACE_CLOCK),
            state: Mutex::new(SimState { ledger }),
            events,
            faults_set: AtomicBool::new(false),
        }
    }

    /// What the device has been asked to do so far.
    pub fn counters(&self) -> DeviceCounters {
        let mut counters = self.state.lock().ledger.counters();
        self.events.add_to(&mut counters);
        counters
    }

    /// The modelled time spent in the driver so far.
    pub fn driver_time(&self) -> Duration {
        Duration::from_nanos(self.counters().driver_time_ns)
    }

    /// Device memory in use now (segments plus mapped chunks).
    pub fn used_bytes(&self) -> u64 {
        self.state.lock().ledger.counters().used_bytes
    }

    /// Replaces the fault plan; calls are numbered from 1 again.
    pub fn set_faults(&self, plan: FaultPlan) {
        let mut state = self.state.lock();
        self.faults_set.store(plan != FaultPlan::none(), Ordering::Relaxed);
        state.ledger.set_faults(plan);
    }

    /// Numbers an event call among all calls, and fails it where the fault plan says so; nothing to do
    /// without a plan.
    fn begin_event_call(&self, call: &'static str) -> Result<()> {
        if self.faults_set.load(Ordering::Relaxed) {
            self.state.lock().ledger.begin(call, 0)?;
        }
        Ok(())
    }

    /// Moves the device's clock to `now_us` (microseconds; it never goes back): with a GPU lag, the events
    /// recorded at least the lag before complete; and the device's [`DriverClock`] is the trace's time from
    /// then on. A replay sets it to each trace event's time.
    pub fn advance_clock(&self, now_us: i64) {
        let now_us = now_us.max(NO_TRACE_CLOCK + 1);
        if now_us > self.trace_clock_us.load(Ordering::Relaxed) {
            self.trace_clock_us.fetch_max(now_us, Ordering::Relaxed);
        }
        if self.lags() {
            self.events.advance_clock(now_us);
        }
    }

    /// Whether events complete with a lag ([`SimDeviceConfig::gpu_lag_us`]).
    pub fn lags(&self) -> bool {
        self.events.lag_us() > 0
    }

    /// Marks `stream` busy: events recorded on it from now on stay incomplete until [`Self::release_stream`].
    pub fn hold_stream(&self, stream: StreamId) {
        self.events.hold_stream(stream);
    }

    /// Lets `stream` run: every event recorded on it completes.
    pub fn release_stream(&self, stream: StreamId) {
        self.events.release_stream(stream);
    }

    /// Every `(stream, event)` a stream was made to wait on, in order.
    pub fn stream_waits(&self) -> Vec<(StreamId, EventId)> {
        self.events.stream_waits()
    }

    /// The stream an event was recorded on and whether it has completed, while the event is held.
    pub fn event_state(&self, event: EventId) -> Option<(StreamId, bool)> {
        self.events.state(event)
    }

    /// Events recorded and not yet released.
    pub fn live_events(&self) -> usize {
        self.events.live()
    }
}

impl Backend for SimDevice {
    fn driver_clock(&self) -> DriverClock {
        match self.trace_clock_us.load(Ordering::Relaxed) {
            NO_TRACE_CLOCK => DriverClock::Untimed,
            // Times before the trace's zero read as zero: the clock only has to move forward.
            now_us => DriverClock::Simulated {
                now_ns: u64::try_from(now_us).unwrap_or(0).saturating_mul(1000),
                driver_ns: self.state.lock().ledger.counters().driver_time_ns.saturating_add(self.events.driver_ns()),
            },
        }
    }

    fn name(&self) -> String {
        "sim".into()
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Segments start at multiples of the granularity (2 MiB without virtual memory).
    fn segment_alignment(&self) -> u64 {
        self.state.lock().ledger.address_align()
    }

    fn segment_unit(&self) -> u64 {
        self.segment_unit
    }

    fn allocate_segment(&self, size: u64) -> Result<DeviceAddr> {
        self.state.lock().ledger.allocate_segment(size)
    }

    fn free_segment(&self, addr: DeviceAddr, size: u64) -> Result<()> {
        self.state.lock().ledger.free_segment(addr, size)
    }

    fn granularity(&self) -> Option<u64> {
        self.granularity
    }

    fn reserve_range(&self, size: u64) -> Result<DeviceAddr> {
        self.state.lock().ledger.reserve_range(size)
    }

    fn release_range(&self, addr: DeviceAddr, size: u64) -> Result<()> {
        self.state.lock().ledger.release_range(addr, size)
    }

    fn map(&self, addr: DeviceAddr, size: u64) -> Result<()> {
        self.state.lock().ledger.map(addr, size)
    }

    fn supports_large_pages(&self) -> bool {
        true
    }

    fn map_pages(&self, addr: DeviceAddr, pages: &[u64]) -> Result<()> {
        self.state.lock().ledger.map_pages(addr, pages)
    }

    fn unmap(&self, addr: DeviceAddr, size: u64) -> Result<()> {
        self.state.lock().ledger.unmap(addr, size)
    }

    fn remap(&self, from: DeviceAddr, to: DeviceAddr, size: u64) -> Result<()> {
        self.state.lock().ledger.remap(from, to, size)
    }

    fn supports_alias(&self) -> bool {
        true
    }

    fn alias(&self, from: DeviceAddr, to: DeviceAddr, size: u64) -> Result<()> {
        self.state.lock().ledger.alias(from, to, size)
    }

    fn record_event(&self, stream: StreamId) -> Result<EventId> {
        self.begin_event_call("record_event")?;
        Ok(self.events.record(stream))
    }

    fn event_complete(&self, event: EventId) -> Result<bool> {
        self.begin_event_call("event_complete")?;
        self.events.query(event)
    }

    fn stream_wait_event(&self, stream: StreamId, event: EventId) -> Result<()> {
        self.begin_event_call("stream_wait_event")?;
        self.events.stream_wait(stream, event)
    }

    fn release_event(&self, event: EventId) {
        self.events.release(event);
    }

    fn wait_event(&self, event: EventId) -> Result<()> {
        self.begin_event_call("wait_event")?;
        self.events.host_wait(event)
    }

    fn synchronize(&self) -> Result<()> {
        let mut state = self.state.lock();
        let ns = state.ledger.cost().synchronize_ns;
        state.ledger.event_call("synchronize", ns)?;
        state.ledger.count_synchronization();
        // The host waits for the work queued last, the lag behind it.
        let blocked_ns = (self.events.lag_us().max(0) as u64).saturating_mul(1000);
        state.ledger.count_host_blocked(blocked_ns);
        // A synchronisation waits for everything, held streams included.
        self.events.complete_all();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_model_an_h200() {
        let sim = SimDevice::default();
        assert_eq!(sim.capacity(), 141_000_000_000);
        assert_eq!(sim.granularity(), Some(2 * MIB));
    }

    #[test]
    fn pages_are_multiples_of_the_granularity() {
        let sim = SimDevice::new(SimDeviceConfig::default().page_size(16 * MIB).unwrap());
        assert_eq!(sim.granularity(), Some(16 * MIB));
        for page in [0, 3 * MIB] {
            let err = SimDeviceConfig::default().page_size(page).unwrap_err();
            assert!(matches!(err, Error::InvalidConfig { field: "page_size", .. }), "{err}");
            assert!(err.to_string().contains("2097152-byte granularity"), "{err}");
        }
        let err = SimDeviceConfig::default().granularity(None).page_size(2 * MIB).unwrap_err();
        assert!(err.to_string().contains("no virtual memory"), "{err}");
    }

    #[test]
    fn addresses_come_from_the_devices_own_range() {
        let config = SimDeviceConfig::default().base_address(1 << 40).address_space(8 * MIB);
        let sim = SimDevice::new(config);
        let a = sim.allocate_segment(6 * MIB).unwrap();
        assert_eq!(a, 1 << 40);
        let err = sim.allocate_segment(4 * MIB).unwrap_err();
        assert_eq!(
            err.to_string(),
            "allocate_segment: no room for 4194304 bytes in the device's address range of 8388608 bytes from 0x10000000000"
        );
        sim.free_segment(a, 6 * MIB).unwrap();
        assert_eq!(sim.allocate_segment(4 * MIB).unwrap(), a, "the range's start again");
        // A base address of 0 is never handed out.
        let sim = SimDevice::new(SimDeviceConfig::default().base_address(0));
        assert_eq!(sim.allocate_segment(1).unwrap(), 2 * MIB);
    }

    #[test]
    fn segments_are_back_to_back_and_timed() {
        let sim = SimDevice::default();
        let a = sim.allocate_segment(2 * MIB).unwrap();
        let b = sim.allocate_segment(MIB).unwrap();
        assert_eq!(b, a + 2 * MIB);
        assert_eq!(sim.used_bytes(), 3 * MIB);
        sim.free_segment(a, 2 * MIB).unwrap();
        sim.free_segment(b, MIB).unwrap();
        let c = sim.counters();
        assert_eq!((c.segments_allocated, c.segments_freed, c.used_bytes, c.peak_used_bytes), (2, 2, 0, 3 * MIB));
        assert!(sim.driver_time() > Duration::from_micros(150));
    }

    #[test]
    fn aliased_memory_is_counted_once_and_freed_with_its_last_address() {
        let sim = SimDevice::default();
        let g = 2 * MIB;
        let range = sim.reserve_range(16 * g).unwrap();
        sim.map(range, 2 * g).unwrap();
        assert!(sim.supports_alias());
        sim.alias(range, range + 8 * g, 2 * g).unwrap();
        assert!(sim.alias(range, range + 9 * g, 2 * g).is_err(), "the target must be unmapped");
        assert!(sim.alias(range + 4 * g, range + 12 * g, g).is_err(), "the source must be mapped");
        assert_eq!(sim.used_bytes(), 2 * g, "two addresses, one memory");
        sim.unmap(range, 2 * g).unwrap();
        assert_eq!(sim.used_bytes(), 2 * g, "still mapped at the second address");
        sim.remap(range + 8 * g, range + 4 * g, 2 * g).unwrap();
        sim.unmap(range + 4 * g, 2 * g).unwrap();
        assert_eq!(sim.used_bytes(), 0);
        sim.release_range(range, 16 * g).unwrap();
        let c = sim.counters();
        assert_eq!((c.alias_calls, c.chunks_aliased, c.failed_calls), (1, 2, 2));
        assert_eq!(c.memory_calls(), 7);
    }

    #[test]
    fn held_streams_keep_events_incomplete() {
        let sim = SimDevice::default();
        let s = StreamId(7);
        let done = sim.record_event(s).unwrap();
        assert!(sim.event_complete(done).unwrap());
        sim.hold_stream(s);
        let pending = sim.record_event(s).unwrap();
        assert!(!sim.event_complete(pending).unwrap());
        sim.stream_wait_event(StreamId(8), pending).unwrap();
        assert_eq!(sim.stream_waits(), vec![(StreamId(8), pending)]);
        sim.release_stream(s);
        assert!(sim.event_complete(pending).unwrap());
        sim.release_event(pending);
        assert!(sim.event_complete(pending).is_err());
    }

    #[test]
    fn a_lagging_gpu_completes_events_once_its_clock_has_passed_them_by_the_lag() {
        let sim = SimDevice::new(SimDeviceConfig::default().gpu_lag_us(1000));
        assert!(sim.lags());
        sim.advance_clock(5_000);
        let early = sim.record_event(StreamId::DEFAULT).unwrap();
        sim.advance_clock(5_600);
        let late = sim.record_event(StreamId::DEFAULT).unwrap();
        assert!(!sim.event_complete(early).unwrap(), "0.6 ms after its record");
        sim.advance_clock(4_000);
        assert!(!sim.event_complete(early).unwrap(), "the clock never goes back");
        sim.advance_clock(6_000);
        assert!(sim.event_complete(early).unwrap());
        assert!(!sim.event_complete(late).unwrap());
        assert_eq!(sim.event_state(late), Some((StreamId::DEFAULT, false)));
        // A synchronisation waits for the GPU to catch up: every event completes.
        sim.synchronize().unwrap();
        assert!(sim.event_complete(late).unwrap());
        // Without a lag the clock changes nothing: events complete at once.
        let idle = SimDevice::default();
        assert!(!idle.lags());
        let event = idle.record_event(StreamId::DEFAULT).unwrap();
        assert!(idle.event_complete(event).unwrap());
    }

    /// Waiting for an event blocks the host for what is left of the lag behind it, and completes the events
    /// recorded before it on its stream, not the later ones; a synchronisation blocks for the whole lag.
    #[test]
    fn waiting_for_an_event_blocks_for_what_is_left_of_its_lag() {
        let sim = SimDevice::new(SimDeviceConfig::default().gpu_lag_us(1000));
        sim.advance_clock(5_000);
        let first = sim.record_event(StreamId::DEFAULT).unwrap();
        sim.advance_clock(5_300);
        let second = sim.record_event(StreamId::DEFAULT).unwrap();
        let third = sim.record_event(StreamId::DEFAULT).unwrap();
        let other = sim.record_event(StreamId(3)).unwrap();
        sim.advance_clock(5_600);
        sim.wait_event(second).unwrap();
        assert_eq!(sim.counters().host_blocked_ns, 700_000, "recorded at 5.3 ms, done at 6.3 ms, waited at 5.6 ms");
        assert!(sim.event_complete(first).unwrap() && sim.event_complete(second).unwrap());
        assert!(sim.event_complete(third).unwrap(), "recorded at the same moment as the one waited for");
        assert!(!sim.event_complete(other).unwrap(), "another stream's work is not waited for");
        sim.wait_event(first).unwrap();
        assert_eq!(sim.counters().host_blocked_ns, 700_000, "a completed event blocks nothing");
        sim.synchronize().unwrap();
        assert_eq!(sim.counters().host_blocked_ns, 1_700_000);
        assert_eq!((sim.counters().event_waits, sim.counters().synchronizations), (2, 1));
        sim.release_event(first);
        assert!(matches!(sim.wait_event(first), Err(Error::InvalidBackendCall { call: "wait_event", .. })));
        // A held stream's long work ends for the host that waits for it.
        sim.hold_stream(StreamId(4));
        let held = sim.record_event(StreamId(4)).unwrap();
        sim.wait_event(held).unwrap();
        assert!(sim.event_complete(held).unwrap());
    }

    #[test]
    fn no_virtual_memory_when_turned_off() {
        let sim = SimDevice::new(SimDeviceConfig::default().granularity(None));
        assert!(matches!(sim.reserve_range(2 * MIB), Err(Error::Unsupported { .. })));
    }
}
