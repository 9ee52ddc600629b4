//! A dynamic pool's memory on a device without virtual memory (or with it turned off): separate segments,
//! added whole when the pool grows and freed whole when it trims.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use super::pool_device::PoolDevice;
use crate::backend::Backend;
use crate::counters::ReservedCounters;
use crate::error::Result;
use crate::range_allocator::RangeAllocator;
use crate::report::{SegmentKind, SegmentReport};
use crate::stream_order::FreeTag;

/// Segments by address, with their sizes. Each is one region of the pool's range allocator: blocks never
/// span two segments. Lookups are O(log segments); segments are few (one per growth).
#[derive(Debug, Default)]
pub(super) struct SegmentSpace {
    segments: BTreeMap<u64, u64>,
    total: u64,
}

/// A segment allocated ahead of need ([`SegmentSpace::plan_ahead`]): planned under the pool's lock, made by
/// the device outside it ([`SegmentAhead::allocate`]), recorded under the lock again
/// ([`SegmentSpace::finish_ahead`]).
#[derive(Debug)]
pub(super) struct SegmentAhead {
    /// The segment's bytes.
    bytes: u64,
    /// The device's answer, once asked: the segment's address.
    made: Option<Result<u64>>,
}

impl SegmentAhead {
    /// The bytes being allocated: counted against the cap while the lock is not held.
    pub(super) fn pending_bytes(&self) -> u64 {
        self.bytes
    }

    /// Asks the device for the segment. Called without the pool's lock.
    pub(super) fn allocate(&mut self, device: &PoolDevice) {
        self.made = Some(device.call(|backend| backend.allocate_segment(self.bytes)));
    }
}

impl SegmentSpace {
    /// The space with a first segment of `initial` bytes (none where 0), which `ranges` then sub-allocates.
    pub(super) fn open(device: &PoolDevice, initial: u64, ranges: &mut RangeAllocator<FreeTag>) -> Result<Self> {
        let mut space = SegmentSpace::default();
        if initial > 0 {
            let addr = device.backend.allocate_segment(initial)?;
            device.counters.count_call();
            device.counters.add_reserved(initial);
            space.insert(addr, initial);
            ranges.add_region(addr, initial);
        }
        Ok(space)
    }

    /// Whether `addr` lies in a segment.
    pub(super) fn contains(&self, addr: u64) -> bool {
        self.segments.range(..=addr).next_back().is_some_and(|(&start, &size)| addr < start + size)
    }

    /// Every segment, for the pool's report.
    pub(super) fn report(&self) -> Vec<SegmentReport> {
        self.segments
            .iter()
            .map(|(&addr, &size)| SegmentReport { kind: SegmentKind::Segment, addr, size, reserved_bytes: size })
            .collect()
    }

    /// The bytes of every segment.
    pub(super) fn reserved_bytes(&self) -> u64 {
        self.total
    }

    /// Adds a segment that holds `need` bytes, sized by the growth policy with `pending` bytes being added
    /// outside the pool's lock; false when the cap or the device refuses it.
    pub(super) fn grow(
        &mut self,
        ranges: &mut RangeAllocator<FreeTag>,
        need: u64,
        pending: u64,
        device: &PoolDevice,
    ) -> Result<bool> {
        let Some(grow) = device.policy().growth(self.total + pending, need) else { return Ok(false) };
        let made = ReservedCounters::timed(&device.counters.rare.device_time_ns, || {
            device.call(|backend| backend.allocate_segment(grow))
        });
        match made {
            Ok(addr) => {
                self.adopt(ranges, addr, grow, device);
                Ok(true)
            }
            Err(err) if err.is_out_of_memory() => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Plans a growth of `bytes` ahead of need: one segment.
    pub(super) fn plan_ahead(&self, bytes: u64) -> SegmentAhead {
        SegmentAhead { bytes, made: None }
    }

    /// Records the segment the device made for `ahead`; returns its bytes, or the device's error.
    pub(super) fn finish_ahead(
        &mut self,
        ranges: &mut RangeAllocator<FreeTag>,
        ahead: SegmentAhead,
        device: &PoolDevice,
    ) -> Result<u64> {
        let addr = ahead.made.expect("the device was asked for the segment")?;
        self.adopt(ranges, addr, ahead.bytes, device);
        device.counters.rare.pre_expansions.fetch_add(1, Ordering::Relaxed);
        Ok(ahead.bytes)
    }

    /// Frees every segment no block uses; returns the bytes given back.
    pub(super) fn free_unused(&mut self, ranges: &mut RangeAllocator<FreeTag>, device: &PoolDevice) -> Result<u64> {
        let mut released = 0;
        for (addr, size) in ranges.free_regions() {
            debug_assert_eq!(self.segments.get(&addr), Some(&size), "regions are whole segments");
            device.call(|backend| backend.free_segment(addr, size))?;
            ranges.remove_free_region(addr);
            if let Some(size) = self.segments.remove(&addr) {
                self.total -= size;
            }
            device.counters.sub_reserved(size);
            released += size;
        }
        Ok(released)
    }

    /// Frees every segment when the pool is dropped. Errors are dropped: there is no caller to give them to.
    pub(super) fn release(&mut self, backend: &dyn Backend) {
        for (&addr, &size) in &self.segments {
            let _ = backend.free_segment(addr, size);
        }
    }

    /// Records a segment the device just made, as a growth: its bytes reserved, its addresses in `ranges`.
    fn adopt(&mut self, ranges: &mut RangeAllocator<FreeTag>, addr: u64, bytes: u64, device: &PoolDevice) {
        self.insert(addr, bytes);
        ranges.add_region(addr, bytes);
        device.counters.add_reserved(bytes);
        device.counters.rare.growths.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a segment.
    fn insert(&mut self, addr: u64, size: u64) {
        self.segments.insert(addr, size);
        self.total += size;
    }
}
