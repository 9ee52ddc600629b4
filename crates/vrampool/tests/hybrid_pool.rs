//! The hybrid pool's behaviours: routing, learned classes, the watermark, memory shared with the region.

mod common;

use std::sync::{Arc, Condvar, Mutex};

use vrampool::{
    Backend, Cap, ClassSpec, DeviceAddr, DynamicConfig, EventId, HostMemory, HostMemoryConfig, HybridConfig,
    HybridPool, KIB, MIB, Pool, PoolExt, SimDevice, StreamId, VirtualMemory,
};

fn region(virtual_memory: VirtualMemory) -> DynamicConfig {
    DynamicConfig::default().initial_size(4 * MIB).cap(Cap::Bytes(512 * MIB)).virtual_memory(virtual_memory)
}

fn given(classes: &[(u64, u64)]) -> HybridConfig {
    HybridConfig::default()
        .classes(classes.iter().map(|&(block_size, block_count)| ClassSpec { block_size, block_count }).collect())
        .max_rounding_waste(0.125)
        .waste_floor(0)
        .deterministic(true)
        .dynamic(region(VirtualMemory::Off))
}

#[test]
fn defaults_are_documented() {
    let c = HybridConfig::default();
    assert_eq!((c.warmup_requests, c.coverage, c.max_rounding_waste, c.watermark), (1024, 0.9, 0.1, 0.8));
    assert_eq!((c.slab_headroom, c.max_classes, c.max_class_size, c.dynamic.growth_factor), (2.0, 128, 4 * MIB, 1.01));
    assert_eq!((c.waste_floor, c.max_cached_waste), (16 * KIB, 0.5));
    assert!(c.classes.is_empty());
    assert!(!c.deterministic);
    assert!(!c.drain_before_growth);
}

#[test]
fn the_waste_floor_lets_a_class_serve_small_requests() {
    let config = given(&[(16 * KIB, 4), (MIB, 1)]).waste_floor(16 * KIB);
    let pool = HybridPool::new(Arc::new(SimDevice::default()), config).unwrap();
    let small: Vec<_> = [256, 3000, 16 * KIB].iter().map(|&size| pool.alloc(size).unwrap()).collect();
    assert_eq!(pool.stats().fallbacks, 0, "16 KiB blocks serve every request up to 16 KiB");
    // 12.5% of 960 KiB is 120 KiB: the fraction allows more than the floor there.
    let large = pool.alloc(960 * KIB).unwrap();
    assert_eq!(pool.stats().fallbacks, 0);
    // Neither 12.5% of 900 KiB (112.5 KiB) nor the floor covers the 124 KiB a 1 MiB block would add.
    let too_small = pool.alloc(900 * KIB).unwrap();
    assert_eq!(pool.stats().fallback_reasons.get("no-class"), Some(&1));
    for block in small.iter().chain([&large, &too_small]) {
        pool.free(block.addr).unwrap();
    }
}

#[test]
fn given_classes_serve_their_requests_and_the_rest_goes_to_the_region() {
    let pool = HybridPool::new(Arc::new(SimDevice::default()), given(&[(4 * KIB, 2), (MIB, 1)])).unwrap();
    let a = pool.alloc(4000).unwrap();
    let b = pool.alloc(3700).unwrap();
    let c = pool.alloc(MIB - 1000).unwrap();
    assert_eq!(pool.stats().fallbacks, 0, "all three in the core");
    let full = pool.alloc(4096).unwrap(); // the 4 KiB slab is full
    let waste = pool.alloc(2 * KIB).unwrap(); // a 4 KiB block would waste half of it
    let huge = pool.alloc(3 * MIB).unwrap(); // no class
    let stats = pool.stats();
    assert_eq!(stats.fallbacks, 3);
    assert_eq!(stats.fallback_reasons.get("class-full"), Some(&1));
    assert_eq!(stats.fallback_reasons.get("no-class"), Some(&2));
    assert_eq!(stats.allocated_bytes.current, 4000 + 3700 + MIB - 1000 + 4096 + 2 * KIB + 3 * MIB);
    let report = pool.report();
    assert_eq!(report.classes.len(), 2);
    assert_eq!(report.classes[0].live_blocks, 2);
    assert_eq!(report.blocks.iter().filter(|b| b.fallback).count(), 3);
    for x in [a, b, c, full, waste, huge] {
        pool.free(x.addr).unwrap();
    }
    let stats = pool.stats();
    assert_eq!((stats.allocated_bytes.current, stats.active_allocations), (0, 0));
    // A freed core block comes back at once.
    let again = pool.alloc(4000).unwrap();
    assert!(again.addr == a.addr || again.addr == b.addr);
}

#[test]
fn a_request_no_class_serves_may_take_a_cached_block_of_the_next_class() {
    let pool = HybridPool::new(Arc::new(SimDevice::default()), given(&[(4 * KIB, 2), (MIB, 1)])).unwrap();
    // A 4 KiB block exceeds 3 KiB by a third: over the 12.5% bound, within the cached bound (50%).
    let uncached = pool.alloc(3 * KIB).unwrap();
    assert_eq!(pool.stats().fallback_reasons.get("no-class"), Some(&1), "no block is carved for it");
    let block = pool.alloc(4 * KIB).unwrap();
    pool.free(block.addr).unwrap();
    let taken = pool.alloc(3 * KIB).unwrap();
    assert_eq!(taken.addr, block.addr, "the cached 4 KiB block serves it");
    let stats = pool.stats();
    assert_eq!((stats.fallbacks, stats.allocated_bytes.current), (1, 6 * KIB));
    let report = pool.report();
    let listed = report.blocks.iter().find(|b| b.addr == taken.addr).unwrap();
    assert_eq!((listed.size, listed.block_size, listed.fallback), (3 * KIB, 4 * KIB, false));
    assert_eq!(report.classes[0].live_blocks, 1);
    // A 4 KiB block would double 2 KiB: beyond the cached bound too.
    pool.free(taken.addr).unwrap();
    let small = pool.alloc(2 * KIB).unwrap();
    assert_ne!(small.addr, block.addr);
    assert_eq!(pool.stats().fallback_reasons.get("no-class"), Some(&2));
    // Freed, the block is its class's again.
    assert_eq!(pool.alloc(4 * KIB).unwrap().addr, block.addr);
    for x in [uncached, small] {
        pool.free(x.addr).unwrap();
    }
}

#[test]
fn a_cached_block_another_stream_freed_is_not_taken_for_a_request_no_class_serves() {
    let pool = HybridPool::new(Arc::new(SimDevice::default()), given(&[(4 * KIB, 2)])).unwrap();
    let block = pool.allocate(4 * KIB, 256, StreamId(1)).unwrap();
    pool.free(block.addr).unwrap();
    let other = pool.allocate(3 * KIB, 256, StreamId(2)).unwrap();
    assert_ne!(other.addr, block.addr, "reuse on another stream would need ordering: the region serves it");
    assert_eq!(pool.stats().fallback_reasons.get("no-class"), Some(&1));
    assert_eq!(pool.allocate(3 * KIB, 256, StreamId(1)).unwrap().addr, block.addr, "the block stayed cached");
}

#[test]
fn a_cached_waste_bound_within_the_rounding_bound_turns_cached_blocks_off() {
    let config = given(&[(4 * KIB, 2)]).max_cached_waste(0.1);
    let pool = HybridPool::new(Arc::new(SimDevice::default()), config).unwrap();
    let block = pool.alloc(4 * KIB).unwrap();
    pool.free(block.addr).unwrap();
    assert_ne!(pool.alloc(3 * KIB).unwrap().addr, block.addr);
    assert_eq!(pool.stats().fallback_reasons.get("no-class"), Some(&1));
}

#[test]
fn classes_are_learned_at_the_end_of_warm_up() {
    let config = HybridConfig::default().warmup_requests(100).deterministic(true).dynamic(region(VirtualMemory::Auto));
    let pool = HybridPool::new(Arc::new(SimDevice::default()), config).unwrap();
    // Warm-up: 70 requests of 8 KiB (10 live at most), 25 of 1 MiB (all live), 5 odd sizes.
    let mut held = Vec::new();
    for i in 0..70 {
        let a = pool.alloc(8 * KIB).unwrap();
        if i % 10 == 9 {
            held.push(a);
        } else {
            pool.free(a.addr).unwrap();
        }
    }
    for _ in 0..25 {
        held.push(pool.alloc(MIB).unwrap());
    }
    assert!(pool.learned_classes().is_none());
    for i in 0..5u64 {
        held.push(pool.alloc(100_000 * (i + 1) * 3).unwrap());
    }
    let learned = pool.learned_classes().expect("learned at the 100th request").clone();
    let sizes: Vec<u64> = learned.classes.iter().map(|c| c.block_size).collect();
    assert_eq!(sizes, vec![8 * KIB, MIB]);
    assert!((learned.coverage - 0.95).abs() < 1e-9);
    // Slabs hold twice the most blocks seen live at once (the default headroom): 7 and 25.
    assert_eq!((learned.classes[0].block_count, learned.classes[1].block_count), (14, 50));
    assert_eq!(pool.stats().fallback_reasons.get("warm-up"), Some(&100));
    // After warm-up the classed sizes go to the core.
    let fallbacks = pool.stats().fallbacks;
    let x = pool.alloc(8 * KIB).unwrap();
    let y = pool.alloc(MIB).unwrap();
    assert_eq!(pool.stats().fallbacks, fallbacks);
    assert_eq!(pool.freeze(), learned, "freezing again changes nothing");
    for a in held.into_iter().chain([x, y]) {
        pool.free(a.addr).unwrap();
    }
    assert_eq!(pool.stats().allocated_bytes.current, 0);
}

#[test]
fn by_default_classes_are_learned_up_to_4_mib_and_larger_requests_go_to_the_region() {
    let config = HybridConfig::default().warmup_requests(40).deterministic(true).dynamic(region(VirtualMemory::Auto));
    let pool = HybridPool::new(Arc::new(SimDevice::default()), config).unwrap();
    // Warm-up: 20 requests of 3 MiB and 20 of 5 MiB, two of each live at a time.
    for _ in 0..10 {
        let held = [3 * MIB, 3 * MIB, 5 * MIB, 5 * MIB].map(|size| pool.alloc(size).unwrap());
        for a in held {
            pool.free(a.addr).unwrap();
        }
    }
    let learned = pool.learned_classes().expect("learned at the 40th request").clone();
    let sizes: Vec<u64> = learned.classes.iter().map(|c| c.block_size).collect();
    assert_eq!(sizes, vec![3 * MIB], "5 MiB is above the largest class");
    let fallbacks = pool.stats().fallbacks;
    let classed = pool.alloc(3 * MIB).unwrap();
    assert_eq!(pool.stats().fallbacks, fallbacks, "3 MiB is served by its class");
    let large = pool.alloc(5 * MIB).unwrap();
    assert_eq!(pool.stats().fallbacks, fallbacks + 1);
    assert_eq!(pool.stats().fallback_reasons.get("no-class"), Some(&1));
    pool.free(classed.addr).unwrap();
    pool.free(large.addr).unwrap();
    assert_eq!(pool.stats().allocated_bytes.current, 0);
}

#[test]
fn freeze_ends_warm_up_early() {
    let config =
        HybridConfig::default().max_rounding_waste(0.125).deterministic(true).dynamic(region(VirtualMemory::Off));
    let pool = HybridPool::new(Arc::new(SimDevice::default()), config).unwrap();
    for _ in 0..10 {
        let a = pool.alloc(64 * KIB).unwrap();
        pool.free(a.addr).unwrap();
    }
    let learned = pool.freeze();
    assert_eq!(learned.classes, vec![ClassSpec { block_size: 64 * KIB, block_count: 2 }]);
    let before = pool.stats().fallbacks;
    let a = pool.alloc(60 * KIB).unwrap();
    assert_eq!(pool.stats().fallbacks, before, "served by the learned class");
    pool.free(a.addr).unwrap();
}

#[test]
fn the_watermark_triggers_once_per_crossing() {
    let pool = HybridPool::new(Arc::new(SimDevice::default()), given(&[(64 * KIB, 100)])).unwrap();
    let reserved = pool.stats().reserved_bytes.current;
    let mut held: Vec<_> = (0..79).map(|_| pool.alloc(64 * KIB).unwrap()).collect();
    assert_eq!(pool.watermark_crossings(), 0, "79% is below the watermark");
    held.extend((0..21).map(|_| pool.alloc(64 * KIB).unwrap()));
    assert_eq!(pool.watermark_crossings(), 1);
    let stats = pool.stats();
    assert_eq!(stats.pre_expansions, 1);
    assert!(stats.reserved_bytes.current > reserved, "the region grew ahead of need");
    // Back below, then past again: a second crossing.
    for a in held.drain(40..) {
        pool.free(a.addr).unwrap();
    }
    assert_eq!(pool.watermark_crossings(), 1);
    held.extend((0..50).map(|_| pool.alloc(64 * KIB).unwrap()));
    assert_eq!(pool.watermark_crossings(), 2);
    assert_eq!(pool.stats().pre_expansions, 2);
    for a in held {
        pool.free(a.addr).unwrap();
    }
}

#[test]
fn a_large_core_passes_the_watermark_within_a_32nd_of_its_blocks() {
    let pool = HybridPool::new(Arc::new(SimDevice::default()), given(&[(4 * KIB, 1000)])).unwrap();
    let mut held: Vec<_> = (0..800).map(|_| pool.alloc(4 * KIB).unwrap()).collect();
    assert_eq!(pool.watermark_crossings(), 0, "80% is not past the watermark");
    held.extend((0..1000 / 32).map(|_| pool.alloc(4 * KIB).unwrap()));
    assert_eq!(pool.watermark_crossings(), 1, "past it by a 32nd of the core: checked by now");
    for a in held {
        pool.free(a.addr).unwrap();
    }
}

/// A device whose memory calls wait at a gate while the gate is shut.
#[derive(Debug)]
struct GatedDevice {
    inner: SimDevice,
    gate: Mutex<(bool, u64)>,
    opened: Condvar,
}

impl GatedDevice {
    fn wait(&self) {
        let mut gate = self.gate.lock().unwrap();
        if gate.0 {
            gate.1 += 1;
            self.opened.notify_all();
            while gate.0 {
                gate = self.opened.wait(gate).unwrap();
            }
        }
    }

    fn set_shut(&self, shut: bool) {
        self.gate.lock().unwrap().0 = shut;
        self.opened.notify_all();
    }

    fn wait_for_a_waiter(&self) {
        let mut gate = self.gate.lock().unwrap();
        while gate.1 == 0 {
            gate = self.opened.wait(gate).unwrap();
        }
    }
}

impl Backend for GatedDevice {
    fn name(&self) -> String {
        "gated".into()
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn allocate_segment(&self, size: u64) -> vrampool::Result<DeviceAddr> {
        self.wait();
        self.inner.allocate_segment(size)
    }
    fn free_segment(&self, addr: DeviceAddr, size: u64) -> vrampool::Result<()> {
        self.inner.free_segment(addr, size)
    }
    fn record_event(&self, stream: StreamId) -> vrampool::Result<EventId> {
        self.inner.record_event(stream)
    }
    fn event_complete(&self, event: EventId) -> vrampool::Result<bool> {
        self.inner.event_complete(event)
    }
    fn stream_wait_event(&self, stream: StreamId, event: EventId) -> vrampool::Result<()> {
        self.inner.stream_wait_event(stream, event)
    }
    fn release_event(&self, event: EventId) {
        self.inner.release_event(event)
    }
    fn synchronize(&self) -> vrampool::Result<()> {
        self.inner.synchronize()
    }
}

#[test]
fn the_watermark_never_blocks_an_allocation() {
    let device =
        Arc::new(GatedDevice { inner: SimDevice::default(), gate: Mutex::new((false, 0)), opened: Condvar::new() });
    let config = given(&[(64 * KIB, 10)]).deterministic(false);
    let pool = HybridPool::new(device.clone(), config).unwrap();
    device.set_shut(true);
    // Nine of ten blocks: past the watermark; the worker's growth now waits at the gate.
    let mut held: Vec<_> = (0..9).map(|_| pool.alloc(64 * KIB).unwrap()).collect();
    device.wait_for_a_waiter();
    assert_eq!(pool.watermark_crossings(), 1);
    // Allocations go on while the worker is stuck: the last core block, then the region's memory.
    held.push(pool.alloc(64 * KIB).unwrap());
    held.push(pool.alloc(64 * KIB).unwrap());
    held.push(pool.alloc(MIB).unwrap());
    assert_eq!(pool.stats().pre_expansions, 0, "the worker has not finished");
    device.set_shut(false);
    while pool.stats().pre_expansions == 0 {
        std::thread::yield_now();
    }
    for a in held {
        pool.free(a.addr).unwrap();
    }
    // Dropping the pool stops the worker (the test would hang otherwise).
    drop(pool);
}

/// A hybrid of one class of 64 blocks of 32 KiB over a region of host memory capped at `cap`, on pages of
/// `page` bytes (on segments of 2 MiB where `None`), whose 64 blocks were all carved and the first 32 freed
/// (cached again): the 32 free blocks lie side by side, 1 MiB. Returns the device, the pool and the blocks,
/// each filled with its index.
fn half_cached_class(
    page: Option<u64>,
    cap: u64,
    drain_before_growth: bool,
) -> (Arc<HostMemory>, HybridPool, Vec<vrampool::Allocation>) {
    let host = Arc::new(HostMemory::new(HostMemoryConfig::default().capacity(256 * MIB).granularity(page)));
    let virtual_memory = if page.is_some() { VirtualMemory::Auto } else { VirtualMemory::Off };
    let region = DynamicConfig::default()
        .initial_size(0)
        .growth_factor(1.01)
        .cap(Cap::Bytes(cap))
        .virtual_memory(virtual_memory);
    let config = HybridConfig::default()
        .classes(vec![ClassSpec { block_size: 32 * KIB, block_count: 64 }])
        .watermark(1.0)
        .deterministic(true)
        .drain_before_growth(drain_before_growth)
        .dynamic(region);
    let pool = HybridPool::new(host.clone(), config).unwrap();
    // Classes hold no memory until their blocks are first used.
    assert_eq!(pool.stats().reserved_bytes.current, 0);
    let blocks: Vec<_> = (0..64).map(|_| pool.alloc(32 * KIB).unwrap()).collect();
    assert_eq!(pool.stats().reserved_bytes.current, 2 * MIB);
    for (i, b) in blocks.iter().enumerate() {
        host.fill(b.addr, b.size, i as u64).unwrap();
    }
    for b in &blocks[..32] {
        pool.free(b.addr).unwrap();
    }
    (host, pool, blocks)
}

#[test]
fn by_default_cached_class_blocks_stay_cached_while_the_region_may_grow() {
    let g = 64 * KIB;
    let (host, pool, blocks) = half_cached_class(Some(64 * KIB), 64 * MIB, false);
    // A 1 MiB request that no class serves: the region grows, and the class keeps its free blocks.
    let growths = pool.stats().growths;
    let big = pool.alloc(16 * g).unwrap();
    host.fill(big.addr, big.size, 0xB1).unwrap();
    let stats = pool.stats();
    assert_eq!(stats.reserved_bytes.current, 48 * g, "{stats:?}");
    assert_eq!(stats.growths, growths + 1, "{stats:?}");
    // The class serves its next 32 requests from those blocks, carving none.
    let hits = pool.core_hits();
    let again: Vec<_> = (0..32).map(|_| pool.alloc(32 * KIB).unwrap()).collect();
    assert_eq!(pool.core_hits(), hits + 32);
    let mut reused: Vec<u64> = again.iter().map(|a| a.addr).collect();
    let mut freed: Vec<u64> = blocks[..32].iter().map(|b| b.addr).collect();
    reused.sort_unstable();
    freed.sort_unstable();
    assert_eq!(reused, freed);
    for (i, b) in blocks.iter().enumerate().skip(32) {
        host.check(b.addr, b.size, i as u64).unwrap();
    }
    host.check(big.addr, big.size, 0xB1).unwrap();
    for a in again.iter().chain(&blocks[32..]).chain([&big]) {
        pool.free(a.addr).unwrap();
    }
    assert_eq!(pool.trim().unwrap(), 48 * g);
    assert_eq!(host.used_bytes(), 0);
}

/// With the region at `cap` on pages of `page` bytes (segments of 2 MiB where `None`), a 1 MiB request that
/// no class serves cannot be grown, and fits where the half-cached class's free blocks are: they go back,
/// with no new memory and no out-of-memory answer counted; the next such request, with nothing left to give
/// back, is a clear out-of-memory answer, counted once.
fn cached_class_blocks_go_back_at_the_cap(page: Option<u64>, cap: u64) {
    let (host, pool, blocks) = half_cached_class(page, cap, false);
    let big = pool.alloc(MIB).unwrap();
    host.fill(big.addr, big.size, 0xB1).unwrap();
    let stats = pool.stats();
    assert_eq!((stats.reserved_bytes.current, stats.ooms), (2 * MIB, 0), "{stats:?}");
    assert!(blocks[..32].iter().any(|b| b.addr == big.addr), "the request took the cached blocks' place");
    for (i, b) in blocks.iter().enumerate().skip(32) {
        host.check(b.addr, b.size, i as u64).unwrap();
    }
    let err = pool.alloc(MIB).unwrap_err();
    assert!(err.is_out_of_memory(), "{err}");
    assert_eq!(pool.stats().ooms, 1);
    for a in blocks[32..].iter().chain([&big]) {
        pool.free(a.addr).unwrap();
    }
    assert_eq!(pool.trim().unwrap(), 2 * MIB);
    assert_eq!(host.used_bytes(), 0);
}

#[test]
fn at_the_cap_cached_class_blocks_go_back_before_a_request_fails() {
    // Pages of 64 KiB, room for 8 more: the 1 MiB request's 16 cannot be grown.
    cached_class_blocks_go_back_at_the_cap(Some(64 * KIB), 40 * 64 * KIB);
}

#[test]
fn at_the_cap_cached_class_blocks_go_back_before_a_request_fails_on_segments() {
    // Segments of 2 MiB: the class's 64 blocks of 32 KiB fill the first; a cap of 3 MiB refuses a second.
    cached_class_blocks_go_back_at_the_cap(None, 3 * MIB);
}

#[test]
fn cached_class_blocks_go_back_to_the_region_before_it_grows() {
    let g = 64 * KIB;
    let (host, pool, blocks) = half_cached_class(Some(g), 64 * MIB, true);
    // Freed class blocks stay cached and are reused at once.
    let again = pool.alloc(32 * KIB).unwrap();
    assert!(blocks[..32].iter().any(|b| b.addr == again.addr));
    assert_eq!(pool.core_hits(), 1);
    pool.free(again.addr).unwrap();
    // A 1 MiB request that no class serves: rather than grow, the region takes the cached blocks back.
    let growths = pool.stats().growths;
    let big = pool.alloc(16 * g).unwrap();
    host.fill(big.addr, big.size, 0xB1).unwrap();
    let stats = pool.stats();
    assert_eq!(stats.reserved_bytes.current, 32 * g, "no new memory: {stats:?}");
    assert_eq!(stats.growths, growths);
    for (i, b) in blocks.iter().enumerate().skip(32) {
        host.check(b.addr, b.size, i as u64).unwrap();
    }
    // The class carves new blocks from the region when it needs them again.
    let more: Vec<_> = (0..32).map(|_| pool.alloc(32 * KIB).unwrap()).collect();
    for a in &more {
        host.fill(a.addr, a.size, 7).unwrap();
    }
    host.check(big.addr, big.size, 0xB1).unwrap();
    assert_eq!(pool.stats().reserved_bytes.current, 48 * g);
    assert_eq!(pool.report().classes[0].live_blocks, 64);
    for a in more.iter().chain(&blocks[32..]).chain([&big]) {
        pool.free(a.addr).unwrap();
    }
    // Trim gives back every cached block and idle page.
    assert_eq!(pool.trim().unwrap(), 48 * g);
    assert_eq!(host.used_bytes(), 0);
    let a = pool.alloc(32 * KIB).unwrap();
    host.fill(a.addr, a.size, 1).unwrap();
    pool.free(a.addr).unwrap();
}

/// The blocks carved for the classes are the region's memory but not its live allocations: its report lists
/// only the requests it served itself, a free of a class block's address through the region is refused, and
/// the region still counts the carved bytes as allocated until the classes give them back.
#[test]
fn carved_class_blocks_are_not_the_regions_live_allocations() {
    let pool = HybridPool::new(Arc::new(SimDevice::default()), given(&[(64 * KIB, 4)])).unwrap();
    let class_block = pool.alloc(64 * KIB).unwrap();
    let own = pool.alloc(MIB).unwrap();
    let region = pool.dynamic_region();
    let listed: Vec<_> = region.report().blocks.iter().map(|b| b.addr).collect();
    assert_eq!(listed, [own.addr], "only the region's own request");
    assert_eq!(region.stats().allocated_bytes.current, 64 * KIB + MIB, "the carved block is the region's memory");
    let before = region.stats();
    let err = region.free(class_block.addr).unwrap_err();
    assert!(matches!(err, vrampool::Error::NotLive { addr } if addr == class_block.addr), "{err}");
    assert_eq!(region.stats(), before, "a refused free changes nothing");
    pool.free(class_block.addr).unwrap();
    pool.free(own.addr).unwrap();
    assert_eq!(region.stats().allocated_bytes.current, 64 * KIB, "the class still holds its block, cached");
    pool.trim().unwrap();
    assert_eq!(region.stats().allocated_bytes.current, 0, "the cached block went back with the trim");
}

/// A class given more blocks than the device could ever hold is refused, at once and before the region
/// reserves anything: a billion 1 MiB blocks would need 16 GB of host memory for their records. One that
/// fits the device but not the region's cap gets the blocks that fit in the cap, not a record for each
/// block it asked for.
#[test]
fn a_class_holds_no_more_blocks_than_the_cap_fits() {
    let device = Arc::new(SimDevice::default());
    let err = HybridPool::new(device.clone(), given(&[(MIB, 1_000_000_000), (4 * KIB, 8)])).unwrap_err();
    assert!(matches!(&err, vrampool::Error::InvalidConfig { field: "classes", .. }), "{err}");
    assert_eq!(device.counters().ranges_reserved + device.counters().segments_allocated, 0);
    let pool = HybridPool::new(Arc::new(SimDevice::default()), given(&[(MIB, 100_000), (4 * KIB, 8)])).unwrap();
    let classes = pool.classes();
    assert_eq!(
        classes,
        vec![ClassSpec { block_size: 4 * KIB, block_count: 8 }, ClassSpec { block_size: MIB, block_count: 512 }]
    );
    let blocks: Vec<_> = (0..4).map(|_| pool.alloc(MIB).unwrap()).collect();
    assert_eq!(pool.stats().fallbacks, 0, "the class serves its requests");
    for block in blocks {
        pool.free(block.addr).unwrap();
    }
    let spec: vrampool::PoolSpec = "strategy=hybrid,classes=256x400000000,cap=1GiB".parse().unwrap();
    let pool = spec.build_any(Arc::new(SimDevice::default())).unwrap();
    let vrampool::AnyPool::Hybrid(pool) = pool else { panic!("a hybrid") };
    assert_eq!(pool.classes(), vec![ClassSpec { block_size: 256, block_count: 4 * 1024 * 1024 }]);
    let spec: vrampool::PoolSpec = "strategy=hybrid,classes=256x4294967294,cap=1GiB".parse().unwrap();
    let err = spec.build_any(Arc::new(SimDevice::default())).err().unwrap();
    assert!(err.to_string().contains("classes = 256x4294967294"), "{err}");
}

/// A steady churn of sizes that classes and region share must settle: once the chunks moved since the last
/// growth add up to a growth step, the region grows instead of moving more, so moves (a device call each,
/// hundreds of microseconds on a GPU) stop rather than recur every few dozen operations.
#[test]
fn a_steady_churn_stops_moving_chunks() {
    let device = Arc::new(SimDevice::default());
    let pool = HybridPool::new(device.clone(), HybridConfig::default().max_rounding_waste(0.125)).unwrap();
    // Log-uniform sizes from 256 B to 8 MiB (a xorshift generator: the test needs no crate for it).
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (low, high) = ((256f64).ln(), ((8 * MIB) as f64).ln());
    let mut draw = move || {
        let r = next();
        let size = (low + (r >> 11) as f64 / (1u64 << 53) as f64 * (high - low)).exp() as u64;
        (size, (r % 500) as usize)
    };
    let mut live: Vec<u64> = (0..500).map(|_| pool.alloc(draw().0).unwrap().addr).collect();
    let mut churn = |ops: usize| {
        for _ in 0..ops {
            let (size, victim) = draw();
            pool.free(live[victim]).unwrap();
            live[victim] = pool.alloc(size).unwrap().addr;
        }
    };
    churn(40_000);
    let before = device.counters();
    churn(40_000);
    let after = device.counters();
    let remaps = after.remap_calls - before.remap_calls;
    assert!(remaps <= 40, "{remaps} remap calls in 40,000 operations of a settled churn");
    let stats = pool.stats();
    let (reserved, peak) = (stats.reserved_bytes.current, stats.allocated_bytes.peak);
    assert!(reserved < 2 * peak, "moves traded for memory within bounds: {reserved} reserved, {peak} peak live");
}

/// A thread per stream: a block one thread frees for another thread's stream goes back to that thread,
/// which reuses it on its stream with no event, while the freeing thread reuses its own.
#[test]
fn a_block_freed_by_another_thread_returns_to_its_streams_thread_without_an_event() {
    let pool = HybridPool::new(Arc::new(SimDevice::default()), given(&[(4096, 8)])).unwrap();
    common::blocks_freed_for_another_threads_stream_return_to_it(Arc::new(pool));
}
