//! A model of PyTorch's CUDA caching allocator with `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`,
//! replayed on a trace's requests: what PyTorch's expandable segments would have reserved for them.
//!
//! The model follows PyTorch 2.x's `CUDACachingAllocator` with its default settings otherwise:
//!
//! - a request is rounded up to a multiple of 512 bytes (512 at least); requests of at most 1 MiB after
//!   rounding are served from the small pool, larger ones from the large pool;
//! - each (stream, pool) has one expandable segment: a virtual range mapped from its start in pages of
//!   2 MiB (small pool) or 20 MiB (large pool), which only grows (nothing is unmapped without
//!   `torch.cuda.empty_cache()`, which a trace does not record);
//! - a request takes the smallest free block of its stream and pool that holds it (the lowest address among
//!   equals), preferring any such block to the free block at the segment's mapped end (PyTorch counts that
//!   one as large as the unmapped range behind it); where none holds it, the segment maps the pages the
//!   request lacks past its mapped end, joined to the free block there;
//! - a block larger than the request is split where at least 512 bytes remain; a freed block merges with
//!   free neighbours.
//!
//! A block is reusable from the trace's `free_completed` (PyTorch's events on other streams have completed
//! by then), as in every replay. Not modelled: `max_split_size_mb`, `roundup_power2_divisions`, garbage
//! collection thresholds, out-of-memory retries, CUDA graph pools.
//!
//! Cost: O(log n) per request in the blocks of its segment.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;
use vrampool::CostModel;

use crate::replay_plan::{Operation, ReplayPlan};

/// PyTorch's smallest block and rounding step (`kMinBlockSize`).
const MIN_BLOCK: u128 = 512;
/// The largest request the small pool serves (`kSmallSize`).
const SMALL_SIZE: u128 = 1 << 20;
/// The small pool's page (`kSmallBuffer`).
const SMALL_PAGE: u64 = 2 << 20;
/// The large pool's page (`kLargeBuffer`).
const LARGE_PAGE: u64 = 20 << 20;

/// What PyTorch's expandable segments reserve for a trace's requests, by the model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpandableFigures {
    /// The most bytes requested and live at once.
    pub peak_live_bytes: u64,
    /// The most bytes mapped at once.
    pub peak_reserved_bytes: u64,
    /// Times a segment mapped more pages (one `cuMemSetAccess` each).
    pub maps: u64,
    /// The cost model's time of those maps, in nanoseconds.
    pub driver_ns: u64,
}

impl ExpandableFigures {
    /// Peak live over peak reserved bytes; `None` where nothing was reserved.
    pub fn utilization(&self) -> Option<f64> {
        (self.peak_reserved_bytes > 0).then(|| self.peak_live_bytes as f64 / self.peak_reserved_bytes as f64)
    }
}

/// One block of a segment: its bytes and whether it is free. Sizes and offsets are 128-bit so that no
/// request, however large, wraps.
#[derive(Clone, Copy, Debug)]
struct Block {
    size: u128,
    free: bool,
}

/// One expandable segment: the blocks of its mapped part, in address order, with no gap between them.
#[derive(Debug)]
struct Segment {
    page: u128,
    /// Bytes mapped from the segment's start.
    mapped: u128,
    /// Blocks by offset; together they cover `0..mapped`.
    blocks: BTreeMap<u128, Block>,
    /// Free blocks as (size, offset), smallest first.
    free: BTreeSet<(u128, u128)>,
}

impl Segment {
    fn new(page: u64) -> Self {
        Segment { page: u128::from(page), mapped: 0, blocks: BTreeMap::new(), free: BTreeSet::new() }
    }

    /// The free block at the mapped end, as (offset, size).
    fn free_tail(&self) -> Option<(u128, u128)> {
        self.blocks.last_key_value().filter(|(_, b)| b.free).map(|(&offset, b)| (offset, b.size))
    }

    /// The free block a request of `size` bytes takes, as (offset, size): the smallest that holds it (the
    /// lowest address among equals), the free tail only where no other one does.
    fn best_fit(&self, size: u128) -> Option<(u128, u128)> {
        let tail = self.free_tail().map(|(offset, _)| offset);
        let mut fitting = self.free.range((size, 0)..).map(|&(s, o)| (o, s));
        match fitting.next() {
            Some(first) if Some(first.0) == tail => fitting.next().or(Some(first)),
            other => other,
        }
    }

    /// A block of `size` bytes (rounded already): its offset, and the bytes newly mapped for it.
    fn allocate(&mut self, size: u128) -> (u128, u128) {
        let (offset, block_size, grown) = match self.best_fit(size) {
            Some((offset, block_size)) => (offset, block_size, 0),
            None => {
                // The pages the free tail (or an empty segment) lacks, joined to it.
                let (offset, have) = self.free_tail().unwrap_or((self.mapped, 0));
                let grow = (size - have).div_ceil(self.page) * self.page;
                if have > 0 {
                    self.free.remove(&(have, offset));
                }
                self.mapped += grow;
                (offset, have + grow, grow)
            }
        };
        self.free.remove(&(block_size, offset));
        let remaining = block_size - size;
        if remaining >= MIN_BLOCK {
            self.blocks.insert(offset, Block { size, free: false });
            self.blocks.insert(offset + size, Block { size: remaining, free: true });
            self.free.insert((remaining, offset + size));
        } else {
            self.blocks.insert(offset, Block { size: block_size, free: false });
        }
        (offset, grown)
    }

    /// Frees the block at `offset`, merged with its free neighbours.
    fn free(&mut self, offset: u128) {
        let mut start = offset;
        let mut size = self.blocks[&offset].size;
        if let Some((&next, &Block { size: next_size, free: true })) = self.blocks.range(offset + size..).next()
            && next == offset + size
        {
            self.free.remove(&(next_size, next));
            size += next_size;
            self.blocks.remove(&next);
        }
        if let Some((&prev, &Block { size: prev_size, free: true })) = self.blocks.range(..offset).next_back() {
            self.free.remove(&(prev_size, prev));
            self.blocks.remove(&offset);
            start = prev;
            size += prev_size;
        }
        self.blocks.insert(start, Block { size, free: true });
        self.free.insert((size, start));
    }
}

/// PyTorch's size for a request of `size` bytes (`round_size`).
fn round_size(size: u64) -> u128 {
    u128::from(size.max(1)).div_ceil(MIN_BLOCK) * MIN_BLOCK
}

/// Bytes as a figure, saturated at `u64::MAX`.
fn figure(bytes: u128) -> u64 {
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

/// Replays `plan` through the model of PyTorch's allocator with expandable segments; the maps are priced
/// by `cost` (one creation and map per page, one access call per map).
pub fn expandable_segments(plan: &ReplayPlan, cost: &CostModel) -> ExpandableFigures {
    // Segments by (stream, small pool).
    let mut segments: FxHashMap<(u64, bool), Segment> = FxHashMap::default();
    // Where each live slot's block is: its segment's key, offset and requested bytes.
    let mut placed: FxHashMap<u32, ((u64, bool), u128, u64)> = FxHashMap::default();
    let mut figures = ExpandableFigures::default();
    let (mut live, mut reserved) = (0u128, 0u128);
    for op in plan.initial.iter().chain(&plan.operations) {
        match *op {
            Operation::Alloc { slot, size, stream } => {
                let rounded = round_size(size);
                let small = rounded <= SMALL_SIZE;
                let key = (stream, small);
                let page = if small { SMALL_PAGE } else { LARGE_PAGE };
                let segment = segments.entry(key).or_insert_with(|| Segment::new(page));
                let (offset, grown) = segment.allocate(rounded);
                if grown > 0 {
                    reserved += grown;
                    figures.maps += 1;
                    let pages = figure(grown / u128::from(page));
                    figures.driver_ns = figures.driver_ns.saturating_add(cost.map(pages, page));
                    figures.peak_reserved_bytes = figures.peak_reserved_bytes.max(figure(reserved));
                }
                live += u128::from(size);
                figures.peak_live_bytes = figures.peak_live_bytes.max(figure(live));
                placed.insert(slot, (key, offset, size));
            }
            Operation::Free { slot } => {
                if let Some((key, offset, size)) = placed.remove(&slot) {
                    live -= u128::from(size);
                    if let Some(segment) = segments.get_mut(&key) {
                        segment.free(offset);
                    }
                }
            }
        }
    }
    figures
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn plan(operations: Vec<Operation>) -> ReplayPlan {
        let slots = operations.iter().filter(|op| matches!(op, Operation::Alloc { .. })).count() as u32;
        ReplayPlan { operations, slots, ..ReplayPlan::default() }
    }

    fn alloc(slot: u32, size: u64, stream: u64) -> Operation {
        Operation::Alloc { slot, size, stream }
    }

    fn free(slot: u32) -> Operation {
        Operation::Free { slot }
    }

    fn figures(operations: Vec<Operation>) -> ExpandableFigures {
        expandable_segments(&plan(operations), &CostModel::default())
    }

    #[test]
    fn sizes_round_to_512_bytes_and_pools_split_at_one_mib() {
        assert_eq!(round_size(0), 512);
        assert_eq!(round_size(1), 512);
        assert_eq!(round_size(513), 1024);
        assert_eq!(round_size(MIB), u128::from(MIB));
        // A 1 MiB request maps a small page (2 MiB), a byte more a large one (20 MiB).
        assert_eq!(figures(vec![alloc(0, MIB, 0)]).peak_reserved_bytes, 2 * MIB);
        assert_eq!(figures(vec![alloc(0, MIB + 1, 0)]).peak_reserved_bytes, 20 * MIB);
    }

    #[test]
    fn a_segment_maps_what_its_free_tail_lacks_in_whole_pages() {
        // 15 MiB, then 10 MiB: the first leaves 5 MiB free at the end, the second maps 5 MiB more as a page
        // of 20.
        let f = figures(vec![alloc(0, 15 * MIB, 0), alloc(1, 10 * MIB, 0)]);
        assert_eq!((f.peak_reserved_bytes, f.maps), (40 * MIB, 2));
        assert_eq!(f.peak_live_bytes, 25 * MIB);
        // Freed and asked again, the memory is reused: nothing more is mapped.
        let f = figures(vec![alloc(0, 15 * MIB, 0), free(0), alloc(1, 15 * MIB, 0), free(1), alloc(2, 20 * MIB, 0)]);
        assert_eq!((f.peak_reserved_bytes, f.maps), (20 * MIB, 1));
    }

    #[test]
    fn a_free_block_is_taken_before_the_tail_even_where_the_tail_fits_better() {
        // 6, 2 and 7 MiB in one 20 MiB page leave a 5 MiB tail; the 6 MiB block is freed. A 5 MiB request
        // takes the 6 MiB hole rather than the 5 MiB tail (PyTorch counts the tail as large as the unmapped
        // range behind it), so a 6 MiB request then maps another page.
        let f = figures(vec![
            alloc(0, 6 * MIB, 0),
            alloc(1, 2 * MIB, 0),
            alloc(2, 7 * MIB, 0),
            free(0),
            alloc(3, 5 * MIB, 0),
            alloc(4, 6 * MIB, 0),
        ]);
        assert_eq!((f.peak_reserved_bytes, f.maps), (40 * MIB, 2), "{f:?}");
        // Among free blocks the smallest that fits: a 3 MiB request takes the 4 MiB hole, not the 6 MiB one.
        let f = figures(vec![
            alloc(0, 4 * MIB, 0),
            alloc(1, MIB + 1, 0),
            alloc(2, 6 * MIB, 0),
            alloc(3, 9 * MIB - 512, 0),
            free(0),
            free(2),
            alloc(4, 3 * MIB, 0),
            alloc(5, 6 * MIB, 0),
        ]);
        assert_eq!((f.peak_reserved_bytes, f.maps), (20 * MIB, 1), "{f:?}");
        // A freed block merges with the free tail: 6 MiB freed before a 2 MiB tail hold a 7 MiB request.
        let f = figures(vec![alloc(0, 12 * MIB, 0), alloc(1, 6 * MIB, 0), free(1), alloc(2, 7 * MIB, 0)]);
        assert_eq!(f.peak_reserved_bytes, 20 * MIB);
    }

    #[test]
    fn streams_and_pools_keep_segments_of_their_own() {
        let f = figures(vec![alloc(0, 4 * MIB, 1), free(0), alloc(1, 4 * MIB, 2), alloc(2, 4096, 1)]);
        assert_eq!((f.peak_reserved_bytes, f.maps), (42 * MIB, 3), "stream 2 does not reuse stream 1's block");
        // Neighbours merge: two 6 MiB blocks freed out of order leave one 12 MiB block for a 12 MiB request.
        let f = figures(vec![
            alloc(0, 6 * MIB, 0),
            alloc(1, 6 * MIB, 0),
            alloc(2, 8 * MIB, 0),
            free(1),
            free(0),
            alloc(3, 12 * MIB, 0),
        ]);
        assert_eq!(f.peak_reserved_bytes, 20 * MIB);
        assert!(f.driver_ns > 0);
        assert_eq!(f.utilization(), Some(20.0 / 20.0));
    }
}
