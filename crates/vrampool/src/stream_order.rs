//! Stream-ordered reuse: a block freed on one stream is reused on another only after the work the
//! freeing stream had queued before the free.
//!
//! Reuse on the stream that freed a block is safe by stream order and needs nothing. A reuse on another
//! stream needs an event recorded on the freeing stream after the free: one recorded since is found and
//! either seen complete or waited on by the reusing stream (never blocking the host), or one is recorded
//! then. Frees record nothing: a pool whose streams each reuse their own blocks records no event at all.
//!
//! Free memory carries a [`FreeTag`]: the set of streams that freed parts of it and the sequence number
//! from which events on those streams cover those frees. Tags of coalesced blocks merge.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

use crate::backend::{Backend, EventId};
use crate::error::Result;
use crate::free_sequence::FreeSequence;
use crate::stream::StreamId;

/// Streams a pool tells apart; the streams after the first 63 share the last index, for which reuse
/// always waits for the whole device.
pub(crate) const MAX_STREAMS: usize = 64;
const OVERFLOW: usize = MAX_STREAMS - 1;

/// Which streams freed a free block's memory, and from which event sequence number events on them cover it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FreeTag {
    streams: u64,
    seq: u64,
}

impl FreeTag {
    /// Memory never handed out: reusable by any stream.
    pub(crate) const FRESH: FreeTag = FreeTag { streams: 0, seq: 0 };

    /// The tag of memory freed on the stream with `index` and covered from event number `seq`.
    pub(crate) fn freed(index: usize, seq: u64) -> Self {
        FreeTag { streams: 1 << index, seq }
    }

    /// The tag of two neighbours merged into one free block: both sets of streams, the later sequence.
    pub(crate) fn merge(self, other: FreeTag) -> FreeTag {
        FreeTag { streams: self.streams | other.streams, seq: self.seq.max(other.seq) }
    }

    /// Whether reuse on the stream with `index` needs no ordering.
    pub(crate) fn reusable_on(self, index: usize) -> bool {
        index != OVERFLOW && self.streams & !(1 << index) == 0
    }

    /// The packed form a fixed pool keeps per block (a single stream): `index` in the top 6 bits.
    pub(crate) fn pack_single(self) -> u64 {
        debug_assert!(self.streams.count_ones() <= 1);
        let index = if self.streams == 0 { 0 } else { u64::from(self.streams.trailing_zeros()) + 1 };
        (index << 57) | (self.seq & ((1 << 57) - 1))
    }

    /// The inverse of [`FreeTag::pack_single`].
    pub(crate) fn unpack_single(packed: u64) -> Self {
        let index = packed >> 57;
        let seq = packed & ((1 << 57) - 1);
        if index == 0 { FreeTag::FRESH } else { FreeTag::freed(index as usize - 1, seq) }
    }
}

/// Events recorded on one stream, oldest first, and the newest sequence number known complete.
#[derive(Debug, Default)]
struct StreamEvents {
    pending: VecDeque<(u64, EventId)>,
    completed_through: u64,
}

/// Counters of the ordering work done.
#[derive(Debug, Default)]
pub(crate) struct OrderCounters {
    pub(crate) events_recorded: AtomicU64,
    pub(crate) stream_waits: AtomicU64,
    pub(crate) synchronizations: AtomicU64,
    /// Host waits for one event (the dynamic pool's, before it moves idle chunks).
    pub(crate) event_waits: AtomicU64,
}

/// The streams a pool has seen and the events that order reuse between them.
///
/// Each stream has a sequence number and a queue of its own events, behind a lock of its own. A free reads
/// its stream's number and records nothing; the number names the frees an event covers: an event recorded
/// on a stream takes the stream's number and advances it, and covers every free that read that number or
/// an earlier one, since those frees came before it. An event is recorded only when memory freed on one
/// stream is reused on another and no event recorded since covers the free, so a pool on many streams
/// records at most one event per such reuse, and frees on different streams share nothing but the
/// cache line of the stream count. Cost: a free is a fence and a load; a reuse across streams takes the
/// freeing stream's lock and makes at most one event query, one record and one stream wait.
#[derive(Debug)]
pub(crate) struct StreamOrder {
    /// The streams seen, read by every allocation and free: on lines of their own, which only a stream's
    /// registration writes.
    seen: CachePadded<SeenStreams>,
    /// Per stream, the sequence number the next event recorded on it takes, which the frees on it read.
    seqs: [CachePadded<FreeSequence>; MAX_STREAMS],
    /// Per stream, its events not yet seen complete.
    events: [CachePadded<Mutex<StreamEvents>>; MAX_STREAMS],
    /// Held while a stream is registered.
    registering: Mutex<()>,
    /// Written by the threads that record events: apart from the streams seen.
    pub(crate) counters: CachePadded<OrderCounters>,
}

/// The streams a pool has seen, in the order it saw them: `streams[..count]`.
#[derive(Debug)]
struct SeenStreams {
    streams: [AtomicU64; MAX_STREAMS],
    count: AtomicUsize,
}

impl Default for StreamOrder {
    fn default() -> Self {
        StreamOrder {
            seen: CachePadded::new(SeenStreams {
                streams: std::array::from_fn(|_| AtomicU64::new(0)),
                count: AtomicUsize::new(0),
            }),
            seqs: std::array::from_fn(|_| CachePadded::default()),
            events: std::array::from_fn(|_| CachePadded::new(Mutex::new(StreamEvents::default()))),
            registering: Mutex::new(()),
            counters: CachePadded::default(),
        }
    }
}

impl StreamOrder {
    /// The index of `stream`, registering it on first sight.
    #[inline]
    pub(crate) fn index_of(&self, stream: StreamId) -> usize {
        let count = self.seen.count.load(Ordering::Acquire);
        // The common case: the first stream the pool saw.
        if count > 0 && self.seen.streams[0].load(Ordering::Relaxed) == stream.0 {
            return 0;
        }
        for index in 1..count.min(OVERFLOW) {
            if self.seen.streams[index].load(Ordering::Relaxed) == stream.0 {
                return index;
            }
        }
        self.register(stream)
    }

    #[cold]
    fn register(&self, stream: StreamId) -> usize {
        let _guard = self.registering.lock();
        let count = self.seen.count.load(Ordering::Acquire);
        for index in 0..count.min(OVERFLOW) {
            if self.seen.streams[index].load(Ordering::Relaxed) == stream.0 {
                return index;
            }
        }
        if count >= OVERFLOW {
            self.seen.streams[OVERFLOW].store(stream.0, Ordering::Relaxed);
            self.seen.count.store(MAX_STREAMS, Ordering::Release);
            return OVERFLOW;
        }
        self.seen.streams[count].store(stream.0, Ordering::Relaxed);
        self.seen.count.store(count + 1, Ordering::Release);
        count
    }

    /// The stream registered at `index` (for reports; the overflow index reports the last stream seen).
    pub(crate) fn stream_of(&self, index: usize) -> StreamId {
        self.stream_at(index.min(MAX_STREAMS - 1))
    }

    /// The stream registered at `index`.
    fn stream_at(&self, index: usize) -> StreamId {
        StreamId(self.seen.streams[index].load(Ordering::Relaxed))
    }

    /// The one stream the pool has seen, if it has seen exactly one.
    pub(crate) fn only_stream(&self) -> Option<StreamId> {
        (self.seen.count.load(Ordering::Acquire) == 1).then(|| self.stream_at(0))
    }

    /// Whether the pool has seen more than one stream.
    #[inline]
    pub(crate) fn is_multi_stream(&self) -> bool {
        self.seen.count.load(Ordering::Acquire) > 1
    }

    /// The tag for memory freed now on the stream with `index`. Records nothing: the first reuse on another
    /// stream that needs an event records it ([`StreamOrder::order_reuse`]).
    #[inline]
    pub(crate) fn tag_free(&self, index: usize) -> FreeTag {
        if !self.is_multi_stream() {
            return self.single_stream_tag(index);
        }
        if index == OVERFLOW {
            return FreeTag::freed(index, 0);
        }
        FreeTag::freed(index, self.seqs[index].read_at_free())
    }

    /// [`StreamOrder::tag_free`] while the pool has seen one stream: the caller checked
    /// [`StreamOrder::is_multi_stream`]. A free of the pool's one stream is ordered before later work on
    /// it by the stream; an event a second stream's reuse records later covers it.
    #[inline]
    pub(crate) fn single_stream_tag(&self, index: usize) -> FreeTag {
        FreeTag::freed(index, self.seqs[index].read_alone())
    }

    /// Records an event on the stream with `index` that covers every free that has read its number, under
    /// that stream's lock (`stream_events`), and retires the oldest pending event if it has completed.
    fn record_on(
        &self,
        backend: &dyn Backend,
        index: usize,
        stream_events: &mut StreamEvents,
    ) -> Result<(u64, EventId)> {
        let seq = self.seqs[index].advance_for_event();
        let event = backend.record_event(self.stream_at(index))?;
        self.counters.events_recorded.fetch_add(1, Ordering::Relaxed);
        stream_events.pending.push_back((seq, event));
        if let Some(&(old_seq, old_event)) = stream_events.pending.front()
            && old_seq != seq
            && backend.event_complete(old_event).unwrap_or(false)
        {
            Self::retire_through(backend, stream_events, old_seq);
        }
        Ok((seq, event))
    }

    /// Releases every event of one stream up to and including `seq`, which completed.
    fn retire_through(backend: &dyn Backend, stream_events: &mut StreamEvents, seq: u64) {
        while let Some(&(s, event)) = stream_events.pending.front() {
            if s > seq {
                break;
            }
            backend.release_event(event);
            stream_events.pending.pop_front();
        }
        stream_events.completed_through = stream_events.completed_through.max(seq);
    }

    /// Orders reuse, on the stream with `index`, of memory tagged `tag`: nothing to do when only this
    /// stream freed it; otherwise each other stream's covering event is found complete or waited on.
    #[inline]
    pub(crate) fn order_reuse(&self, backend: &dyn Backend, tag: FreeTag, index: usize) -> Result<()> {
        if tag.reusable_on(index) {
            return Ok(());
        }
        self.order_cross_stream(backend, tag, index)
    }

    #[cold]
    fn order_cross_stream(&self, backend: &dyn Backend, tag: FreeTag, index: usize) -> Result<()> {
        if tag.streams & (1 << OVERFLOW) != 0 || index == OVERFLOW {
            return self.synchronize(backend);
        }
        let waiter = self.stream_at(index);
        let mut others = tag.streams & !(1 << index);
        while others != 0 {
            let other = others.trailing_zeros() as usize;
            others &= others - 1;
            let mut stream_events = self.events[other].lock();
            if stream_events.completed_through >= tag.seq {
                continue;
            }
            let covering = stream_events.pending.iter().find(|&&(seq, _)| seq >= tag.seq).copied();
            let (seq, event) = match covering {
                Some(found) => found,
                None => match self.record_on(backend, other, &mut stream_events) {
                    Ok(recorded) => recorded,
                    // The freeing stream cannot take an event (destroyed, say): wait for the whole device.
                    Err(_) => {
                        drop(stream_events);
                        return self.synchronize(backend);
                    }
                },
            };
            if backend.event_complete(event)? {
                Self::retire_through(backend, &mut stream_events, seq);
            } else {
                backend.stream_wait_event(waiter, event)?;
                self.counters.stream_waits.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Waits for the whole device (before memory is unmapped or moved, or where no event orders a reuse)
    /// and retires every event: every free so far is complete.
    pub(crate) fn synchronize(&self, backend: &dyn Backend) -> Result<()> {
        // Each stream's lock, in index order (no other path holds two).
        let mut all: Vec<_> = self.events.iter().map(|events| events.lock()).collect();
        // The frees that read these numbers came before the synchronisation; later frees read higher ones.
        let through: Vec<u64> = self.seqs.iter().map(|seq| seq.advance_for_event()).collect();
        backend.synchronize()?;
        self.counters.synchronizations.fetch_add(1, Ordering::Relaxed);
        for (stream_events, &seq) in all.iter_mut().zip(&through) {
            Self::retire_through(backend, stream_events, seq);
        }
        Ok(())
    }

    /// Gives every pending event back to the backend (when the pool is dropped).
    pub(crate) fn release_all(&self, backend: &dyn Backend) {
        for events in &self.events {
            for (_, event) in events.lock().pending.drain(..) {
                backend.release_event(event);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::SimDevice;

    #[test]
    fn single_stream_records_nothing() {
        let sim = SimDevice::default();
        let order = StreamOrder::default();
        let s = order.index_of(StreamId(5));
        let tag = order.tag_free(s);
        order.order_reuse(&sim, tag, s).unwrap();
        assert_eq!(sim.counters().events_recorded, 0);
        assert!(!order.is_multi_stream());
    }

    #[test]
    fn cross_stream_reuse_waits_on_a_pending_event() {
        let sim = SimDevice::default();
        let order = StreamOrder::default();
        let a = order.index_of(StreamId(1));
        let b = order.index_of(StreamId(2));
        sim.hold_stream(StreamId(1));
        let tag = order.tag_free(a);
        assert_eq!(sim.counters().events_recorded, 0, "a free records nothing");
        order.order_reuse(&sim, tag, a).unwrap();
        assert!(sim.stream_waits().is_empty(), "same stream needs no wait");
        order.order_reuse(&sim, tag, b).unwrap();
        assert_eq!(sim.counters().events_recorded, 1, "the reuse on another stream records the event");
        let waits = sim.stream_waits();
        assert_eq!(waits.len(), 1);
        assert_eq!(waits[0].0, StreamId(2));
        assert_eq!(sim.event_state(waits[0].1), Some((StreamId(1), false)));
        let (later, covered) = (order.tag_free(a), order.tag_free(a));
        order.order_reuse(&sim, later, b).unwrap();
        assert_eq!(sim.counters().events_recorded, 2, "a free after the event needs one of its own");
        sim.release_stream(StreamId(1));
        order.order_reuse(&sim, tag, b).unwrap();
        assert_eq!(sim.stream_waits().len(), 2, "a completed event needs no wait");
        assert_eq!(sim.counters().events_recorded, 2, "the pending event covers it");
        assert_eq!(sim.live_events(), 1, "completed events are released up to the one found");
        order.order_reuse(&sim, covered, b).unwrap();
        assert_eq!(sim.counters().events_recorded, 2, "an event recorded after a free covers it");
        assert_eq!(sim.live_events(), 0, "completed events are released");
    }

    #[test]
    fn a_synchronization_covers_the_frees_before_it_only() {
        let sim = SimDevice::default();
        let order = StreamOrder::default();
        let a = order.index_of(StreamId(1));
        let b = order.index_of(StreamId(2));
        let before = order.tag_free(a);
        order.synchronize(&sim).unwrap();
        let after = order.tag_free(a);
        sim.hold_stream(StreamId(1));
        order.order_reuse(&sim, before, b).unwrap();
        assert_eq!(sim.counters().events_recorded, 0, "the synchronization completed it");
        order.order_reuse(&sim, after, b).unwrap();
        assert_eq!(sim.counters().events_recorded, 1, "a free after the synchronization needs an event");
        assert_eq!(sim.stream_waits().len(), 1);
    }

    #[test]
    fn frees_before_the_second_stream_are_covered_by_a_later_event() {
        let sim = SimDevice::default();
        let order = StreamOrder::default();
        let a = order.index_of(StreamId(1));
        let tag = order.tag_free(a);
        sim.hold_stream(StreamId(1));
        let b = order.index_of(StreamId(2));
        order.order_reuse(&sim, tag, b).unwrap();
        let waits = sim.stream_waits();
        assert_eq!(waits.len(), 1);
        assert_eq!(sim.event_state(waits[0].1), Some((StreamId(1), false)));
    }

    #[test]
    fn merged_tags_order_every_stream() {
        let sim = SimDevice::default();
        let order = StreamOrder::default();
        let (a, b, c) = (order.index_of(StreamId(1)), order.index_of(StreamId(2)), order.index_of(StreamId(3)));
        sim.hold_stream(StreamId(1));
        sim.hold_stream(StreamId(2));
        let tag = order.tag_free(a).merge(order.tag_free(b));
        order.order_reuse(&sim, tag, c).unwrap();
        let streams: Vec<_> = sim.stream_waits().iter().map(|&(s, e)| (s, sim.event_state(e).unwrap().0)).collect();
        assert_eq!(streams, vec![(StreamId(3), StreamId(1)), (StreamId(3), StreamId(2))]);
    }

    #[test]
    fn streams_past_the_table_synchronize() {
        let sim = SimDevice::default();
        let order = StreamOrder::default();
        for s in 0..MAX_STREAMS as u64 + 3 {
            order.index_of(StreamId(100 + s));
        }
        let last = order.index_of(StreamId(10_000));
        assert_eq!(last, OVERFLOW);
        let tag = order.tag_free(last);
        assert!(!tag.reusable_on(last));
        order.order_reuse(&sim, tag, last).unwrap();
        assert_eq!(sim.counters().synchronizations, 1);
    }

    #[test]
    fn single_tags_pack() {
        for tag in [FreeTag::FRESH, FreeTag::freed(0, 9), FreeTag::freed(63, 1 << 40)] {
            assert_eq!(FreeTag::unpack_single(tag.pack_single()), tag);
        }
    }
}
