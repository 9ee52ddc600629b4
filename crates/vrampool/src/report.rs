//! The detailed report of a pool: every segment and every live block, for leak hunting, as JSON.

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

/// Everything a pool holds, block by block.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolReport {
    /// The strategy (`fixed`, `dynamic`, `hybrid`).
    pub strategy: String,
    /// The backend's name.
    pub backend: String,
    /// The pool's counters.
    pub stats: PoolStats,
    /// Every stretch of memory held, in address order.
    pub segments: Vec<SegmentReport>,
    /// Every live allocation, in address order.
    pub blocks: Vec<BlockReport>,
    /// The size classes of a hybrid pool's core (empty for other strategies).
    pub classes: Vec<SizeClassReport>,
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
            blocks,
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
    }
}
