//! What each device call costs in time, from the figures measured on an H200 host.

use serde::{Deserialize, Serialize};

use crate::units::{GIB, KIB, MIB};

/// Nanoseconds a device call takes, per call kind, so that a replay on the simulated device can report the
/// time a strategy would spend in the driver.
///
/// The defaults are the anchors measured on H200 machines (driver 580, CUDA 13.0): `cuMemAlloc`+`cuMemFree`
/// 86 to 120 µs per pair from 4 KiB to 16 MiB, 0.46 ms at 256 MiB and 0.95 ms at 1 GiB; per physical page
/// of 2 MiB to 128 MiB, `cuMemCreate` 10 to 21 µs, `cuMemMap` 0.9 to 2 µs, `cuMemUnmap` 16 to 24 µs,
/// `cuMemRelease` 11 µs (2 MiB) to 99 µs (128 MiB) (taken as growing linearly with the page between the two
/// ends); `cuMemSetAccess` 26 to 42 µs for one page or a whole range (34 µs per call). Fields marked
/// *estimate* were not measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostModel {
    /// One segment allocation plus its free, as `(segment bytes, nanoseconds)` points; linear between points
    /// and beyond the last two. Half is charged at allocation, half at free.
    pub segment_pair_ns: Vec<(u64, u64)>,
    /// Reserving an address range (`cuMemAddressReserve`); estimate.
    pub reserve_range_ns: u64,
    /// Releasing an address range (`cuMemAddressFree`); estimate.
    pub release_range_ns: u64,
    /// Creating one page of physical memory (`cuMemCreate`), as `(page bytes, nanoseconds)` points.
    pub create_page_ns: Vec<(u64, u64)>,
    /// Mapping one page (`cuMemMap`), as points.
    pub map_page_ns: Vec<(u64, u64)>,
    /// Granting access to a mapped range, one call per batch (`cuMemSetAccess`).
    pub set_access_ns: u64,
    /// Unmapping one page (`cuMemUnmap`), as points.
    pub unmap_page_ns: Vec<(u64, u64)>,
    /// Giving one page's physical memory back (`cuMemRelease`), as points.
    pub release_page_ns: Vec<(u64, u64)>,
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
        let small = 2 * MIB;
        let large = 128 * MIB;
        CostModel {
            segment_pair_ns: vec![(4 * KIB, 86_000), (16 * MIB, 120_000), (256 * MIB, 460_000), (GIB, 950_000)],
            reserve_range_ns: 10_000,
            release_range_ns: 10_000,
            create_page_ns: vec![(small, 10_000), (large, 21_000)],
            map_page_ns: vec![(small, 900), (large, 2_000)],
            set_access_ns: 34_000,
            unmap_page_ns: vec![(small, 16_000), (large, 24_000)],
            release_page_ns: vec![(small, 11_000), (large, 99_000)],
            record_event_ns: 2_000,
            query_event_ns: 500,
            wait_event_ns: 1_000,
            synchronize_ns: 10_000,
        }
    }
}

/// The value at `x` of the line through `points`: linear between points and beyond the last two, the first
/// value below the first point, never negative.
fn interpolate(points: &[(u64, u64)], x: u64) -> u64 {
    match points.len() {
        0 => 0,
        1 => points[0].1,
        _ => {
            let index = points.partition_point(|&(at, _)| at <= x);
            let (lo, hi) = match index {
                0 => return points[0].1,
                i if i >= points.len() => (points[points.len() - 2], points[points.len() - 1]),
                i => (points[i - 1], points[i]),
            };
            let slope = (hi.1 as f64 - lo.1 as f64) / (hi.0 - lo.0) as f64;
            (lo.1 as f64 + slope * (x as f64 - lo.0 as f64)).max(0.0) as u64
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
            create_page_ns: vec![(0, 0)],
            map_page_ns: vec![(0, 0)],
            set_access_ns: 0,
            unmap_page_ns: vec![(0, 0)],
            release_page_ns: vec![(0, 0)],
            record_event_ns: 0,
            query_event_ns: 0,
            wait_event_ns: 0,
            synchronize_ns: 0,
        }
    }

    /// The cost of a segment allocation plus its free at `size` bytes.
    pub fn segment_pair(&self, size: u64) -> u64 {
        interpolate(&self.segment_pair_ns, size)
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

    /// The cost of creating and mapping `pages` new pages of `page` bytes in one batch (each of these costs
    /// saturates at `u64::MAX` nanoseconds).
    pub fn map(&self, pages: u64, page: u64) -> u64 {
        let per_page = interpolate(&self.create_page_ns, page).saturating_add(interpolate(&self.map_page_ns, page));
        pages.saturating_mul(per_page).saturating_add(self.set_access_ns)
    }

    /// The cost of unmapping and releasing `pages` pages of `page` bytes.
    pub fn unmap(&self, pages: u64, page: u64) -> u64 {
        self.unmap_only(pages, page).saturating_add(self.release(pages, page))
    }

    /// The cost of unmapping `pages` pages of `page` bytes whose memory stays mapped at another address
    /// (no `cuMemRelease`).
    pub fn unmap_only(&self, pages: u64, page: u64) -> u64 {
        pages.saturating_mul(interpolate(&self.unmap_page_ns, page))
    }

    /// The cost of giving `pages` pages of `page` bytes back to the device (`cuMemRelease`).
    pub fn release(&self, pages: u64, page: u64) -> u64 {
        pages.saturating_mul(interpolate(&self.release_page_ns, page))
    }

    /// The cost of moving `pages` pages of `page` bytes to new addresses in one batch.
    pub fn remap(&self, pages: u64, page: u64) -> u64 {
        let per_page = interpolate(&self.unmap_page_ns, page).saturating_add(interpolate(&self.map_page_ns, page));
        pages.saturating_mul(per_page).saturating_add(self.set_access_ns)
    }

    /// The cost of mapping `pages` pages of `page` bytes at a second address in one batch.
    pub fn alias(&self, pages: u64, page: u64) -> u64 {
        pages.saturating_mul(interpolate(&self.map_page_ns, page)).saturating_add(self.set_access_ns)
    }

    /// The cost of one call that does `per_batch` (one of [`CostModel::map`], [`CostModel::remap`],
    /// [`CostModel::alias`], [`CostModel::unmap_only`]) on `pages` (bytes each): the pages taken as batches
    /// of equal size, with one access call for the whole call (where `has_access`) rather than one per batch.
    pub fn batched(&self, pages: &[u64], per_batch: impl Fn(&CostModel, u64, u64) -> u64, has_access: bool) -> u64 {
        let mut sizes: Vec<u64> = pages.to_vec();
        sizes.sort_unstable();
        let mut time: u64 = 0;
        let mut batches: u64 = 0;
        for group in sizes.chunk_by(|a, b| a == b) {
            time = time.saturating_add(per_batch(self, group.len() as u64, group[0]));
            batches += 1;
        }
        if has_access && batches > 1 {
            time = time.saturating_sub((batches - 1).saturating_mul(self.set_access_ns));
        }
        time
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
    fn batching_saves_the_access_call_and_large_pages_cost_less_per_byte() {
        let model = CostModel::default();
        let g = 2 * MIB;
        assert!(model.map(4, g) < 4 * model.map(1, g));
        assert_eq!(model.map(4, g) - model.map(3, g), 10_000 + 900);
        assert_eq!(model.unmap(1, 128 * MIB), 24_000 + 99_000);
        // 64 MiB as 32 pages of 2 MiB or one page of 64 MiB.
        assert!(model.map(1, 64 * MIB) * 5 < model.map(32, g), "{} {}", model.map(1, 64 * MIB), model.map(32, g));
        assert_eq!(CostModel::free().map(10, g), 0);
        for pages in [0, 1, 1 << 63, u64::MAX] {
            for cost in [model.map(pages, 1), model.unmap(pages, 1), model.remap(pages, 1), model.alias(pages, 1)] {
                assert!(pages < 2 || cost == u64::MAX, "{pages} pages: {cost}");
            }
        }
        assert!(model.segment_pair(u64::MAX) > model.segment_pair(GIB), "the last rate goes on");
        assert_eq!(model.unmap(3, g), model.unmap_only(3, g) + model.release(3, g));
        assert_eq!(model.unmap_only(1, g), 16_000, "an address given up whose memory stays mapped elsewhere");
    }
}
