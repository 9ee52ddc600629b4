//! A short description of a trace: how many events and allocations, and how their sizes are spread.

use serde::{Deserialize, Serialize};

use crate::event::EventKind;
use crate::trace::Trace;

/// Counts and allocation-size figures of a trace, for planning a pool and for reports.
///
/// Percentiles are nearest-rank: the p-th percentile is the smallest size that at least p% of the
/// allocations do not exceed. Sizes are requested sizes; all size figures are 0 for a trace without
/// allocations.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceSummary {
    /// Events in the trace.
    pub events: usize,
    /// Allocations ([`EventKind::Alloc`] events).
    pub allocations: usize,
    /// Frees that make a block reusable ([`EventKind::Free`] events).
    pub frees: usize,
    /// Distinct allocation sizes.
    pub distinct_sizes: usize,
    /// Median allocation size.
    pub size_p50: u64,
    /// 90th-percentile allocation size.
    pub size_p90: u64,
    /// 99th-percentile allocation size.
    pub size_p99: u64,
    /// Largest allocation size.
    pub size_max: u64,
    /// Sum of all allocation sizes.
    pub allocated_bytes: u128,
    /// Distinct streams the events are on.
    pub streams: usize,
    /// Blocks live from the start.
    pub initial_live_blocks: usize,
    /// Segment events (alloc, free, map, unmap).
    pub segment_events: usize,
    /// Out-of-memory reports and failed allocations.
    pub failures: usize,
}

impl TraceSummary {
    /// The summary of `trace`. Sorts the allocation sizes: O(n log n) in the allocations.
    pub fn of(trace: &Trace) -> Self {
        let mut sizes = Vec::new();
        let mut streams = Vec::new();
        let mut summary = TraceSummary {
            events: trace.events.len(),
            initial_live_blocks: trace.initial_live.len(),
            ..TraceSummary::default()
        };
        for event in &trace.events {
            match event.kind {
                EventKind::Alloc => sizes.push(event.size),
                EventKind::Free => summary.frees += 1,
                EventKind::SegmentAlloc | EventKind::SegmentFree | EventKind::SegmentMap | EventKind::SegmentUnmap => {
                    summary.segment_events += 1
                }
                EventKind::Oom | EventKind::AllocFailure => summary.failures += 1,
                EventKind::FreeRequested => {}
            }
            if streams.last() != Some(&event.stream) {
                streams.push(event.stream);
            }
        }
        streams.sort_unstable();
        streams.dedup();
        summary.streams = streams.len();
        summary.allocations = sizes.len();
        summary.allocated_bytes = sizes.iter().map(|&size| u128::from(size)).sum();
        sizes.sort_unstable();
        summary.size_p50 = nearest_rank(&sizes, 50);
        summary.size_p90 = nearest_rank(&sizes, 90);
        summary.size_p99 = nearest_rank(&sizes, 99);
        summary.size_max = sizes.last().copied().unwrap_or(0);
        sizes.dedup();
        summary.distinct_sizes = sizes.len();
        summary
    }
}

/// The nearest-rank `percent`-th percentile of `sorted` (0 when empty).
fn nearest_rank(sorted: &[u64], percent: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (sorted.len() * percent).div_ceil(100).max(1);
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let sorted: Vec<u64> = (1..=10).collect();
        assert_eq!(nearest_rank(&sorted, 50), 5);
        assert_eq!(nearest_rank(&sorted, 90), 9);
        assert_eq!(nearest_rank(&sorted, 91), 10);
        assert_eq!(nearest_rank(&sorted, 100), 10);
        assert_eq!(nearest_rank(&[7], 1), 7);
        assert_eq!(nearest_rank(&[], 50), 0);
    }
}
