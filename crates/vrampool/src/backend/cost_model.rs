//! What each device call costs in time, from the figures measured on an H200 host.

use serde::{Deserialize, Serialize};

use crate::units::{GIB, KIB, MIB};

/// Nanoseconds a device call takes, per call kind, so that a replay on the simulated device can report the
/// time a strategy would spend in the driver.
///
/// The defaults are the anchors measured on H200 machines (driver 580, CUDA 13.0): `cuMemAlloc`+`cuMemFree`
/// 86 to 120 µs per pair from 4 KiB to 16 MiB, 0.46 ms at 256 MiB and 0.95 ms at 1 GiB; `cuMemCreate`
/// 10 to 21 µs, `cuMemMap` 0.9 to 2 µs, `cuMemSetAccess` 26 to 42 µs for one chunk or a whole range,
/// `cuMemUnmap` 16 to 24 µs, `cuMemRelease` 11 µs for a 2 MiB chunk (the middle of each span is used).
/// Fields marked *estimate* were not measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostModel {
    /// One segment allocation plus its free, as `(segment bytes, nanoseconds)` points; linear between points
    /// and beyond the last two. Half is charged at allocation, half at free.
    pub segment_pair_ns: Vec<(u64, u64)>,
    /// Reserving an address range (`cuMemAddressReserve`); estimate.
    pub reserve_range_ns: u64,
    /// Releasing an address range (`cuMemAddressFree`); estimate.
    pub release_range_ns: u64,
    /// Creating one granularity-sized chunk of physical memory (`cuMemCreate`).
    pub create_chunk_ns: u64,
    /// Mapping one chunk (`cuMemMap`).
    pub map_chunk_ns: u64,
    /// Granting access to a mapped range, one call per batch (`cuMemSetAccess`).
    pub set_access_ns: u64,
    /// Unmapping one chunk (`cuMemUnmap`).
    pub unmap_chunk_ns: u64,
    /// Giving one chunk's physical memory back (`cuMemRelease`).
    pub release_chunk_ns: u64,
    /// Recording an event (`cuEventRecord`); estimate.
    pub record_event_ns: u64,
    /// Asking whether an event completed (`cuEventQuery`); estimate.
    pub query_event_ns: u64,
    /// Ordering a stream after an event (`cuStreamWaitEvent`); estimate.
    pub wait_event_ns: u64,
    /// Waiting for the whole device (`cuCtxSynchronize` on an idle device); estimate.
    pub synchronize_ns: u64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            segment_pair_ns: vec![(4 * KIB, 86_000), (16 * MIB, 120_000), (256 * MIB, 460_000), (GIB, 950_000)],
            reserve_range_ns: 10_000,
            release_range_ns: 10_000,
            create_chunk_ns: 15_500,
            map_chunk_ns: 1_500,
            set_access_ns: 34_000,
            unmap_chunk_ns: 20_000,
            release_chunk_ns: 11_000,
            record_event_ns: 2_000,
            query_event_ns: 500,
            wait_event_ns: 1_000,
            synchronize_ns: 10_000,
        }
    }
}

impl CostModel {
    /// A model in which every call is free (for tests that count calls, not time).
    pub fn free() -> Self {
        CostModel {
            segment_pair_ns: vec![(0, 0)],
            reserve_range_ns: 0,
            release_range_ns: 0,
            create_chunk_ns: 0,
            map_chunk_ns: 0,
            set_access_ns: 0,
            unmap_chunk_ns: 0,
            release_chunk_ns: 0,
            record_event_ns: 0,
            query_event_ns: 0,
            wait_event_ns: 0,
            synchronize_ns: 0,
        }
    }

    /// The cost of a segment allocation plus its free at `size` bytes.
    pub fn segment_pair(&self, size: u64) -> u64 {
        let points = &self.segment_pair_ns;
        match points.len() {
            0 => 0,
            1 => points[0].1,
            _ => {
                let index = points.partition_point(|&(s, _)| s <= size);
                let (lo, hi) = match index {
                    0 => return points[0].1,
                    i if i >= points.len() => (points[points.len() - 2], points[points.len() - 1]),
                    i => (points[i - 1], points[i]),
                };
                let span = (hi.0 - lo.0) as f64;
                let slope = (hi.1 as f64 - lo.1 as f64) / span;
                (lo.1 as f64 + slope * (size as f64 - lo.0 as f64)).max(0.0) as u64
            }
        }
    }

    /// The cost of allocating a segment of `size` bytes.
    pub fn segment_alloc(&self, size: u64) -> u64 {
        self.segment_pair(size) / 2
    }

    /// The cost of freeing a segment of `size` bytes.
    pub fn segment_free(&self, size: u64) -> u64 {
        let pair = self.segment_pair(size);
        pair - pair / 2
    }

    /// The cost of mapping `chunks` new chunks in one batch.
    pub fn map(&self, chunks: u64) -> u64 {
        chunks * (self.create_chunk_ns + self.map_chunk_ns) + self.set_access_ns
    }

    /// The cost of unmapping and releasing `chunks` chunks.
    pub fn unmap(&self, chunks: u64) -> u64 {
        chunks * (self.unmap_chunk_ns + self.release_chunk_ns)
    }

    /// The cost of moving `chunks` chunks' physical memory to new addresses in one batch.
    pub fn remap(&self, chunks: u64) -> u64 {
        chunks * (self.unmap_chunk_ns + self.map_chunk_ns) + self.set_access_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_costs_follow_the_anchors() {
        let model = CostModel::default();
        assert_eq!(model.segment_pair(4 * KIB), 86_000);
        assert_eq!(model.segment_pair(256 * MIB), 460_000);
        assert_eq!(model.segment_pair(GIB), 950_000);
        assert_eq!(model.segment_pair(1), 86_000);
        let between = model.segment_pair(136 * MIB);
        assert!(between > 120_000 && between < 460_000, "{between}");
        let beyond = model.segment_pair(2 * GIB);
        assert!(beyond > 950_000, "{beyond}");
        assert_eq!(model.segment_alloc(GIB) + model.segment_free(GIB), 950_000);
    }

    #[test]
    fn batching_saves_the_access_call() {
        let model = CostModel::default();
        assert!(model.map(4) < 4 * model.map(1));
        assert_eq!(model.map(4) - model.map(3), model.create_chunk_ns + model.map_chunk_ns);
        assert_eq!(CostModel::free().map(10), 0);
    }
}
