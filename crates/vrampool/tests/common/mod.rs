//! Shared test support: pools on the simulated device and host memory, and a shadow model that checks a
//! pool after every step.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use vrampool::{
    AdaptiveConfig, AdaptivePool, Allocation, Backend, Cap, ClassSpec, DynamicConfig, DynamicPool, Fallback,
    FixedConfig, FixedPool, HostMemory, HostMemoryConfig, HybridConfig, HybridPool, KIB, MIB, PagePolicy, Paging, Pool,
    PoolReport, PoolStats, SimDevice, SimDeviceConfig, StreamId, VirtualMemory,
};

/// The device under a pool, kept so tests can look at it.
#[derive(Clone)]
pub enum Device {
    Sim(Arc<SimDevice>),
    Host(Arc<HostMemory>),
}

impl Device {
    pub fn sim(granularity: Option<u64>) -> Self {
        Device::Sim(Arc::new(SimDevice::new(SimDeviceConfig::default().capacity(1 << 30).granularity(granularity))))
    }

    pub fn host(granularity: Option<u64>) -> Self {
        Device::Host(Arc::new(HostMemory::new(
            HostMemoryConfig::default().capacity(512 * MIB).granularity(granularity),
        )))
    }

    pub fn backend(&self) -> Arc<dyn Backend> {
        match self {
            Device::Sim(sim) => sim.clone(),
            Device::Host(host) => host.clone(),
        }
    }

    pub fn used_bytes(&self) -> u64 {
        match self {
            Device::Sim(sim) => sim.used_bytes(),
            Device::Host(host) => host.used_bytes(),
        }
    }

    pub fn host_memory(&self) -> Option<&HostMemory> {
        match self {
            Device::Host(host) => Some(host),
            Device::Sim(_) => None,
        }
    }

    pub fn set_faults(&self, plan: vrampool::FaultPlan) {
        match self {
            Device::Sim(sim) => sim.set_faults(plan),
            Device::Host(host) => host.set_faults(plan),
        }
    }
}

/// The pool shapes the tests run: small enough to exhaust, with every path reachable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// 16 blocks of 1 MiB, oversize and exhausted requests go to backend segments.
    FixedBackendFallback,
    /// 16 blocks of 768 KiB (not a power of two), oversize and exhausted requests refused.
    FixedReject,
    /// Separate segments, 4 MiB initial, capped at 96 MiB.
    DynamicSegments,
    /// One virtual range with 64 KiB chunks, 4 MiB initial, capped at 96 MiB.
    DynamicVirtual,
    /// Hybrid learning its classes from 12 warm-up requests, on a virtual range with 64 KiB chunks.
    HybridLearnedVirtual,
    /// Hybrid with given classes (4 KiB, 64 KiB, 1 MiB) on separate segments.
    HybridGivenSegments,
    /// Hybrid whose classes (4 KiB, 64 KiB, 1 MiB) can cache many blocks, on separate segments capped at
    /// 24 MiB: the region keeps taking the cached blocks back while other threads claim and free them.
    HybridDraining,
    /// A dynamic pool sizing its own pages on a virtual range with 64 KiB chunks, capped at 96 MiB.
    DynamicAdaptivePages,
    /// The adaptive pool (the default) on a virtual range with 64 KiB chunks, capped at 96 MiB.
    Adaptive,
    /// A hybrid over the adaptive pool's region (pages it sizes itself), learning its classes from 12
    /// warm-up requests and giving their free blocks back before the region grows, so that blocks carved
    /// apart for classes on such a region are exercised too.
    HybridAdaptivePages,
}

impl Shape {
    /// Every shape.
    pub const ALL: [Shape; 10] = [
        Shape::FixedBackendFallback,
        Shape::FixedReject,
        Shape::DynamicSegments,
        Shape::DynamicVirtual,
        Shape::HybridLearnedVirtual,
        Shape::HybridGivenSegments,
        Shape::HybridDraining,
        Shape::DynamicAdaptivePages,
        Shape::Adaptive,
        Shape::HybridAdaptivePages,
    ];

    pub fn granularity(self) -> Option<u64> {
        match self {
            Shape::DynamicVirtual
            | Shape::HybridLearnedVirtual
            | Shape::DynamicAdaptivePages
            | Shape::Adaptive
            | Shape::HybridAdaptivePages => Some(64 * KIB),
            _ => None,
        }
    }

    pub fn build(self, device: &Device) -> Arc<dyn Pool> {
        self.try_build(device).unwrap()
    }

    pub fn try_build(self, device: &Device) -> vrampool::Result<Arc<dyn Pool>> {
        let backend = device.backend();
        Ok(match self {
            Shape::FixedBackendFallback => {
                Arc::new(FixedPool::new(backend, FixedConfig::default().block_size(MIB).block_count(16))?)
            }
            Shape::FixedReject => Arc::new(FixedPool::new(
                backend,
                FixedConfig::default().block_size(768 * KIB).block_count(16).fallback(Fallback::Reject),
            )?),
            Shape::DynamicSegments | Shape::DynamicVirtual => Arc::new(DynamicPool::new(backend, self.dynamic())?),
            Shape::HybridLearnedVirtual => Arc::new(HybridPool::new(
                backend,
                HybridConfig::default().warmup_requests(12).deterministic(true).dynamic(self.dynamic()),
            )?),
            Shape::HybridGivenSegments => Arc::new(HybridPool::new(
                backend,
                HybridConfig::default()
                    .classes(vec![
                        ClassSpec { block_size: 4 * KIB, block_count: 8 },
                        ClassSpec { block_size: 64 * KIB, block_count: 4 },
                        ClassSpec { block_size: MIB, block_count: 4 },
                    ])
                    .deterministic(true)
                    .dynamic(self.dynamic()),
            )?),
            Shape::HybridDraining => Arc::new(HybridPool::new(
                backend,
                HybridConfig::default()
                    .classes(vec![
                        ClassSpec { block_size: 4 * KIB, block_count: 512 },
                        ClassSpec { block_size: 64 * KIB, block_count: 128 },
                        ClassSpec { block_size: MIB, block_count: 32 },
                    ])
                    .deterministic(true)
                    .dynamic(self.dynamic().cap(Cap::Bytes(24 * MIB))),
            )?),
            Shape::DynamicAdaptivePages => Arc::new(DynamicPool::new(
                backend,
                self.dynamic().initial_size(0).paging(Paging::Adaptive(PagePolicy::default())),
            )?),
            Shape::Adaptive => Arc::new(AdaptivePool::new(backend, self.adaptive())?),
            Shape::HybridAdaptivePages => Arc::new(HybridPool::new(
                backend,
                HybridConfig::default()
                    .warmup_requests(12)
                    .deterministic(true)
                    .drain_before_growth(true)
                    .watermark(1.0)
                    .dynamic(self.adaptive().region()),
            )?),
        })
    }

    /// The adaptive pool's configuration: capped at 96 MiB.
    fn adaptive(self) -> AdaptiveConfig {
        AdaptiveConfig::default().cap(Cap::Bytes(96 * MIB))
    }

    /// The dynamic pool, or the hybrid's dynamic region: 4 MiB initial, capped at 96 MiB.
    fn dynamic(self) -> DynamicConfig {
        let virtual_memory = if self.granularity().is_some() { VirtualMemory::Auto } else { VirtualMemory::Off };
        DynamicConfig::default().initial_size(4 * MIB).cap(Cap::Bytes(96 * MIB)).virtual_memory(virtual_memory)
    }
}

/// What the pool should hold, kept by the test beside it.
#[derive(Debug, Default)]
pub struct Shadow {
    pub live: BTreeMap<u64, (Allocation, u64)>,
    pub allocations: u64,
    pub frees: u64,
    pub current: u64,
    pub peak: u64,
    next_canary: u64,
}

/// The words of a block that carry its canary: the first, one every 4 KiB, and the last.
pub fn canary_words(allocation: &Allocation) -> impl Iterator<Item = u64> {
    let first = allocation.addr;
    let last = (allocation.addr + allocation.size - 1) & !7;
    (first..=last).step_by(4096).chain(std::iter::once(last))
}

impl Shadow {
    pub fn allocated(&mut self, allocation: Allocation, device: &Device) {
        self.next_canary += 1;
        let canary = 0xC0DE_0000_0000_0000 | self.next_canary;
        if let Some(host) = device.host_memory() {
            for word in canary_words(&allocation) {
                host.fill(word, 8, canary).unwrap_or_else(|e| panic!("canary write for {allocation:?}: {e}"));
            }
        }
        assert!(self.live.insert(allocation.addr, (allocation, canary)).is_none(), "address handed out twice");
        self.allocations += 1;
        self.current += allocation.size;
        self.peak = self.peak.max(self.current);
    }

    /// Frees `addr` in the pool and the shadow, checking the block's canary first.
    pub fn free(&mut self, pool: &dyn Pool, addr: u64, device: &Device) {
        let (allocation, canary) = self.live[&addr];
        if let Some(host) = device.host_memory() {
            for word in canary_words(&allocation) {
                host.check(word, 8, canary).unwrap_or_else(|e| panic!("canary of {allocation:?}: {e}"));
            }
        }
        pool.free(addr).unwrap_or_else(|e| panic!("free of {allocation:?}: {e}"));
        self.freed(addr);
    }

    /// Records a free the pool already did.
    pub fn freed(&mut self, addr: u64) {
        let (allocation, _) = self.live.remove(&addr).expect("freeing a block the shadow holds");
        self.frees += 1;
        self.current -= allocation.size;
    }

    /// Checks the pool against the shadow: blocks, sums, no overlap, every block in held memory,
    /// reserved bytes equal to what the device holds, canaries intact.
    pub fn check(&self, pool: &dyn Pool, device: &Device) {
        let report = pool.report();
        let stats = &report.stats;
        assert_eq!(stats.allocated_bytes.current, self.current, "allocated bytes");
        assert_eq!(stats.allocated_bytes.peak, self.peak, "peak allocated bytes");
        assert_eq!(stats.allocations, self.allocations, "allocations");
        assert_eq!(stats.frees, self.frees, "frees");
        assert_eq!(stats.active_allocations, self.live.len() as u64, "active allocations");
        assert_eq!(stats.reserved_bytes.current, device.used_bytes(), "reserved bytes are what the device holds");
        assert!(stats.reserved_bytes.peak >= stats.reserved_bytes.current);
        let blocks: Vec<(u64, u64)> = report.blocks.iter().map(|b| (b.addr, b.size)).collect();
        let expected: Vec<(u64, u64)> = self.live.values().map(|(a, _)| (a.addr, a.size)).collect();
        assert_eq!(blocks, expected, "live blocks");
        for pair in report.blocks.windows(2) {
            assert!(pair[0].addr + pair[0].block_size <= pair[1].addr, "blocks overlap: {pair:?}");
        }
        for block in &report.blocks {
            assert!(block.block_size >= block.size);
            assert!(
                report
                    .segments
                    .iter()
                    .any(|s| block.addr >= s.addr && block.addr + block.block_size <= s.addr + s.size),
                "block {block:?} outside every segment"
            );
        }
        if let Some(host) = device.host_memory() {
            for (allocation, canary) in self.live.values() {
                for word in canary_words(allocation) {
                    host.check(word, 8, *canary).unwrap_or_else(|e| panic!("canary of {allocation:?}: {e}"));
                }
            }
        }
    }
}

/// Everything about a pool that an erroring call must leave as it was.
pub fn snapshot(pool: &dyn Pool) -> (PoolReport, PoolStats) {
    let mut report = pool.report();
    let mut stats = report.stats.clone();
    // Refusals are counted, and the time spent deciding them; nothing else may move.
    stats.ooms = 0;
    stats.device_time_ns = 0;
    stats.wait_time_ns = 0;
    report.stats = PoolStats::default();
    (report, stats)
}

pub const S0: StreamId = StreamId::DEFAULT;

/// A thread per stream on `pool`, whose blocks of 4096 bytes come from its cache: the main thread allocates
/// on one stream, another thread on a second; the main thread frees a block of each, and each thread's next
/// allocation on its own stream must get its own block back with no event, wait or synchronisation.
pub fn blocks_freed_for_another_threads_stream_return_to_it(pool: Arc<dyn Pool>) {
    let (s1, s2) = (StreamId(0x1000), StreamId(0x2000));
    let mine = pool.allocate(4096, 256, s2).unwrap();
    let (to_main, from_owner) = std::sync::mpsc::channel();
    let (to_owner, from_main) = std::sync::mpsc::channel::<()>();
    let owner = {
        let pool = pool.clone();
        std::thread::spawn(move || {
            let theirs = pool.allocate(4096, 256, s1).unwrap();
            to_main.send(theirs.addr).unwrap();
            from_main.recv().unwrap();
            let again = pool.allocate(4096, 256, s1).unwrap();
            pool.free(again.addr).unwrap();
            again.addr
        })
    };
    let theirs = from_owner.recv().unwrap();
    pool.free(mine.addr).unwrap();
    pool.free(theirs).unwrap();
    let reused = pool.allocate(4096, 256, s2).unwrap();
    assert_eq!(reused.addr, mine.addr, "the freeing thread reuses its own stream's block");
    to_owner.send(()).unwrap();
    assert_eq!(owner.join().unwrap(), theirs, "the block went back to the thread of its stream");
    let stats = pool.stats();
    assert_eq!((stats.events_recorded, stats.stream_waits, stats.synchronizations), (0, 0, 0), "{stats:?}");
    pool.free(reused.addr).unwrap();
}
