//! The simulated device's events: completion flags kept per stream, so that threads on different streams
//! record and query events without waiting for each other or for the device's memory calls.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};

use super::{CostModel, DeviceCounters, EventId};
use crate::error::{Error, Result};
use crate::stream::StreamId;

/// Shards of the event table: streams hash to one each. A power of two, at least the threads of a many-core
/// host, so that threads on streams of their own rarely share one.
const SHARDS: usize = 64;

/// One recorded event: the stream it was recorded on, whether it was made complete (its stream released, or
/// the host waited for it), and the clock at which it completes unless its stream is held.
#[derive(Debug)]
struct SimEvent {
    stream: StreamId,
    complete: bool,
    completes_at_us: i64,
}

/// What the event calls of one shard have done, summed into [`DeviceCounters`].
#[derive(Clone, Copy, Debug, Default)]
struct EventCounts {
    recorded: u64,
    queries: u64,
    stream_waits: u64,
    event_waits: u64,
    host_blocked_ns: u64,
}

/// The events of the streams that hash to one shard, those streams' hold marks, and the calls made on them.
/// Every event of a stream lives in its stream's shard, so a call on one event, and a wait for a stream's
/// work, takes one shard's lock.
#[derive(Debug, Default)]
struct EventShard {
    next_seq: u64,
    events: HashMap<u64, SimEvent>,
    held: HashSet<StreamId>,
    counts: EventCounts,
}

/// A shard behind its lock, and the driver time of its calls, which a reading of the device's clock sums
/// over the shards without taking their locks.
#[derive(Debug, Default)]
struct ShardCell {
    shard: Mutex<EventShard>,
    driver_ns: AtomicU64,
}

impl ShardCell {
    fn lock(&self) -> MutexGuard<'_, EventShard> {
        self.shard.lock()
    }

    /// Counts `ns` of driver time for a call on this shard.
    fn charge(&self, ns: u64) {
        self.driver_ns.fetch_add(ns, Ordering::Relaxed);
    }

    fn driver_ns(&self) -> u64 {
        self.driver_ns.load(Ordering::Relaxed)
    }
}

impl EventShard {
    /// The recorded event `id`; an error naming `call` when it was never recorded or was released.
    fn event(&self, call: &'static str, id: u64) -> Result<&SimEvent> {
        self.events.get(&id).ok_or_else(|| Error::InvalidBackendCall {
            call,
            reason: format!("event {id} was never recorded or was released"),
        })
    }

    /// Whether `event` has completed by the clock `now_us`.
    fn completed(&self, event: &SimEvent, now_us: i64) -> bool {
        event.complete || (now_us >= event.completes_at_us && !self.held.contains(&event.stream))
    }
}

/// Events as completion flags: an event completes once the device's clock passes its recording time by the
/// lag, at once with no lag, and never while its stream is held busy.
///
/// The table is split by stream into [`SHARDS`] locked shards: recording, querying, waiting on and releasing
/// an event lock its stream's shard only, as a driver serialises the calls on one stream and not those of
/// different streams. Event ids carry their shard. A synchronisation locks every shard, one after the other.
/// Streams waited on are logged in call order under a lock of their own.
#[derive(Debug)]
pub(super) struct SimEvents {
    lag_us: i64,
    /// The device's clock, in microseconds ([`SimEvents::advance_clock`]); only moves forward.
    clock_us: AtomicI64,
    record_ns: u64,
    query_ns: u64,
    stream_wait_ns: u64,
    host_wait_ns: u64,
    shards: Box<[CachePadded<ShardCell>]>,
    waits: Mutex<Vec<(StreamId, EventId)>>,
}

/// The shard of `stream`'s events.
fn shard_of(stream: StreamId) -> usize {
    // The high bits of a Fibonacci hash: streams numbered in a row, and streams that are aligned addresses,
    // spread over the shards alike.
    (stream.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SHARDS.trailing_zeros())) as usize
}

/// The shard an event id was issued by.
fn shard_of_event(event: EventId) -> usize {
    (event.0 % SHARDS as u64) as usize
}

impl SimEvents {
    /// An empty table for a device `lag_us` microseconds behind the program, its calls timed by `cost`.
    pub(super) fn new(lag_us: i64, cost: &CostModel) -> Self {
        SimEvents {
            lag_us,
            clock_us: AtomicI64::new(0),
            record_ns: cost.record_event_ns,
            query_ns: cost.query_event_ns,
            stream_wait_ns: cost.wait_event_ns,
            host_wait_ns: cost.synchronize_ns,
            shards: (0..SHARDS).map(|_| CachePadded::default()).collect(),
            waits: Mutex::new(Vec::new()),
        }
    }

    /// The device's lag behind the program, in microseconds.
    pub(super) fn lag_us(&self) -> i64 {
        self.lag_us
    }

    /// Moves the device's clock to `now_us` unless it is already later.
    pub(super) fn advance_clock(&self, now_us: i64) {
        self.clock_us.fetch_max(now_us, Ordering::Relaxed);
    }

    fn now_us(&self) -> i64 {
        self.clock_us.load(Ordering::Relaxed)
    }

    /// Records an event on `stream`: it completes the lag from now, unless the stream is held.
    pub(super) fn record(&self, stream: StreamId) -> EventId {
        let index = shard_of(stream);
        let completes_at_us = self.now_us().saturating_add(self.lag_us);
        let cell = &self.shards[index];
        cell.charge(self.record_ns);
        let mut shard = cell.lock();
        shard.counts.recorded += 1;
        shard.next_seq += 1;
        let id = shard.next_seq * SHARDS as u64 + index as u64;
        shard.events.insert(id, SimEvent { stream, complete: false, completes_at_us });
        EventId(id)
    }

    /// Whether `event` has completed; an error when it is not recorded (the query is timed all the same).
    pub(super) fn query(&self, event: EventId) -> Result<bool> {
        let now_us = self.now_us();
        let cell = &self.shards[shard_of_event(event)];
        cell.charge(self.query_ns);
        let mut shard = cell.lock();
        shard.counts.queries += 1;
        let recorded = shard.event("event_complete", event.0)?;
        Ok(shard.completed(recorded, now_us))
    }

    /// Orders `stream` after `event`: logged in [`SimEvents::stream_waits`].
    pub(super) fn stream_wait(&self, stream: StreamId, event: EventId) -> Result<()> {
        {
            let cell = &self.shards[shard_of_event(event)];
            cell.charge(self.stream_wait_ns);
            let mut shard = cell.lock();
            shard.event("stream_wait_event", event.0)?;
            shard.counts.stream_waits += 1;
        }
        self.waits.lock().push((stream, event));
        Ok(())
    }

    /// Forgets `event`.
    pub(super) fn release(&self, event: EventId) {
        self.shards[shard_of_event(event)].lock().events.remove(&event.0);
    }

    /// The host waits for `event`: for what is left of the lag behind it, or for a held stream's work to
    /// end. The events recorded on its stream up to it complete, the later ones do not.
    pub(super) fn host_wait(&self, event: EventId) -> Result<()> {
        let now_us = self.now_us();
        let cell = &self.shards[shard_of_event(event)];
        // The call's own cost, as for a synchronisation of an idle device.
        cell.charge(self.host_wait_ns);
        let mut shard = cell.lock();
        let waited = shard.event("wait_event", event.0)?;
        let (stream, completes_at_us) = (waited.stream, waited.completes_at_us);
        let blocked_us = if shard.completed(waited, now_us) { 0 } else { (completes_at_us - now_us).max(0) };
        shard.held.remove(&stream);
        for e in shard.events.values_mut() {
            if e.stream == stream && e.completes_at_us <= completes_at_us {
                e.complete = true;
            }
        }
        shard.counts.event_waits += 1;
        let blocked_ns = (blocked_us as u64).saturating_mul(1000);
        shard.counts.host_blocked_ns = shard.counts.host_blocked_ns.saturating_add(blocked_ns);
        Ok(())
    }

    /// Every event completes and no stream stays held, as after a synchronisation of the device.
    pub(super) fn complete_all(&self) {
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            shard.held.clear();
            shard.events.values_mut().for_each(|e| e.complete = true);
        }
    }

    /// Marks `stream` busy: events recorded on it stay incomplete until [`SimEvents::release_stream`].
    pub(super) fn hold_stream(&self, stream: StreamId) {
        self.shards[shard_of(stream)].lock().held.insert(stream);
    }

    /// Lets `stream` run: every event recorded on it completes.
    pub(super) fn release_stream(&self, stream: StreamId) {
        let mut shard = self.shards[shard_of(stream)].lock();
        shard.held.remove(&stream);
        shard.events.values_mut().filter(|e| e.stream == stream).for_each(|e| e.complete = true);
    }

    /// Every `(stream, event)` a stream was made to wait on, in order.
    pub(super) fn stream_waits(&self) -> Vec<(StreamId, EventId)> {
        self.waits.lock().clone()
    }

    /// The stream `event` was recorded on and whether it has completed, while the event is held.
    pub(super) fn state(&self, event: EventId) -> Option<(StreamId, bool)> {
        let now_us = self.now_us();
        let shard = self.shards[shard_of_event(event)].lock();
        shard.events.get(&event.0).map(|e| (e.stream, shard.completed(e, now_us)))
    }

    /// Events recorded and not yet released.
    pub(super) fn live(&self) -> usize {
        self.shards.iter().map(|shard| shard.lock().events.len()).sum()
    }

    /// The driver time of the event calls so far, in nanoseconds: a read of each shard's, no lock taken.
    pub(super) fn driver_ns(&self) -> u64 {
        self.shards.iter().fold(0u64, |sum, cell| sum.saturating_add(cell.driver_ns()))
    }

    /// Adds the event calls' counts and time to `counters`.
    pub(super) fn add_to(&self, counters: &mut DeviceCounters) {
        for cell in self.shards.iter() {
            let counts = cell.lock().counts;
            counters.events_recorded += counts.recorded;
            counters.event_queries += counts.queries;
            counters.stream_waits += counts.stream_waits;
            counters.event_waits += counts.event_waits;
            counters.host_blocked_ns = counters.host_blocked_ns.saturating_add(counts.host_blocked_ns);
            counters.driver_time_ns = counters.driver_time_ns.saturating_add(cell.driver_ns());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streams_events_share_its_shard_and_ids_name_it() {
        let events = SimEvents::new(0, &CostModel::default());
        let streams = [StreamId::DEFAULT, StreamId(1), StreamId(2), StreamId(0x7f00_dead_0000)];
        let mut used = HashSet::new();
        for &stream in &streams {
            let first = events.record(stream);
            let second = events.record(stream);
            assert_ne!(first, second);
            assert_eq!(shard_of_event(first), shard_of(stream));
            assert_eq!(shard_of_event(second), shard_of(stream));
            used.insert(shard_of(stream));
        }
        assert!(used.len() > 1, "streams in a row spread over shards");
        let sequential: HashSet<usize> = (0..SHARDS as u64).map(|s| shard_of(StreamId(s))).collect();
        assert!(sequential.len() > SHARDS / 2, "{} shards for {SHARDS} streams in a row", sequential.len());
        let aligned: HashSet<usize> = (0..SHARDS as u64).map(|s| shard_of(StreamId(0x5000_0000 + s * 512))).collect();
        assert!(aligned.len() > SHARDS / 2, "{} shards for {SHARDS} aligned addresses", aligned.len());
        assert_eq!(events.live(), 8);
    }

    #[test]
    fn counts_and_time_sum_over_the_shards() {
        let cost = CostModel::default();
        let events = SimEvents::new(0, &cost);
        let a = events.record(StreamId(1));
        let b = events.record(StreamId(2));
        assert!(events.query(a).unwrap() && events.query(b).unwrap());
        events.stream_wait(StreamId(3), b).unwrap();
        events.host_wait(a).unwrap();
        events.release(a);
        assert!(events.query(a).is_err(), "a released event is an error, and still a timed query");
        let mut counters = DeviceCounters::default();
        events.add_to(&mut counters);
        assert_eq!(
            (counters.events_recorded, counters.event_queries, counters.stream_waits, counters.event_waits),
            (2, 3, 1, 1)
        );
        let ns = 2 * cost.record_event_ns + 3 * cost.query_event_ns + cost.wait_event_ns + cost.synchronize_ns;
        assert_eq!(counters.driver_time_ns, ns);
        assert_eq!(events.driver_ns(), ns);
        assert_eq!(events.stream_waits(), vec![(StreamId(3), b)]);
        assert_eq!(events.live(), 1);
    }

    /// Threads on streams of their own record, query and release events at once; every event is answered
    /// and counted, and a held stream's events stay incomplete meanwhile.
    #[test]
    fn threads_on_their_own_streams_record_and_query_at_once() {
        let events = SimEvents::new(0, &CostModel::free());
        events.hold_stream(StreamId(100));
        let held = events.record(StreamId(100));
        std::thread::scope(|scope| {
            for thread in 0..4u64 {
                let events = &events;
                scope.spawn(move || {
                    for _ in 0..1000 {
                        let event = events.record(StreamId(thread));
                        assert!(events.query(event).unwrap());
                        assert!(!events.query(held).unwrap());
                        events.release(event);
                    }
                });
            }
        });
        let mut counters = DeviceCounters::default();
        events.add_to(&mut counters);
        assert_eq!((counters.events_recorded, counters.event_queries), (4001, 8000));
        assert_eq!(events.live(), 1);
        events.release_stream(StreamId(100));
        assert!(events.query(held).unwrap());
    }
}
