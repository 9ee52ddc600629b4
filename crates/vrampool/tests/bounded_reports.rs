//! A report with a limit lists the segments and live blocks at the lowest addresses, as the full report
//! lists them, and counts the others, on every pool shape.

mod common;

use common::{Device, Shape};
use vrampool::{KIB, MIB, ReportLimit, StreamId};

#[test]
fn a_limited_report_lists_the_lowest_addresses_and_counts_the_rest() {
    for shape in Shape::ALL {
        let device = Device::sim(shape.granularity());
        let pool = shape.build(&device);
        // Small blocks for the classes and the slab, large ones for the region and the fallbacks.
        let sizes = [4 * KIB, 64 * KIB, 3 * MIB, 4 * KIB, MIB, 100 * KIB, 2 * MIB + 1];
        let blocks: Vec<u64> = (0..40)
            .filter_map(|i| pool.allocate(sizes[i % sizes.len()], 256, StreamId(i as u64 % 2)).ok())
            .map(|block| block.addr)
            .collect();
        assert!(blocks.len() >= 16, "{shape:?}: {} blocks", blocks.len());
        let full = pool.report();
        assert_eq!(full, pool.report_within(ReportLimit::ALL), "{shape:?}");
        assert_eq!((full.segments_left_out, full.blocks_left_out), (0, 0), "{shape:?}");
        assert_eq!(full.blocks.len(), blocks.len(), "{shape:?}");
        for (segments, listed) in [(0, 0), (1, 1), (2, 5), (1000, 1000)] {
            let report = pool.report_within(ReportLimit { segments, blocks: listed });
            let kept = full.blocks.len().min(listed);
            assert_eq!(report.blocks, full.blocks[..kept], "{shape:?}: {listed} blocks");
            assert_eq!(report.blocks_left_out, (full.blocks.len() - kept) as u64, "{shape:?}");
            let kept = full.segments.len().min(segments);
            assert_eq!(report.segments, full.segments[..kept], "{shape:?}: {segments} segments");
            assert_eq!(report.segments_left_out, (full.segments.len() - kept) as u64, "{shape:?}");
            assert_eq!((&report.classes, &report.stats), (&full.classes, &full.stats), "{shape:?}");
        }
        for addr in blocks {
            pool.free(addr).unwrap();
        }
    }
}
