//! The dynamic pool's behaviours, one test each, the seed's bugs among them.

mod common;

use std::sync::Arc;

use common::snapshot;
use vrampool::{
    Allocation, Backend, Cap, DynamicConfig, DynamicPool, Error, GIB, HostMemory, HostMemoryConfig, KIB, MIB, Pool,
    PoolExt, SegmentKind, SimDevice, SimDeviceConfig, StreamId, VirtualMemory,
};

fn segments_config(initial: u64, cap: u64) -> DynamicConfig {
    DynamicConfig::default().initial_size(initial).cap(Cap::Bytes(cap)).virtual_memory(VirtualMemory::Off)
}

fn host(granularity: Option<u64>) -> Arc<HostMemory> {
    Arc::new(HostMemory::new(HostMemoryConfig::default().capacity(256 * MIB).granularity(granularity)))
}

fn segment_sizes(pool: &DynamicPool) -> Vec<u64> {
    pool.report().segments.iter().map(|s| s.size).collect()
}

#[test]
fn defaults_are_the_seeds() {
    let device = Arc::new(SimDevice::default());
    let pool = DynamicPool::new(device.clone(), DynamicConfig::default()).unwrap();
    let policy = pool.growth_policy();
    assert_eq!((policy.initial_size, policy.factor), (256 * MIB, 1.5));
    assert_eq!(policy.cap, (141_000_000_000f64 * 0.8) as u64);
    assert!(pool.uses_virtual_memory());
    assert_eq!(pool.stats().reserved_bytes.current, 256 * MIB);
    assert_eq!(device.used_bytes(), 256 * MIB);
}

/// The seed's grow() lost the old memory; growth must keep every byte and every address.
#[test]
fn growth_keeps_existing_memory() {
    for granularity in [None, Some(64 * KIB)] {
        let device = host(granularity);
        let config = DynamicConfig::default().initial_size(MIB).cap(Cap::Bytes(64 * MIB));
        let pool = DynamicPool::new(device.clone(), config).unwrap();
        let first = pool.alloc(MIB - 256).unwrap();
        device.fill(first.addr, first.size, 0xAB).unwrap();
        let mut later = Vec::new();
        for _ in 0..10 {
            let a = pool.alloc(3 * MIB).unwrap();
            device.fill(a.addr, a.size, a.addr).unwrap();
            later.push(a);
        }
        assert!(pool.stats().growths >= 2, "{:?}", pool.stats());
        device.check(first.addr, first.size, 0xAB).unwrap();
        for a in &later {
            device.check(a.addr, a.size, a.addr).unwrap();
        }
        if granularity.is_some() {
            let report = pool.report();
            assert_eq!(report.segments.len(), 1, "grows in place in one range");
            assert_eq!(report.segments[0].kind, SegmentKind::VirtualRange);
        }
    }
}

#[test]
fn growth_multiplies_by_the_factor_until_the_request_fits() {
    let device = Arc::new(SimDevice::default());
    let pool = DynamicPool::new(device, segments_config(4 * MIB, 64 * MIB)).unwrap();
    let _a = pool.alloc(4 * MIB).unwrap();
    // 4 -> 6 (+2) is too little for 5 MiB, 4 -> 9 (+5) holds it; in 2 MiB units: a 6 MiB segment.
    let _b = pool.alloc(5 * MIB).unwrap();
    assert_eq!(segment_sizes(&pool), vec![4 * MIB, 6 * MIB]);
    assert_eq!(pool.stats().growths, 1);
}

#[test]
fn growth_clamps_to_the_cap_when_the_request_fits() {
    let device = Arc::new(SimDevice::default());
    let pool = DynamicPool::new(device.clone(), segments_config(4 * MIB, 8 * MIB)).unwrap();
    let a = pool.alloc(4 * MIB).unwrap();
    // 4 * 1.5^2 = 9 passes the 8 MiB cap, but 4 + 3 fits under it: the growth is clamped to 4 MiB.
    let b = pool.alloc(3 * MIB).unwrap();
    assert_eq!(segment_sizes(&pool), vec![4 * MIB, 4 * MIB]);
    let before = snapshot(&pool);
    let err = pool.alloc(2 * MIB).unwrap_err();
    assert_eq!(err, Error::OutOfMemory { requested: 2 * MIB, live: 7 * MIB, reserved: 8 * MIB, cap: 8 * MIB });
    assert_eq!(
        err.to_string(),
        "out of memory: requested 2097152 bytes with 7340032 bytes live and 8388608 bytes reserved; \
         the cap is 8388608 bytes"
    );
    assert_eq!(snapshot(&pool), before);
    assert_eq!(pool.stats().ooms, 1);
    pool.free(a.addr).unwrap();
    pool.free(b.addr).unwrap();
}

#[test]
fn at_the_cap_it_trims_free_segments_and_retries() {
    let device = Arc::new(SimDevice::default());
    let pool = DynamicPool::new(device.clone(), segments_config(8 * MIB, 24 * MIB)).unwrap();
    let a = pool.alloc(8 * MIB).unwrap();
    let _b = pool.alloc(6 * MIB).unwrap();
    assert_eq!(segment_sizes(&pool), vec![8 * MIB, 10 * MIB]);
    pool.free(a.addr).unwrap();
    // 9 MiB fits neither free stretch; 18 + 9 passes the cap; trimming the free 8 MiB segment makes room.
    // After the trim, 10 -> 22.5 MiB: a 12 MiB segment.
    let c = pool.alloc(9 * MIB).unwrap();
    let stats = pool.stats();
    assert_eq!(stats.trimmed_bytes, 8 * MIB);
    assert_eq!(segment_sizes(&pool), vec![10 * MIB, 12 * MIB]);
    assert_eq!(stats.reserved_bytes.current, 22 * MIB);
    assert_eq!(device.used_bytes(), 22 * MIB);
    assert_eq!(stats.ooms, 0);
    pool.free(c.addr).unwrap();
}

/// The simulated device lays segments out back to back: a pool that merged neighbours across segments
/// would hand out a block spanning two of them, and its frees would be refused by the device.
#[test]
fn segments_side_by_side_never_coalesce() {
    let device = Arc::new(SimDevice::new(SimDeviceConfig::default().granularity(None)));
    let pool = DynamicPool::new(device.clone(), segments_config(4 * MIB, 64 * MIB)).unwrap();
    let a = pool.alloc(4 * MIB).unwrap();
    let b = pool.alloc(4 * MIB).unwrap();
    let report = pool.report();
    assert_eq!(report.segments[0].addr + report.segments[0].size, report.segments[1].addr, "adjacent");
    pool.free(a.addr).unwrap();
    pool.free(b.addr).unwrap();
    let c = pool.alloc(8 * MIB).unwrap();
    assert!(c.addr >= report.segments[1].addr + report.segments[1].size, "served by a new segment");
    pool.free(c.addr).unwrap();
    let held: u64 = segment_sizes(&pool).iter().sum();
    assert_eq!(pool.trim().unwrap(), held);
    assert_eq!(device.used_bytes(), 0);
    assert_eq!(device.counters().failed_calls, 0);
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    for mode in [VirtualMemory::Off, VirtualMemory::Auto] {
        let device = Arc::new(SimDevice::default());
        let config = DynamicConfig::default().initial_size(4 * MIB).cap(Cap::Bytes(64 * MIB)).virtual_memory(mode);
        let pool = DynamicPool::new(device, config).unwrap();
        let a = pool.alloc(3000).unwrap();
        let b = pool.alloc(5000).unwrap();
        pool.free(b.addr).unwrap();
        let before = snapshot(&pool);
        assert_eq!(pool.allocate(0, 256, StreamId::DEFAULT), Err(Error::ZeroSize));
        assert_eq!(pool.allocate(1, 3, StreamId::DEFAULT), Err(Error::AlignmentNotPowerOfTwo { alignment: 3 }));
        for huge in [u64::MAX, 65 * MIB] {
            let err = pool.allocate(huge, 256, StreamId::DEFAULT).unwrap_err();
            assert_eq!(err, Error::OutOfMemory { requested: huge, live: 3000, reserved: 4 * MIB, cap: 64 * MIB });
        }
        assert_eq!(pool.free(b.addr), Err(Error::NotLive { addr: b.addr }));
        assert_eq!(pool.free(a.addr + 256), Err(Error::InteriorAddress { addr: a.addr + 256, block: a.addr }));
        assert_eq!(pool.free(42), Err(Error::ForeignAddress { addr: 42 }));
        assert_eq!(snapshot(&pool), before, "{mode:?}");
        pool.free(a.addr).unwrap();
    }
}

#[test]
fn virtual_memory_grows_in_place_and_coalesces_across_the_growth_boundary() {
    let g = 64 * KIB;
    let device = host(Some(g));
    let config = DynamicConfig::default().initial_size(4 * g).cap(Cap::Bytes(8 * MIB));
    let pool = DynamicPool::new(device.clone(), config).unwrap();
    let a = pool.alloc(3 * g).unwrap();
    let b = pool.alloc(8 * g).unwrap();
    assert_eq!(b.addr, a.addr + 3 * g, "the next block follows, across the end of the initial chunks");
    device.fill(b.addr, b.size, 1).unwrap();
    assert_eq!(pool.stats().growths, 1);
    pool.free(a.addr).unwrap();
    pool.free(b.addr).unwrap();
    let c = pool.alloc(11 * g).unwrap();
    assert_eq!(c.addr, a.addr, "the two freed blocks merged into one");
    device.fill(c.addr, c.size, 2).unwrap();
    pool.free(c.addr).unwrap();
}

#[test]
fn idle_chunks_move_to_where_memory_is_needed() {
    let g = 64 * KIB;
    let device = host(Some(g));
    let config = DynamicConfig::default().initial_size(0).growth_factor(1.01).cap(Cap::Bytes(8 * MIB));
    let pool = DynamicPool::new(device.clone(), config).unwrap();
    let x = pool.alloc(16 * g).unwrap();
    let z = pool.alloc(g).unwrap();
    device.fill(z.addr, z.size, 0x5A).unwrap();
    assert_eq!(pool.stats().reserved_bytes.current, 17 * g);
    pool.free(x.addr).unwrap();
    // 32 chunks do not fit the 16-chunk hole: they go after z, taking the 16 idle chunks and 16 new ones.
    let w = pool.alloc(32 * g).unwrap();
    assert_eq!(w.addr, z.addr + g);
    device.fill(w.addr, w.size, 0x77).unwrap();
    device.check(z.addr, z.size, 0x5A).unwrap();
    let stats = pool.stats();
    assert_eq!(stats.chunks_moved, 16);
    assert_eq!(stats.reserved_bytes.current, 33 * g, "reserved grew only by what was missing");
    let counters = device.counters();
    assert_eq!((counters.remap_calls, counters.chunks_moved), (1, 16), "one batch of contiguous chunks");
    assert_eq!(counters.used_bytes, 33 * g);
    // The hole is unmapped now: a block there gets chunks again, and trim gives idle ones back.
    pool.free(w.addr).unwrap();
    let y = pool.alloc(8 * g).unwrap();
    device.fill(y.addr, y.size, 3).unwrap();
    assert_eq!(pool.stats().reserved_bytes.current, 33 * g, "moved again, not grown");
    let trimmed = pool.trim().unwrap();
    assert_eq!(trimmed, 24 * g);
    assert_eq!(device.used_bytes(), 9 * g);
    pool.free(y.addr).unwrap();
    pool.free(z.addr).unwrap();
    drop(pool);
    assert_eq!(device.used_bytes(), 0);
}

#[test]
fn virtual_memory_out_of_memory_moves_nothing() {
    let g = 64 * KIB;
    let device = host(Some(g));
    let config = DynamicConfig::default().initial_size(0).growth_factor(1.01).cap(Cap::Bytes(16 * g));
    let pool = DynamicPool::new(device.clone(), config).unwrap();
    let x = pool.alloc(8 * g).unwrap();
    let _z = pool.alloc(g).unwrap();
    pool.free(x.addr).unwrap();
    let before = snapshot(&pool);
    let moved_before = device.counters().chunks_moved;
    // 12 chunks: 8 idle could move, 4 more would pass the 16-chunk cap (9 mapped + 4 > ... after moves 13).
    let err = pool.alloc(16 * g).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory { .. }), "{err}");
    assert_eq!(snapshot(&pool), before);
    assert_eq!(device.counters().chunks_moved, moved_before);
}

#[test]
fn alignment_is_honoured() {
    let pool = DynamicPool::new(Arc::new(SimDevice::default()), segments_config(4 * MIB, 64 * MIB)).unwrap();
    let _pad = pool.alloc(300).unwrap();
    for alignment in [1u64, 256, 512, 4096, MIB] {
        let a = pool.allocate(1000, alignment, StreamId::DEFAULT).unwrap();
        assert_eq!(a.addr % alignment.max(256), 0, "alignment {alignment}");
    }
}

#[test]
fn a_pool_gives_everything_back_when_dropped() {
    for mode in [VirtualMemory::Off, VirtualMemory::Auto] {
        let device = Arc::new(SimDevice::default());
        let config = DynamicConfig::default().initial_size(4 * MIB).virtual_memory(mode);
        let pool = DynamicPool::new(device.clone(), config).unwrap();
        let _leaked = pool.alloc(10 * MIB).unwrap();
        drop(pool);
        assert_eq!(device.used_bytes(), 0, "{mode:?}");
        let c = device.counters();
        assert_eq!(c.ranges_reserved, c.ranges_released);
        assert_eq!(c.failed_calls, 0);
    }
}

#[test]
fn a_backend_without_virtual_memory_gets_segments() {
    let device = Arc::new(SimDevice::new(SimDeviceConfig::default().granularity(None)));
    assert_eq!(device.granularity(), None);
    let pool = DynamicPool::new(device, DynamicConfig::default()).unwrap();
    assert!(!pool.uses_virtual_memory());
}

/// A pool on `config` with 4 chunks freed while the device still runs work that used them (x), one chunk
/// live after them (z), then an 8-chunk block (w) that needs more than those 4: returns the device, the pool,
/// z and w.
fn grow_past_chunks_in_use(config: DynamicConfig) -> (Arc<SimDevice>, DynamicPool, Allocation, Allocation) {
    let g = 2 * MIB;
    let sim = Arc::new(SimDevice::default());
    let pool = DynamicPool::new(sim.clone(), config).unwrap();
    let x = pool.alloc(4 * g).unwrap();
    let z = pool.alloc(g).unwrap();
    // The device is still running work that used x when x is freed.
    sim.hold_stream(StreamId::DEFAULT);
    pool.free(x.addr).unwrap();
    let w = pool.alloc(8 * g).unwrap();
    (sim, pool, z, w)
}

/// Without aliasing, moving an idle chunk must wait for the work that last used it. The pool moves at once
/// the chunks whose last use is known complete, grows around those still in use, and waits for the device
/// only at the cap.
#[test]
fn idle_chunks_still_in_use_are_grown_around_and_waited_for_only_at_the_cap() {
    let g = 2 * MIB;
    let config =
        DynamicConfig::default().initial_size(0).growth_factor(1.01).cap(Cap::Bytes(20 * g)).alias_in_use(false);
    let (sim, pool, z, w) = grow_past_chunks_in_use(config);
    let stats = pool.stats();
    assert_eq!((stats.chunks_moved, stats.synchronizations), (0, 0), "grown around x's chunks: {stats:?}");
    assert_eq!(stats.reserved_bytes.current, 13 * g);
    // Once the device has run past the free, x's chunks move without waiting (v does not fit x's hole).
    sim.release_stream(StreamId::DEFAULT);
    let v = pool.alloc(5 * g).unwrap();
    let stats = pool.stats();
    assert_eq!((stats.chunks_moved, stats.synchronizations), (4, 0), "{stats:?}");
    assert_eq!(stats.reserved_bytes.current, 14 * g);
    // At the cap there is no room to grow around chunks in use: the pool waits for the work that last used
    // them (the event that ends its epoch), not for the whole device.
    sim.hold_stream(StreamId::DEFAULT);
    pool.free(w.addr).unwrap();
    let u = pool.alloc(12 * g).unwrap();
    let stats = pool.stats();
    assert_eq!((stats.event_waits, stats.synchronizations, stats.chunks_moved), (1, 0, 12), "{stats:?}");
    assert_eq!((sim.counters().event_waits, sim.counters().synchronizations), (1, 0));
    assert_eq!(stats.reserved_bytes.current, 18 * g);
    for a in [z, v, u] {
        pool.free(a.addr).unwrap();
    }
    assert_eq!(sim.counters().failed_calls, 0);
}

/// Without aliasing, with `wait_for_idle`, idle chunks still in use are waited for and moved instead of
/// grown around: the pool reserves what it would on an idle device, at the price of a wait.
#[test]
fn waiting_for_idle_chunks_moves_them_instead_of_growing() {
    let g = 2 * MIB;
    for wait in [false, true] {
        let config =
            DynamicConfig::default().initial_size(0).growth_factor(1.01).wait_for_idle(wait).alias_in_use(false);
        let (sim, pool, z, w) = grow_past_chunks_in_use(config);
        let stats = pool.stats();
        if wait {
            assert_eq!((stats.chunks_moved, stats.event_waits, stats.synchronizations), (4, 1, 0), "{stats:?}");
            assert_eq!(stats.reserved_bytes.current, 9 * g, "x's 4 chunks moved under w, 4 more mapped");
        } else {
            assert_eq!((stats.chunks_moved, stats.event_waits, stats.synchronizations), (0, 0, 0), "{stats:?}");
            assert_eq!(stats.reserved_bytes.current, 13 * g, "grown around x's chunks");
        }
        sim.release_stream(StreamId::DEFAULT);
        pool.free(z.addr).unwrap();
        pool.free(w.addr).unwrap();
        assert_eq!(sim.counters().failed_calls, 0);
    }
}

/// With several streams the pool's epochs do not order every stream's work: moving idle chunks still in use
/// waits for the whole device, as before.
#[test]
fn with_several_streams_moving_chunks_in_use_waits_for_the_device() {
    let g = 2 * MIB;
    let sim = Arc::new(SimDevice::default());
    let config = DynamicConfig::default().initial_size(0).growth_factor(1.01).wait_for_idle(true);
    let pool = DynamicPool::new(sim.clone(), config).unwrap();
    let other = pool.allocate(g, 256, StreamId(5)).unwrap();
    let x = pool.alloc(4 * g).unwrap();
    let z = pool.alloc(g).unwrap();
    sim.hold_stream(StreamId::DEFAULT);
    pool.free(x.addr).unwrap();
    let w = pool.alloc(8 * g).unwrap();
    let stats = pool.stats();
    assert_eq!((stats.chunks_moved, stats.event_waits, stats.synchronizations), (4, 0, 1), "{stats:?}");
    for a in [other, z, w] {
        pool.free(a.addr).unwrap();
    }
    assert_eq!(sim.counters().failed_calls, 0);
}

/// On one stream, idle chunks still in use are given to the new block at once by mapping their memory at
/// its address as well: no wait, no new memory, the device's memory counted once. Their old addresses stay
/// mapped until the work queued before has run; with `avoid_retiring=false`, a block that lands there waits
/// for that work first.
#[test]
fn idle_chunks_still_in_use_are_aliased_to_the_new_block_on_one_stream() {
    let g = 2 * MIB;
    let config = DynamicConfig::default().initial_size(0).growth_factor(1.01).wait_for_idle(true).avoid_retiring(false);
    let (sim, pool, z, w) = grow_past_chunks_in_use(config);
    let stats = pool.stats();
    assert_eq!(
        (stats.chunks_aliased, stats.chunks_moved, stats.event_waits, stats.synchronizations),
        (4, 0, 0, 0),
        "{stats:?}"
    );
    assert_eq!(stats.reserved_bytes.current, 9 * g, "x's 4 chunks serve w, 4 more mapped: as after a wait");
    let device = sim.counters();
    assert_eq!((device.alias_calls, device.chunks_aliased, device.event_waits), (1, 4, 0));
    assert_eq!(device.used_bytes, 9 * g, "aliased memory is the device's once");
    // A growth ahead of need that would land on x's old addresses skips its turn rather than map there.
    assert_eq!(pool.grow_ahead().unwrap(), 0);
    assert_eq!((sim.counters().failed_calls, pool.stats().reserved_bytes.current), (0, 9 * g));
    // x's old addresses (the pool's lowest) are still mapped on the device, waiting for the work queued
    // before the alias; the device still runs it. A block landing there waits for that work, then backs
    // the chunks anew.
    let v = pool.alloc(4 * g).unwrap();
    assert_eq!(v.addr, z.addr - 4 * g, "v lands on x's old addresses, just below z");
    let stats = pool.stats();
    assert_eq!((stats.event_waits, stats.synchronizations), (1, 0), "{stats:?}");
    assert_eq!(sim.counters().unmap_calls, 1, "x's old addresses unmapped once the work had run");
    assert_eq!(sim.counters().used_bytes, stats.reserved_bytes.current);
    for a in [z, w, v] {
        pool.free(a.addr).unwrap();
    }
    pool.trim().unwrap();
    assert_eq!(sim.counters().used_bytes, 0);
    assert_eq!(sim.counters().failed_calls, 0);
}

/// By default a block that would land on old addresses still retiring is carved elsewhere, where it needs
/// no more chunks backed: no wait, and no more memory than waiting would have taken.
#[test]
fn a_block_is_carved_away_from_retiring_addresses_rather_than_wait() {
    let g = 2 * MIB;
    let config = DynamicConfig::default().initial_size(0).growth_factor(1.01).wait_for_idle(true);
    let (sim, pool, z, w) = grow_past_chunks_in_use(config);
    assert_eq!(pool.stats().chunks_aliased, 4);
    // x's old addresses, just below z, are still retiring: v goes elsewhere and backs 4 chunks there.
    let v = pool.alloc(4 * g).unwrap();
    assert!(v.addr >= w.addr + 8 * g || v.addr + 4 * g <= z.addr - 4 * g, "v away from x's old addresses");
    let stats = pool.stats();
    assert_eq!((stats.event_waits, stats.synchronizations), (0, 0), "{stats:?}");
    assert_eq!(stats.reserved_bytes.current, 13 * g, "as much as backing x's old addresses anew after a wait");
    assert_eq!(sim.counters().unmap_calls, 0, "x's old addresses still mapped: their work has not run");
    assert_eq!(sim.counters().used_bytes, stats.reserved_bytes.current);
    // Once the work has run, the old addresses are unmapped without a wait and serve again.
    sim.release_stream(StreamId::DEFAULT);
    let u = pool.alloc(g).unwrap();
    assert_eq!(sim.counters().unmap_calls, 1, "x's old addresses unmapped without a wait");
    assert_eq!(pool.stats().event_waits, 0);
    for a in [z, w, v, u] {
        pool.free(a.addr).unwrap();
    }
    pool.trim().unwrap();
    assert_eq!(sim.counters().used_bytes, 0);
    assert_eq!(sim.counters().failed_calls, 0);
}

/// A block whose first place spans retiring chunks and a mapped idle one needs fewer chunks backed there
/// than anywhere else: it stays, and waits for the work queued before the alias.
#[test]
fn a_block_that_needs_less_backing_on_retiring_addresses_waits_for_them() {
    let g = 2 * MIB;
    let config = DynamicConfig::default().initial_size(0).growth_factor(1.01).wait_for_idle(true);
    let (sim, pool, z, w) = grow_past_chunks_in_use(config);
    pool.free(z.addr).unwrap();
    let v = pool.alloc(5 * g).unwrap();
    assert_eq!(v.addr, z.addr - 4 * g, "v on x's old addresses and z's chunk");
    let stats = pool.stats();
    assert_eq!((stats.event_waits, stats.synchronizations), (1, 0), "{stats:?}");
    assert_eq!(stats.reserved_bytes.current, 13 * g, "x's 4 old chunks backed anew");
    assert_eq!(sim.counters().unmap_calls, 1, "x's old addresses unmapped once the work had run");
    for a in [w, v] {
        pool.free(a.addr).unwrap();
    }
    assert_eq!(sim.counters().failed_calls, 0);
}

/// Retiring addresses whose work is known to have run are unmapped at the pool's next device call, and
/// trim and drop unmap any still retiring, after waiting for the device: nothing stays mapped.
#[test]
fn retiring_addresses_are_unmapped_once_their_work_has_run() {
    let g = 2 * MIB;
    let config = DynamicConfig::default().initial_size(0).growth_factor(1.01);
    let (sim, pool, z, w) = grow_past_chunks_in_use(config.clone());
    assert_eq!(pool.stats().chunks_aliased, 4);
    sim.release_stream(StreamId::DEFAULT);
    // A block that needs new memory elsewhere: the pool looks at its retiring addresses on the way.
    let far = pool.alloc(32 * g).unwrap();
    assert_eq!(sim.counters().unmap_calls, 1, "x's old addresses unmapped without a wait");
    assert_eq!(pool.stats().event_waits, 0);
    for a in [z, w, far] {
        pool.free(a.addr).unwrap();
    }
    drop(pool);
    let c = sim.counters();
    assert_eq!((c.used_bytes, c.failed_calls, c.ranges_released), (0, 0, 1));

    // Still retiring at trim, and at drop.
    for trim in [true, false] {
        let (sim, pool, z, w) = grow_past_chunks_in_use(config.clone());
        pool.free(z.addr).unwrap();
        pool.free(w.addr).unwrap();
        if trim {
            assert_eq!(pool.trim().unwrap(), 9 * g);
            assert_eq!(sim.counters().used_bytes, 0, "the retiring addresses unmapped too");
            assert_eq!(pool.stats().synchronizations, 1);
        }
        drop(pool);
        let c = sim.counters();
        assert_eq!((c.used_bytes, c.failed_calls, c.ranges_released), (0, 0, 1), "trim {trim}");
    }
}

/// Aliasing needs one stream and a device that supports it; `alias_in_use=false` turns it off.
#[test]
fn aliasing_is_off_with_several_streams_or_when_configured_off() {
    let g = 2 * MIB;
    let config = DynamicConfig::default().initial_size(0).growth_factor(1.01).wait_for_idle(true);
    let (_, pool, _, _) = grow_past_chunks_in_use(config.clone().alias_in_use(false));
    assert_eq!((pool.stats().chunks_aliased, pool.stats().event_waits), (0, 1));
    let sim = Arc::new(SimDevice::default());
    let pool = DynamicPool::new(sim.clone(), config).unwrap();
    let other = pool.allocate(g, 256, StreamId(5)).unwrap();
    let x = pool.alloc(4 * g).unwrap();
    let _z = pool.alloc(g).unwrap();
    sim.hold_stream(StreamId::DEFAULT);
    pool.free(x.addr).unwrap();
    let _w = pool.alloc(8 * g).unwrap();
    let stats = pool.stats();
    assert_eq!((stats.chunks_aliased, stats.chunks_moved, stats.synchronizations), (0, 4, 1), "{stats:?}");
    pool.free(other.addr).unwrap();
}

/// A growth ahead of need whose stretch starts on mapped free chunks maps only the chunks that are not
/// mapped (the device refuses to map a chunk twice), and counts only those.
#[test]
fn growth_ahead_over_mapped_free_chunks_maps_only_the_rest() {
    let g = 2 * MIB;
    let sim = Arc::new(SimDevice::default());
    let config = DynamicConfig::default().initial_size(4 * g).growth_factor(2.0);
    let pool = DynamicPool::new(sim.clone(), config).unwrap();
    let a = pool.alloc(3 * g).unwrap();
    let before = pool.stats();
    let grown = pool.grow_ahead().unwrap();
    assert!(grown > 0, "the stretch past the mapped free chunk is mapped");
    let after = pool.stats();
    assert_eq!(after.reserved_bytes.current, before.reserved_bytes.current + grown);
    assert_eq!((after.growths, after.pre_expansions), (before.growths + 1, before.pre_expansions + 1));
    assert_eq!(sim.counters().failed_calls, 0, "no chunk mapped twice");
    assert_eq!(sim.used_bytes(), after.reserved_bytes.current);
    // The free mapped memory now holds a block as large as all of it without growing.
    let b = pool.alloc(after.reserved_bytes.current - 3 * g).unwrap();
    assert_eq!(pool.stats().growths, after.growths, "{:?}", pool.stats());
    for block in [a, b] {
        pool.free(block.addr).unwrap();
    }
    pool.trim().unwrap();
    assert_eq!((sim.used_bytes(), sim.counters().failed_calls), (0, 0));
    // A step that fits in free mapped memory needs no growth.
    let config = DynamicConfig::default().initial_size(8 * g).growth_factor(1.25);
    let pool = DynamicPool::new(sim.clone(), config).unwrap();
    assert_eq!(pool.grow_ahead().unwrap(), 0);
    assert_eq!((pool.stats().reserved_bytes.current, pool.stats().growths), (8 * g, 0));
    assert_eq!(sim.counters().failed_calls, 0);
}

/// A pool sizing its own pages on the simulated device (2 MiB granularity), capped at `cap`.
fn adaptive_pages(device: &Arc<SimDevice>, cap: u64) -> DynamicPool {
    let config = DynamicConfig::default()
        .initial_size(0)
        .cap(Cap::Bytes(cap))
        .paging(vrampool::Paging::Adaptive(vrampool::PagePolicy::default()));
    DynamicPool::new(device.clone(), config).unwrap()
}

/// With pages it sizes itself, the pool maps nothing until a block needs it, maps only what blocks need
/// (whole pages, no growth factor), and moves idle pages to a block before it maps new memory.
#[test]
fn adaptive_pages_map_only_under_blocks_and_move_idle_pages_before_growing() {
    let device = Arc::new(SimDevice::default());
    let pool = adaptive_pages(&device, GIB);
    assert_eq!((device.used_bytes(), pool.stats().reserved_bytes.current), (0, 0));
    let a = pool.alloc(3 * MIB).unwrap();
    assert_eq!(pool.stats().reserved_bytes.current, 4 * MIB, "two pages of 2 MiB");
    let b = pool.alloc(10 * MIB).unwrap();
    let reserved = pool.stats().reserved_bytes.current;
    assert!(reserved <= 16 * MIB, "{reserved}");
    pool.free(a.addr).unwrap();
    pool.free(b.addr).unwrap();
    // A larger block than either fits where neither was: the idle pages move under it first.
    let c = pool.alloc(reserved - 2 * MIB).unwrap();
    assert_eq!(pool.stats().reserved_bytes.current, reserved, "moved, not grown: {:?}", pool.stats());
    pool.free(c.addr).unwrap();
    drop(pool);
    assert_eq!(device.used_bytes(), 0);
}

/// A block that would need pages where it first lands is placed where mapped pages are free, if a free
/// block holds it there: no page moves, no new memory.
#[test]
fn adaptive_pages_place_a_block_where_pages_are_mapped_already() {
    let device = Arc::new(SimDevice::default());
    let pool = adaptive_pages(&device, GIB);
    let blocks: Vec<Allocation> = (0..8).map(|_| pool.alloc(4 * MIB).unwrap()).collect();
    for block in blocks.iter().step_by(2) {
        pool.free(block.addr).unwrap();
    }
    let (reserved, calls) = (pool.stats().reserved_bytes.current, device.counters().memory_calls());
    for _ in 0..4 {
        pool.alloc(4 * MIB).unwrap();
    }
    assert_eq!(pool.stats().reserved_bytes.current, reserved);
    assert_eq!(device.counters().memory_calls(), calls, "every block landed on mapped pages");
    assert_eq!(pool.stats().chunks_moved, 0);
}

/// Pages grow with the pool: a pool growing to 4 GiB maps most of it in pages of several megabytes (up to
/// 16 MiB, a 256th of it), for a driver time well under what pages of the granularity would take.
#[test]
fn adaptive_pages_grow_with_the_pool() {
    let device = Arc::new(SimDevice::default());
    let pool = adaptive_pages(&device, 64 * GIB);
    for _ in 0..64 {
        pool.alloc(64 * MIB).unwrap();
    }
    let counters = device.counters();
    assert_eq!(counters.chunks_mapped * 2 * MIB, pool.stats().reserved_bytes.current);
    let at_granularity = vrampool::CostModel::default().map(counters.chunks_mapped, 2 * MIB);
    assert!(counters.driver_time_ns * 3 < at_granularity * 2, "{} against {at_granularity}", counters.driver_time_ns);
    assert!(pool.stats().reserved_bytes.current <= 64 * 64 * MIB + 64 * MIB, "{:?}", pool.stats());
}

/// A churn of spread sizes, one request a microsecond on the simulated device's clock, through a pool
/// sizing its own pages with a budget of `per_mille` thousandths of the time for moving idle pages: the
/// pool's peak reserved bytes, its chunks moved, and the device calls it made.
fn churn_with_a_budget(per_mille: u64) -> (u64, u64, u64) {
    let device = Arc::new(SimDevice::default());
    churn_on(device.clone(), per_mille, &|i| device.advance_clock(i as i64), &|| device.counters().memory_calls())
}

/// The churn of [`churn_with_a_budget`] through a pool on `backend`, calling `tick` with each request's
/// index, and `calls` for the device calls made at the end.
fn churn_on(backend: Arc<dyn Backend>, per_mille: u64, tick: &dyn Fn(u64), calls: &dyn Fn() -> u64) -> (u64, u64, u64) {
    let policy = vrampool::PagePolicy { driver_per_mille: per_mille, ..vrampool::PagePolicy::default() };
    let config = DynamicConfig::default().initial_size(0).paging(vrampool::Paging::Adaptive(policy));
    let pool = DynamicPool::new(backend, config).unwrap();
    let mut seed = 7u64;
    let mut size = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // Log-uniform over 256 B to 8 MiB.
        (256.0 * (15.0 * (seed % 10_000) as f64 / 10_000.0).exp2()) as u64
    };
    let mut live: Vec<u64> = Vec::new();
    for i in 0..20_000u64 {
        tick(i);
        if live.len() == 200 {
            let slot = (i * 7919 % 200) as usize;
            pool.free(live.swap_remove(slot)).unwrap();
        }
        live.push(pool.alloc(size()).unwrap().addr);
    }
    let stats = pool.stats();
    (stats.reserved_bytes.peak, stats.chunks_moved, calls())
}

/// The simulated device, timed as a real device is: by the host's clock ([`DriverClock::Wall`]).
#[derive(Debug)]
struct WallClocked(SimDevice);

impl Backend for WallClocked {
    fn name(&self) -> String {
        "sim timed by the host's clock".into()
    }
    fn capacity(&self) -> u64 {
        self.0.capacity()
    }
    fn segment_alignment(&self) -> u64 {
        self.0.segment_alignment()
    }
    fn segment_unit(&self) -> u64 {
        self.0.segment_unit()
    }
    fn allocate_segment(&self, size: u64) -> vrampool::Result<u64> {
        self.0.allocate_segment(size)
    }
    fn free_segment(&self, addr: u64, size: u64) -> vrampool::Result<()> {
        self.0.free_segment(addr, size)
    }
    fn granularity(&self) -> Option<u64> {
        self.0.granularity()
    }
    fn reserve_range(&self, size: u64) -> vrampool::Result<u64> {
        self.0.reserve_range(size)
    }
    fn release_range(&self, addr: u64, size: u64) -> vrampool::Result<()> {
        self.0.release_range(addr, size)
    }
    fn map(&self, addr: u64, size: u64) -> vrampool::Result<()> {
        self.0.map(addr, size)
    }
    fn driver_clock(&self) -> vrampool::DriverClock {
        vrampool::DriverClock::Wall
    }
    fn supports_large_pages(&self) -> bool {
        self.0.supports_large_pages()
    }
    fn map_pages(&self, addr: u64, pages: &[u64]) -> vrampool::Result<()> {
        self.0.map_pages(addr, pages)
    }
    fn unmap(&self, addr: u64, size: u64) -> vrampool::Result<()> {
        self.0.unmap(addr, size)
    }
    fn remap(&self, from: u64, to: u64, size: u64) -> vrampool::Result<()> {
        self.0.remap(from, to, size)
    }
    fn supports_alias(&self) -> bool {
        self.0.supports_alias()
    }
    fn alias(&self, from: u64, to: u64, size: u64) -> vrampool::Result<()> {
        self.0.alias(from, to, size)
    }
    fn record_event(&self, stream: StreamId) -> vrampool::Result<vrampool::EventId> {
        self.0.record_event(stream)
    }
    fn event_complete(&self, event: vrampool::EventId) -> vrampool::Result<bool> {
        self.0.event_complete(event)
    }
    fn stream_wait_event(&self, stream: StreamId, event: vrampool::EventId) -> vrampool::Result<()> {
        self.0.stream_wait_event(stream, event)
    }
    fn release_event(&self, event: vrampool::EventId) {
        self.0.release_event(event)
    }
    fn wait_event(&self, event: vrampool::EventId) -> vrampool::Result<()> {
        self.0.wait_event(event)
    }
    fn synchronize(&self) -> vrampool::Result<()> {
        self.0.synchronize()
    }
}

/// On a device timed by the host's clock, the moves are charged to the budget call by call (at the cost
/// model's price, not the host's time, which `driver_budget`'s tests check): with a budget of none of the
/// time, the charges of the first moves stop the moves of a churn back to back; without charges it would
/// move as much as a pool without a budget.
#[test]
fn a_real_clock_budget_counts_the_moves_charged() {
    let run = |per_mille| {
        let device = Arc::new(WallClocked(SimDevice::default()));
        let calls = device.clone();
        churn_on(device, per_mille, &|_| {}, &|| calls.0.counters().memory_calls())
    };
    let (bounded_peak, bounded_moves, bounded_calls) = run(0);
    let (free_peak, free_moves, free_calls) = run(1000);
    assert!(free_moves > 10, "the churn moves pages without a budget: {free_moves}");
    assert!(bounded_moves * 5 < free_moves, "moves: {bounded_moves} with the budget, {free_moves} without");
    assert!(bounded_calls < free_calls, "device calls: {bounded_calls} with the budget, {free_calls} without");
    assert!(bounded_peak >= free_peak, "the moves saved memory: {bounded_peak} against {free_peak}");
}

/// Over its budget of driver time, a pool sizing its own pages stops moving idle pages for each block that
/// lands where pages are missing and maps larger pages instead: a churn back to back makes a fraction of
/// the device calls, for more memory; a pool without a clock (or with a budget of the whole time) moves as
/// before.
#[test]
fn a_budget_of_driver_time_bounds_the_moves_of_a_churn_back_to_back() {
    let (bounded_peak, bounded_moves, bounded_calls) = churn_with_a_budget(10);
    let (free_peak, free_moves, free_calls) = churn_with_a_budget(1000);
    assert!(bounded_moves * 5 < free_moves, "moves: {bounded_moves} with the budget, {free_moves} without");
    assert!(bounded_calls < free_calls, "device calls: {bounded_calls} with the budget, {free_calls} without");
    assert!(bounded_peak >= free_peak, "the moves saved memory: {bounded_peak} against {free_peak}");
}
