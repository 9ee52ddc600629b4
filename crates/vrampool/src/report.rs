//! The detailed report of a pool: every segment and every live block, for leak hunting, as JSON.

use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};

use crate::counters::PoolStats;
use crate::pool::Pool;
use crate::stream::StreamId;

/// What a stretch of the pool's memory is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SegmentKind {
    /// A fixed pool's one reservation, cut into blocks.
    Reservation,
    /// A segment a dynamic pool sub-allocates from.
    Segment,
    /// A segment that serves a single fallback allocation.
    Fallback,
    /// A reserved virtual address range, mapped where used.
    VirtualRange,
}

/// One size class of a hybrid pool's core.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeClassReport {
    /// Bytes per block.
    pub block_size: u64,
    /// The most blocks the class holds.
    pub block_count: u64,
    /// Blocks live now.
    pub live_blocks: u64,
}

/// One stretch of memory the pool holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentReport {
    /// What it is.
    pub kind: SegmentKind,
    /// Its first address.
    pub addr: u64,
    /// Its size in bytes (for a virtual range: the address space reserved).
    pub size: u64,
    /// Bytes of device memory behind it (for a virtual range: the mapped chunks).
    pub reserved_bytes: u64,
}

/// One live allocation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockReport {
    /// Its address.
    pub addr: u64,
    /// The bytes requested.
    pub size: u64,
    /// The bytes the block takes in the pool (the request rounded up).
    pub block_size: u64,
    /// The stream it was allocated on.
    pub stream: StreamId,
    /// Whether it was served by a fallback.
    pub fallback: bool,
}

/// Everything a pool holds, block by block: every segment and live block, or, for a report with a limit
/// ([`Pool::report_within`]), those at the lowest addresses and a count of the others.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolReport {
    /// The strategy (`fixed`, `dynamic`, `hybrid`).
    pub strategy: String,
    /// The backend's name.
    pub backend: String,
    /// The pool's counters.
    pub stats: PoolStats,
    /// The stretches of memory held, in address order.
    pub segments: Vec<SegmentReport>,
    /// Stretches of memory held that the report's limit left out of `segments` (the highest addresses).
    #[serde(default)]
    pub segments_left_out: u64,
    /// The live allocations, in address order.
    pub blocks: Vec<BlockReport>,
    /// Live allocations that the report's limit left out of `blocks` (the highest addresses).
    #[serde(default)]
    pub blocks_left_out: u64,
    /// The size classes of a hybrid pool's core (empty for other strategies).
    pub classes: Vec<SizeClassReport>,
}

/// The most segments and the most live blocks a report lists ([`Pool::report_within`]): those at the
/// lowest addresses; the others are counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportLimit {
    /// The most segments listed.
    pub segments: usize,
    /// The most live blocks listed.
    pub blocks: usize,
}

impl ReportLimit {
    /// No limit: every segment and live block.
    pub const ALL: ReportLimit = ReportLimit { segments: usize::MAX, blocks: usize::MAX };
}

/// An item kept by its address, compared by the address alone.
#[derive(Debug)]
struct ByAddr<T>(u64, T);

impl<T> PartialEq for ByAddr<T> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl<T> Eq for ByAddr<T> {}

impl<T> PartialOrd for ByAddr<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for ByAddr<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

/// What a report lists of a pool's segments or blocks: the items at the lowest addresses, at most a limit
/// of them, and a count of the others. Its memory grows with the items kept, never past the limit, however
/// many are offered; O(log kept) per item.
#[derive(Debug)]
pub(crate) struct Listing<T> {
    limit: usize,
    /// The items kept, the highest address on top.
    kept: BinaryHeap<ByAddr<T>>,
    left_out: u64,
}

impl<T> Listing<T> {
    /// An empty listing of at most `limit` items.
    pub(crate) fn new(limit: usize) -> Self {
        Listing { limit, kept: BinaryHeap::new(), left_out: 0 }
    }

    /// Offers `item`, at `addr`: kept while there is room or where it lies below the highest item kept
    /// (which is then left out), else left out.
    pub(crate) fn offer(&mut self, addr: u64, item: T) {
        if self.kept.len() < self.limit {
            self.kept.push(ByAddr(addr, item));
            return;
        }
        self.left_out += 1;
        if let Some(mut highest) = self.kept.peek_mut()
            && addr < highest.0
        {
            *highest = ByAddr(addr, item);
        }
    }

    /// The items kept, in address order, and how many were left out.
    fn finish(self) -> (Vec<T>, u64) {
        (self.kept.into_sorted_vec().into_iter().map(|ByAddr(_, item)| item).collect(), self.left_out)
    }
}

impl Listing<SegmentReport> {
    /// Offers a segment.
    pub(crate) fn segment(&mut self, segment: SegmentReport) {
        self.offer(segment.addr, segment);
    }
}

impl Listing<BlockReport> {
    /// Offers a block.
    pub(crate) fn block(&mut self, block: BlockReport) {
        self.offer(block.addr, block);
    }
}

impl PoolReport {
    /// The report of `pool` (its strategy, backend name and stats read now) holding `segments` and
    /// `blocks`, each put in address order, and no size classes. O(n log n) in the segments and blocks.
    pub fn new(pool: &(impl Pool + ?Sized), mut segments: Vec<SegmentReport>, mut blocks: Vec<BlockReport>) -> Self {
        segments.sort_by_key(|s| s.addr);
        blocks.sort_by_key(|b| b.addr);
        PoolReport {
            strategy: pool.strategy().into(),
            backend: pool.backend().name(),
            stats: pool.stats(),
            segments,
            segments_left_out: 0,
            blocks,
            blocks_left_out: 0,
            classes: Vec::new(),
        }
    }

    /// The report of `pool` listing what `segments` and `blocks` kept, with the counts of what they left
    /// out, and no size classes.
    pub(crate) fn listed(
        pool: &(impl Pool + ?Sized),
        segments: Listing<SegmentReport>,
        blocks: Listing<BlockReport>,
    ) -> Self {
        let (segments, segments_left_out) = segments.finish();
        let (blocks, blocks_left_out) = blocks.finish();
        PoolReport {
            strategy: pool.strategy().into(),
            backend: pool.backend().name(),
            stats: pool.stats(),
            segments,
            segments_left_out,
            blocks,
            blocks_left_out,
            classes: Vec::new(),
        }
    }

    /// The report as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report holds only numbers and strings")
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{DynamicConfig, DynamicPool, SimDevice};

    #[test]
    fn a_new_report_names_the_pool_and_puts_its_parts_in_address_order() {
        let pool = DynamicPool::new(Arc::new(SimDevice::default()), DynamicConfig::default()).unwrap();
        let segment = |addr| SegmentReport { kind: SegmentKind::Segment, addr, size: 1, reserved_bytes: 1 };
        let block = |addr| BlockReport { addr, size: 1, block_size: 256, stream: StreamId::DEFAULT, fallback: false };
        let report = PoolReport::new(&pool, vec![segment(9), segment(3)], vec![block(7), block(1), block(4)]);
        assert_eq!((report.strategy.as_str(), report.backend.as_str()), ("dynamic", "sim"));
        assert_eq!(report.stats, pool.stats());
        assert_eq!(report.segments.iter().map(|s| s.addr).collect::<Vec<_>>(), [3, 9]);
        assert_eq!(report.blocks.iter().map(|b| b.addr).collect::<Vec<_>>(), [1, 4, 7]);
        assert!(report.classes.is_empty());
        assert_eq!((report.segments_left_out, report.blocks_left_out), (0, 0));
    }

    #[test]
    fn a_listing_keeps_the_lowest_addresses_up_to_its_limit_and_counts_the_rest() {
        for limit in [0, 1, 3, 7, 100, usize::MAX] {
            let mut listing = Listing::new(limit);
            let addrs: Vec<u64> = (0..50u64).map(|i| (i * 7919) % 50 * 256).collect();
            for &addr in &addrs {
                listing.offer(addr, addr);
            }
            let (kept, left_out) = listing.finish();
            let expected: Vec<u64> = (0..50u64.min(limit as u64)).map(|i| i * 256).collect();
            assert_eq!(kept, expected, "limit {limit}");
            assert_eq!(left_out, 50 - expected.len() as u64, "limit {limit}");
        }
    }
}
