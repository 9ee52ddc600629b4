//! The fixed pool's behaviours, one test each, the seed's bugs among them.

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use common::snapshot;
use vrampool::{
    Error, Fallback, FixedConfig, FixedPool, GIB, HostMemory, HostMemoryConfig, KIB, MIB, Pool, PoolExt, SegmentKind,
    SimDevice, SimDeviceConfig, StreamId,
};

fn sim() -> Arc<SimDevice> {
    Arc::new(SimDevice::default())
}

#[test]
fn defaults_make_one_reservation_of_the_seeds_size() {
    let device = sim();
    let pool = FixedPool::new(device.clone(), FixedConfig::default()).unwrap();
    let counters = device.counters();
    assert_eq!(counters.segments_allocated, 1, "one reservation at construction");
    assert_eq!(counters.used_bytes, 4 * MIB * 2048);
    let stats = pool.stats();
    assert_eq!(stats.reserved_bytes.current, 8 * GIB);
    assert_eq!(stats.backend_calls, 1);
    for _ in 0..100 {
        let a = pool.alloc(MIB).unwrap();
        pool.free(a.addr).unwrap();
    }
    assert_eq!(device.counters().segments_allocated, 1, "no device call after construction");
}

/// The seed computed the index as `ptr - base / block_size`; the index is `(ptr - base) / block_size`.
/// With a base far from zero and a block size that is not a power of two, the wrong formula lands far
/// outside the pool.
#[test]
fn block_index_is_the_offset_over_the_block_size() {
    let device = sim();
    let block = 768 * KIB;
    let pool = FixedPool::new(device, FixedConfig::default().block_size(block).block_count(64)).unwrap();
    let first: Vec<u64> = (0..64).map(|_| pool.alloc(block).unwrap().addr).collect();
    let base = *first.iter().min().unwrap();
    assert!(base > 1 << 40, "the simulated base is far from zero");
    let mut expected: Vec<u64> = (0..64).map(|i| base + i * block).collect();
    let mut got = first.clone();
    got.sort();
    expected.sort();
    assert_eq!(got, expected, "blocks are base + i * block_size");
    // Free in a scrambled order, then take every block again: each comes back exactly once.
    for i in (0..64).map(|i| (i * 37) % 64) {
        pool.free(first[i]).unwrap();
    }
    let again: HashSet<u64> = (0..64).map(|_| pool.alloc(1).unwrap().addr).collect();
    assert_eq!(again, first.iter().copied().collect::<HashSet<_>>());
    assert_eq!(pool.stats().fallbacks, 0);
}

#[test]
fn a_second_free_is_an_error_and_changes_nothing() {
    let pool = FixedPool::new(sim(), FixedConfig::default().block_size(MIB).block_count(4)).unwrap();
    let a = pool.alloc(1000).unwrap();
    let b = pool.alloc(1000).unwrap();
    pool.free(a.addr).unwrap();
    let before = snapshot(&pool);
    assert_eq!(pool.free(a.addr), Err(Error::NotLive { addr: a.addr }));
    assert_eq!(snapshot(&pool), before);
    // The free list is intact: exactly the four blocks come out, no duplicate.
    let rest: HashSet<u64> = (0..3).map(|_| pool.alloc(1).unwrap().addr).collect();
    assert_eq!(rest.len(), 3);
    assert!(!rest.contains(&b.addr));
    assert_eq!(pool.stats().fallbacks, 0);
}

#[test]
fn foreign_and_interior_addresses_are_errors() {
    let pool = FixedPool::new(sim(), FixedConfig::default().block_size(MIB).block_count(4)).unwrap();
    let a = pool.alloc(1000).unwrap();
    let before = snapshot(&pool);
    assert_eq!(pool.free(12345), Err(Error::ForeignAddress { addr: 12345 }));
    assert_eq!(pool.free(a.addr + 256), Err(Error::InteriorAddress { addr: a.addr + 256, block: a.addr }));
    assert_eq!(pool.free(a.addr + 4 * MIB), Err(Error::ForeignAddress { addr: a.addr + 4 * MIB }));
    assert_eq!(pool.free(u64::MAX), Err(Error::ForeignAddress { addr: u64::MAX }));
    assert_eq!(snapshot(&pool), before);
    pool.free(a.addr).unwrap();
}

#[test]
fn bad_requests_are_errors_and_change_nothing() {
    let pool = FixedPool::new(sim(), FixedConfig::default().block_size(MIB).block_count(4)).unwrap();
    let before = snapshot(&pool);
    assert_eq!(pool.allocate(0, 256, StreamId::DEFAULT), Err(Error::ZeroSize));
    assert_eq!(pool.allocate(10, 100, StreamId::DEFAULT), Err(Error::AlignmentNotPowerOfTwo { alignment: 100 }));
    let err = pool.allocate(u64::MAX, 256, StreamId::DEFAULT).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory { requested: u64::MAX, .. }), "{err}");
    assert_eq!(snapshot(&pool), before);
    assert_eq!(pool.stats().ooms, 1);
}

#[test]
fn reject_names_the_block_size_that_would_fit() {
    let pool = FixedPool::new(sim(), FixedConfig::default().block_size(MIB).block_count(4).fallback(Fallback::Reject))
        .unwrap();
    let err = pool.alloc(MIB + 1).unwrap_err();
    assert_eq!(err, Error::BlockTooSmall { requested: MIB + 1, block_size: MIB, fitting_block_size: MIB + 256 });
    assert!(err.to_string().contains("a block size of 1048832 bytes would fit"), "{err}");
    // Exhaustion is out of memory, naming the numbers.
    let held: Vec<_> = (0..4).map(|_| pool.alloc(100).unwrap()).collect();
    let err = pool.alloc(100).unwrap_err();
    assert_eq!(err, Error::OutOfMemory { requested: 100, live: 400, reserved: 4 * MIB, cap: 4 * MIB });
    assert!(err.to_string().contains("requested 100 bytes with 400 bytes live and 4194304 bytes reserved"));
    for a in held {
        pool.free(a.addr).unwrap();
    }
}

/// The seed's pool went "on strike" when a model grew; oversize requests take a counted fallback.
#[test]
fn oversize_and_exhausted_requests_fall_back_to_device_segments() {
    let device = sim();
    let pool = FixedPool::new(device.clone(), FixedConfig::default().block_size(MIB).block_count(2)).unwrap();
    let big = pool.alloc(3 * MIB).unwrap();
    let held: Vec<_> = (0..2).map(|_| pool.alloc(MIB).unwrap()).collect();
    let extra = pool.alloc(MIB).unwrap();
    let stats = pool.stats();
    assert_eq!(stats.fallbacks, 2);
    assert_eq!(stats.fallback_reasons.get("oversize"), Some(&1));
    assert_eq!(stats.fallback_reasons.get("exhausted"), Some(&1));
    // Segments come in whole units of the device's 2 MiB segment unit: 3 MiB takes 4, 1 MiB takes 2.
    assert_eq!(stats.reserved_bytes.current, 2 * MIB + 4 * MIB + 2 * MIB);
    assert_eq!(device.used_bytes(), stats.reserved_bytes.current);
    let report = pool.report();
    assert_eq!(report.segments.iter().filter(|s| s.kind == SegmentKind::Fallback).count(), 2);
    assert_eq!(report.blocks.iter().filter(|b| b.fallback).count(), 2);
    pool.free(big.addr).unwrap();
    pool.free(extra.addr).unwrap();
    assert_eq!(device.used_bytes(), 2 * MIB, "fallback segments go back at free");
    assert_eq!(pool.free(big.addr), Err(Error::ForeignAddress { addr: big.addr }));
    for a in held {
        pool.free(a.addr).unwrap();
    }
    assert_eq!(pool.stats().allocated_bytes.current, 0);
}

/// `cuMemAlloc` takes whole 2 MiB pages: the pool asks for whole segment units, so what it counts as
/// reserved is what the device holds, and a replay on the simulated device predicts the driver's figure.
#[test]
fn segments_are_whole_units_of_the_device_and_counted_as_such() {
    for (unit, reservation, fallback) in [(2 * MIB, 4 * MIB, 6 * MIB), (1, 3 * MIB, 5 * MIB + 1024)] {
        let device = Arc::new(SimDevice::new(SimDeviceConfig::default().segment_unit(unit)));
        let pool = FixedPool::new(device.clone(), FixedConfig::default().block_size(MIB).block_count(3)).unwrap();
        assert_eq!(pool.stats().reserved_bytes.current, reservation, "unit {unit}");
        let big = pool.alloc(5 * MIB + 1000).unwrap();
        let stats = pool.stats();
        assert_eq!(stats.reserved_bytes.current, reservation + fallback, "unit {unit}");
        assert_eq!(device.used_bytes(), stats.reserved_bytes.current);
        assert_eq!(pool.report().segments.iter().map(|s| s.size).sum::<u64>(), reservation + fallback);
        pool.free(big.addr).unwrap();
        assert_eq!(device.used_bytes(), reservation, "unit {unit}");
        assert_eq!(pool.stats().reserved_bytes.current, reservation);
    }
}

#[test]
fn alignment_beyond_the_blocks_goes_to_the_fallback() {
    // Blocks of 768 KiB are 256 KiB aligned at best.
    let pool = FixedPool::new(sim(), FixedConfig::default().block_size(768 * KIB).block_count(4)).unwrap();
    assert_eq!(pool.block_alignment(), 256 * KIB);
    let a = pool.allocate(1000, 256 * KIB, StreamId::DEFAULT).unwrap();
    assert_eq!(pool.stats().fallbacks, 0);
    let b = pool.allocate(1000, MIB, StreamId::DEFAULT).unwrap();
    assert_eq!(b.addr % MIB, 0);
    assert_eq!(pool.stats().fallback_reasons.get("alignment"), Some(&1));
    pool.free(a.addr).unwrap();
    pool.free(b.addr).unwrap();
}

#[test]
fn a_configuration_larger_than_the_device_is_refused() {
    let device = Arc::new(SimDevice::new(SimDeviceConfig::default().capacity(GIB)));
    let err = FixedPool::new(device.clone(), FixedConfig::default()).unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { field: "block_count", .. }), "{err}");
    assert_eq!(device.counters().segments_allocated, 0);
}

#[test]
fn buffers_free_on_drop_and_report_lists_live_blocks() {
    let host = Arc::new(HostMemory::new(HostMemoryConfig::default().capacity(64 * MIB)));
    let pool = FixedPool::new(host.clone(), FixedConfig::default().block_size(MIB).block_count(8)).unwrap();
    {
        let buffer = pool.buffer(4000).unwrap();
        host.fill(buffer.addr(), buffer.size(), 7).unwrap();
        let report = pool.report();
        assert_eq!(report.blocks.len(), 1);
        assert_eq!((report.blocks[0].addr, report.blocks[0].size), (buffer.addr(), 4000));
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["strategy"], "fixed");
        assert_eq!(json["blocks"][0]["size"], 4000);
        assert_eq!(json["segments"][0]["kind"], "reservation");
        assert_eq!(json["stats"]["allocated_bytes"]["current"], 4000);
    }
    assert_eq!(pool.stats().allocated_bytes.current, 0);
    assert_eq!(pool.stats().frees, 1);
    drop(pool);
    assert_eq!(host.used_bytes(), 0);
}

#[test]
fn stats_follow_pytorch_vocabulary() {
    let pool = FixedPool::new(sim(), FixedConfig::default().block_size(MIB).block_count(8)).unwrap();
    let a = pool.alloc(1000).unwrap();
    let b = pool.alloc(3000).unwrap();
    pool.free(a.addr).unwrap();
    let s = pool.stats();
    assert_eq!((s.allocated_bytes.current, s.allocated_bytes.peak), (3000, 4000));
    assert_eq!((s.allocations, s.frees, s.active_allocations), (2, 1, 1));
    assert_eq!((s.reserved_bytes.current, s.reserved_bytes.peak), (8 * MIB, 8 * MIB));
    assert!((s.utilization() - 4000.0 / (8 * MIB) as f64).abs() < 1e-12);
    pool.free(b.addr).unwrap();
}

/// A thread per stream: a block one thread frees for another thread's stream goes back to that thread,
/// which reuses it on its stream with no event, while the freeing thread reuses its own.
#[test]
fn a_block_freed_by_another_thread_returns_to_its_streams_thread_without_an_event() {
    let config = FixedConfig::default().block_size(4096).block_count(8);
    common::blocks_freed_for_another_threads_stream_return_to_it(Arc::new(FixedPool::new(sim(), config).unwrap()));
}
