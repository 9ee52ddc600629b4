//! A limit set at run time (PyTorch's per-process memory fraction) and peaks started again (PyTorch's
//! `reset_peak_memory_stats`), on every strategy.

use std::sync::Arc;

use vrampool::{
    Cap, DynamicConfig, DynamicPool, Error, FixedConfig, FixedPool, HybridConfig, HybridPool, MIB, Pool, PoolExt,
    SimDevice,
};

fn sim() -> Arc<SimDevice> {
    Arc::new(SimDevice::default())
}

fn dynamic(cap: u64) -> DynamicPool {
    DynamicPool::new(sim(), DynamicConfig::default().initial_size(64 * MIB).cap(Cap::Bytes(cap))).unwrap()
}

fn hybrid(cap: u64) -> HybridPool {
    let config = HybridConfig::default();
    let region = config.dynamic.clone().initial_size(64 * MIB).cap(Cap::Bytes(cap));
    HybridPool::new(sim(), HybridConfig { dynamic: region, ..config }).unwrap()
}

fn refused_at(pool: &dyn Pool, size: u64) -> u64 {
    match pool.alloc(size) {
        Err(Error::OutOfMemory { cap, .. }) => cap,
        other => panic!("{size} bytes under a limit: {other:?}"),
    }
}

#[test]
fn a_limit_caps_growth_until_lifted() {
    let pools: [Box<dyn Pool>; 2] = [Box::new(dynamic(1024 * MIB)), Box::new(hybrid(1024 * MIB))];
    for pool in &pools {
        assert_eq!(pool.set_limit(Some(300 * MIB)).unwrap(), 300 * MIB);
        assert_eq!(refused_at(&**pool, 400 * MIB), 300 * MIB, "{}", pool.strategy());
        let a = pool.alloc(200 * MIB).unwrap();
        assert!(pool.stats().reserved_bytes.current <= 300 * MIB);
        assert_eq!(pool.set_limit(None).unwrap(), 1024 * MIB, "the configured cap again");
        let b = pool.alloc(400 * MIB).unwrap();
        pool.free(a.addr).unwrap();
        pool.free(b.addr).unwrap();
    }
}

#[test]
fn a_limit_may_pass_the_configured_cap_up_to_what_the_pool_can_hold() {
    // A virtual range is twice the cap: a limit above that is clamped to the range.
    let pool = dynamic(512 * MIB);
    assert_eq!(pool.set_limit(Some(768 * MIB)).unwrap(), 768 * MIB);
    let a = pool.alloc(700 * MIB).unwrap();
    assert_eq!(pool.set_limit(Some(1 << 50)).unwrap(), 1024 * MIB, "clamped to the reserved range");
    pool.free(a.addr).unwrap();
}

#[test]
fn a_lowered_limit_keeps_what_is_held_but_refuses_growth() {
    let pool = dynamic(1024 * MIB);
    let a = pool.alloc(500 * MIB).unwrap();
    pool.set_limit(Some(100 * MIB)).unwrap();
    assert!(pool.stats().reserved_bytes.current >= 500 * MIB, "nothing is taken away");
    assert_eq!(refused_at(&pool, 600 * MIB), 100 * MIB);
    pool.free(a.addr).unwrap();
}

#[test]
fn a_fixed_pools_limit_bounds_its_fallback_segments() {
    let pool = FixedPool::new(sim(), FixedConfig::default().block_size(MIB).block_count(16)).unwrap();
    let big = pool.alloc(64 * MIB).unwrap();
    pool.free(big.addr).unwrap();
    pool.set_limit(Some(40 * MIB)).unwrap();
    assert_eq!(refused_at(&pool, 64 * MIB), 40 * MIB);
    let small = pool.alloc(8 * MIB).unwrap();
    pool.free(small.addr).unwrap();
    pool.set_limit(None).unwrap();
    pool.free(pool.alloc(64 * MIB).unwrap().addr).unwrap();
}

#[test]
fn peaks_start_again_from_now() {
    let pools: [Box<dyn Pool>; 3] = [
        Box::new(dynamic(1024 * MIB)),
        Box::new(hybrid(1024 * MIB)),
        Box::new(FixedPool::new(sim(), FixedConfig::default().block_size(MIB).block_count(256)).unwrap()),
    ];
    for pool in &pools {
        let big: Vec<_> = (0..40).map(|_| pool.alloc(MIB).unwrap()).collect();
        let small = pool.alloc(4096).unwrap();
        big.iter().for_each(|a| pool.free(a.addr).unwrap());
        let before = pool.stats();
        assert!(before.allocated_bytes.peak >= 40 * MIB, "{}", pool.strategy());
        pool.reset_peaks();
        let after = pool.stats();
        assert_eq!(after.allocated_bytes.peak, 4096, "{}: the peak is what is live now", pool.strategy());
        assert_eq!(after.reserved_bytes.peak, after.reserved_bytes.current, "{}", pool.strategy());
        let again = pool.alloc(2 * MIB).unwrap();
        assert_eq!(pool.stats().allocated_bytes.peak, 4096 + 2 * MIB, "{}", pool.strategy());
        pool.free(again.addr).unwrap();
        pool.free(small.addr).unwrap();
    }
}
