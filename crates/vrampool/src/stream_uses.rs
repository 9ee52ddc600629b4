//! Blocks used on streams besides their own, and their frees held back until that work has run.
//!
//! A pool orders reuse by the stream a block was allocated on. A program may also queue work that reads or
//! writes a block on other streams (PyTorch's `record_stream`; NCCL's sends and receives record theirs): such
//! a block must not be handed out again, on any stream, before the work those streams had queued at its free
//! has run. [`StreamUses`] wraps a pool to keep that rule:
//!
//! - [`StreamUses::record_stream`] notes a stream a live block is used on;
//! - a free of a block with noted streams records an event on each of them and holds the block back; a free
//!   of any other block goes straight to the pool;
//! - held blocks go to the pool once all their events have completed, checked without blocking before each
//!   allocation (oldest first, stopping at the first still running); before an allocation is refused for lack
//!   of memory, and before a trim, the host waits for them all.
//!
//! Nothing is synchronised on the allocation path while memory lasts. While no block has noted streams and
//! none is held, each call costs two relaxed atomic loads beyond the pool's own.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::backend::{Backend, EventId};
use crate::counters::PoolStats;
use crate::error::{Error, Result};
use crate::pool::{Allocation, Pool};
use crate::report::{PoolReport, ReportLimit};
use crate::stream::StreamId;

/// A free held back until the events recorded at it have completed.
#[derive(Debug)]
struct HeldFree {
    addr: u64,
    events: Vec<EventId>,
}

/// The blocks with noted streams and the held frees, under one lock.
#[derive(Debug, Default)]
struct Uses {
    /// Live blocks and the streams, besides their own, that use them.
    streams: HashMap<u64, Vec<StreamId>>,
    /// Frees waiting for their events, oldest first.
    held: VecDeque<HeldFree>,
    /// The addresses in `held`, to refuse a second free of a held block.
    held_addrs: HashSet<u64>,
}

/// Counters of the work [`StreamUses`] does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamUseCounters {
    /// Frees held back for work on other streams, so far.
    pub held_frees: u64,
    /// Frees held back now.
    pub held_now: u64,
    /// Events recorded on the streams that used held blocks.
    pub events_recorded: u64,
    /// Times the host waited for held blocks' events (before refusing an allocation, and before a trim).
    pub waits: u64,
}

/// A pool whose blocks may be used on several streams: see the module's documentation.
#[derive(Debug)]
pub struct StreamUses<P> {
    pool: P,
    uses: Mutex<Uses>,
    /// Entries in `uses.streams`, read without the lock on every free.
    noted: AtomicUsize,
    /// Entries in `uses.held`, read without the lock on every allocation and free.
    held: AtomicUsize,
    held_total: AtomicU64,
    events_recorded: AtomicU64,
    waits: AtomicU64,
}

impl<P: Pool> StreamUses<P> {
    /// Wraps `pool`; nothing is noted or held yet.
    pub fn new(pool: P) -> Self {
        StreamUses {
            pool,
            uses: Mutex::default(),
            noted: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            held_total: AtomicU64::new(0),
            events_recorded: AtomicU64::new(0),
            waits: AtomicU64::new(0),
        }
    }

    /// The pool inside.
    pub fn inner(&self) -> &P {
        &self.pool
    }

    /// Notes that work queued on `stream` uses the live block at `addr`: its free is then held back until
    /// that work has run. Noting a stream twice, or the block's own stream, is harmless (the latter only
    /// holds the free back a little longer). The address is not checked here: a free of an address that was
    /// never live is refused by the pool when the held free reaches it, and counted there.
    pub fn record_stream(&self, addr: u64, stream: StreamId) {
        let mut uses = self.uses.lock();
        let streams = uses.streams.entry(addr).or_default();
        if !streams.contains(&stream) {
            streams.push(stream);
        }
        self.noted.store(uses.streams.len(), Ordering::Relaxed);
    }

    /// Counters of the held frees.
    pub fn counters(&self) -> StreamUseCounters {
        StreamUseCounters {
            held_frees: self.held_total.load(Ordering::Relaxed),
            held_now: self.held.load(Ordering::Relaxed) as u64,
            events_recorded: self.events_recorded.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
        }
    }

    /// Gives the pool the held blocks whose events have all completed, oldest first, stopping at the first
    /// whose work is still running; never blocks. Returns how many went to the pool.
    pub fn collect(&self) -> Result<usize> {
        if self.held.load(Ordering::Relaxed) == 0 {
            return Ok(0);
        }
        self.release_held(false)
    }

    /// Waits for the events of every held block and gives them all to the pool. Returns how many.
    pub fn wait_all(&self) -> Result<usize> {
        if self.held.load(Ordering::Relaxed) == 0 {
            return Ok(0);
        }
        self.waits.fetch_add(1, Ordering::Relaxed);
        self.release_held(true)
    }

    /// The body of [`StreamUses::collect`] (`wait` false) and [`StreamUses::wait_all`] (`wait` true). The
    /// first error met (an event call that failed, or a free the pool refused) is returned after the
    /// blocks that could be given back were.
    fn release_held(&self, wait: bool) -> Result<usize> {
        let backend = self.pool.backend();
        let mut ready = Vec::new();
        let mut first_error = None;
        {
            let mut uses = self.uses.lock();
            while let Some(front) = uses.held.front() {
                let done = front.events.iter().try_fold(true, |done, &event| {
                    if wait {
                        backend.wait_event(event).map(|()| done)
                    } else {
                        backend.event_complete(event).map(|complete| done && complete)
                    }
                });
                match done {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(err) => {
                        // A failed event call cannot be retried meaningfully: the block is given back after
                        // the whole device has run, the safe ordering that needs no event.
                        first_error.get_or_insert(err);
                        if backend.synchronize().is_err() {
                            break;
                        }
                    }
                }
                let free = uses.held.pop_front().expect("the front exists");
                uses.held_addrs.remove(&free.addr);
                ready.push(free);
            }
            self.held.store(uses.held.len(), Ordering::Relaxed);
        }
        for free in &ready {
            free.events.iter().for_each(|&event| backend.release_event(event));
            if let Err(err) = self.pool.free(free.addr) {
                first_error.get_or_insert(err);
            }
        }
        match first_error {
            Some(err) => Err(err),
            None => Ok(ready.len()),
        }
    }

    /// Holds the free of `addr` back until the work queued on `streams` so far has run.
    fn hold(&self, addr: u64, streams: Vec<StreamId>, backend: &Arc<dyn Backend>) -> Result<()> {
        let mut events = Vec::with_capacity(streams.len());
        for stream in streams {
            match backend.record_event(stream) {
                Ok(event) => events.push(event),
                Err(err) => {
                    // Nothing is held: the block stays live, as the error promises, and its streams noted.
                    events.into_iter().for_each(|event| backend.release_event(event));
                    return Err(err);
                }
            }
        }
        self.events_recorded.fetch_add(events.len() as u64, Ordering::Relaxed);
        let mut uses = self.uses.lock();
        uses.streams.remove(&addr);
        self.noted.store(uses.streams.len(), Ordering::Relaxed);
        uses.held_addrs.insert(addr);
        uses.held.push_back(HeldFree { addr, events });
        self.held.store(uses.held.len(), Ordering::Relaxed);
        self.held_total.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl<P: Pool> Pool for StreamUses<P> {
    fn strategy(&self) -> &'static str {
        self.pool.strategy()
    }

    fn backend(&self) -> &Arc<dyn Backend> {
        self.pool.backend()
    }

    /// Gives the pool the held blocks whose work has run, then allocates; where the pool is out of memory
    /// and blocks are held, waits for them and tries once more.
    #[inline]
    fn allocate(&self, size: u64, alignment: u64, stream: StreamId) -> Result<Allocation> {
        if self.held.load(Ordering::Relaxed) != 0 {
            // A failed event call is no reason to refuse the allocation: the blocks stay held.
            let _ = self.collect();
        }
        match self.pool.allocate(size, alignment, stream) {
            Err(err) if err.is_out_of_memory() && self.held.load(Ordering::Relaxed) != 0 => match self.wait_all() {
                Ok(n) if n > 0 => self.pool.allocate(size, alignment, stream),
                _ => Err(err),
            },
            result => result,
        }
    }

    /// Frees `addr`, or holds it back where streams were noted for it. A second free of a held block is
    /// refused ([`Error::NotLive`]).
    #[inline]
    fn free(&self, addr: u64) -> Result<()> {
        if self.noted.load(Ordering::Relaxed) == 0 && self.held.load(Ordering::Relaxed) == 0 {
            return self.pool.free(addr);
        }
        let streams = {
            let uses = self.uses.lock();
            if uses.held_addrs.contains(&addr) {
                return Err(Error::NotLive { addr });
            }
            uses.streams.get(&addr).cloned()
        };
        match streams {
            Some(streams) => self.hold(addr, streams, self.pool.backend()),
            None => self.pool.free(addr),
        }
    }

    fn stats(&self) -> PoolStats {
        self.pool.stats()
    }

    fn set_limit(&self, bytes: Option<u64>) -> Result<u64> {
        self.pool.set_limit(bytes)
    }

    fn reset_peaks(&self) {
        self.pool.reset_peaks();
    }

    fn report_within(&self, limit: ReportLimit) -> PoolReport {
        self.pool.report_within(limit)
    }

    /// Waits for the held blocks' work and gives them to the pool, then trims it.
    fn trim(&self) -> Result<u64> {
        self.wait_all()?;
        self.pool.trim()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{SimDevice, SimDeviceConfig};
    use crate::dynamic::{Cap, DynamicConfig, DynamicPool};
    use crate::units::{DEFAULT_ALIGNMENT, MIB};

    const MAIN: StreamId = StreamId(1);
    const SIDE: StreamId = StreamId(2);

    fn pool(cap: u64) -> (Arc<SimDevice>, StreamUses<DynamicPool>) {
        let device = Arc::new(SimDevice::new(SimDeviceConfig::default()));
        let config = DynamicConfig::default().initial_size(64 * MIB).cap(Cap::Bytes(cap));
        let pool = DynamicPool::new(device.clone(), config).unwrap();
        (device, StreamUses::new(pool))
    }

    #[test]
    fn a_block_used_on_another_stream_is_not_reused_before_that_work_runs() {
        let (device, pool) = pool(1024 * MIB);
        let a = pool.allocate(16 * MIB, DEFAULT_ALIGNMENT, MAIN).unwrap();
        pool.record_stream(a.addr, SIDE);
        device.hold_stream(SIDE);
        pool.free(a.addr).unwrap();
        assert_eq!(pool.counters().held_now, 1);
        assert_eq!(pool.stats().allocated_bytes.current, 16 * MIB, "the pool has not had the block back yet");
        let b = pool.allocate(16 * MIB, DEFAULT_ALIGNMENT, MAIN).unwrap();
        assert_ne!(b.addr, a.addr, "the side stream still uses a's memory");
        device.release_stream(SIDE);
        let c = pool.allocate(16 * MIB, DEFAULT_ALIGNMENT, MAIN).unwrap();
        assert_eq!(pool.counters().held_now, 0, "the side stream's work has run: a is back in the pool");
        assert_eq!(c.addr, a.addr, "and reused");
        assert_eq!(pool.stats().allocated_bytes.current, 32 * MIB);
    }

    #[test]
    fn blocks_without_noted_streams_are_freed_at_once() {
        let (_device, pool) = pool(1024 * MIB);
        let a = pool.allocate(MIB, DEFAULT_ALIGNMENT, MAIN).unwrap();
        let b = pool.allocate(MIB, DEFAULT_ALIGNMENT, MAIN).unwrap();
        pool.record_stream(b.addr, SIDE);
        pool.free(a.addr).unwrap();
        assert_eq!(pool.counters().held_frees, 0);
        assert_eq!(pool.stats().allocated_bytes.current, MIB);
    }

    #[test]
    fn out_of_memory_waits_for_held_blocks_and_tries_again() {
        let (device, pool) = pool(128 * MIB);
        let a = pool.allocate(100 * MIB, DEFAULT_ALIGNMENT, MAIN).unwrap();
        pool.record_stream(a.addr, SIDE);
        device.hold_stream(SIDE);
        pool.free(a.addr).unwrap();
        let b = pool.allocate(100 * MIB, DEFAULT_ALIGNMENT, MAIN).unwrap();
        assert_eq!(pool.counters().waits, 1, "the host waited for the side stream instead of failing");
        assert_eq!(pool.counters().held_now, 0);
        pool.free(b.addr).unwrap();
        let err = pool.allocate(200 * MIB, DEFAULT_ALIGNMENT, MAIN).unwrap_err();
        assert!(matches!(err, Error::OutOfMemory { .. }), "{err}");
    }

    #[test]
    fn a_second_free_of_a_held_block_is_refused() {
        let (device, pool) = pool(1024 * MIB);
        let a = pool.allocate(MIB, DEFAULT_ALIGNMENT, MAIN).unwrap();
        pool.record_stream(a.addr, SIDE);
        device.hold_stream(SIDE);
        pool.free(a.addr).unwrap();
        assert_eq!(pool.free(a.addr).unwrap_err(), Error::NotLive { addr: a.addr });
        assert_eq!(pool.counters().held_now, 1, "still held, not given to the pool by the second free");
    }

    #[test]
    fn trim_waits_for_held_blocks_then_gives_memory_back() {
        let (device, pool) = pool(1024 * MIB);
        let a = pool.allocate(32 * MIB, DEFAULT_ALIGNMENT, MAIN).unwrap();
        pool.record_stream(a.addr, SIDE);
        device.hold_stream(SIDE);
        pool.free(a.addr).unwrap();
        pool.trim().unwrap();
        assert_eq!(pool.counters().held_now, 0);
        assert_eq!(pool.stats().allocated_bytes.current, 0);
        assert_eq!(pool.stats().reserved_bytes.current, 0, "everything went back to the device");
    }

    #[test]
    fn a_failed_event_record_leaves_the_block_live() {
        let (device, pool) = pool(1024 * MIB);
        let a = pool.allocate(MIB, DEFAULT_ALIGNMENT, MAIN).unwrap();
        pool.record_stream(a.addr, SIDE);
        device.set_faults(crate::backend::FaultPlan::fail_call(1));
        assert!(pool.free(a.addr).is_err());
        assert_eq!(pool.stats().allocated_bytes.current, MIB);
        device.set_faults(crate::backend::FaultPlan::none());
        pool.free(a.addr).unwrap();
        assert_eq!(pool.counters().held_now, 1);
    }
}
