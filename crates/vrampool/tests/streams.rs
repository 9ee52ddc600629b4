//! Stream-ordered reuse on every pool: at once on the freeing stream, after the free's event elsewhere.

mod common;

use std::sync::Arc;

use vrampool::{
    Cap, ClassSpec, DynamicConfig, DynamicPool, FixedConfig, FixedPool, HybridConfig, HybridPool, MIB, Pool, SimDevice,
    StreamId, VirtualMemory,
};

const S1: StreamId = StreamId(0x1000);
const S2: StreamId = StreamId(0x2000);

fn pools(device: &Arc<SimDevice>) -> Vec<Arc<dyn Pool>> {
    let dynamic = |mode| DynamicConfig::default().initial_size(4 * MIB).cap(Cap::Bytes(64 * MIB)).virtual_memory(mode);
    vec![
        Arc::new(FixedPool::new(device.clone(), FixedConfig::default().block_size(MIB).block_count(4)).unwrap()),
        Arc::new(DynamicPool::new(device.clone(), dynamic(VirtualMemory::Off)).unwrap()),
        Arc::new(DynamicPool::new(device.clone(), dynamic(VirtualMemory::Auto)).unwrap()),
        // A class serves the 4 KiB requests: the core's cached blocks follow the same rules.
        Arc::new(
            HybridPool::new(
                device.clone(),
                HybridConfig {
                    classes: vec![ClassSpec { block_size: 4096, block_count: 4 }],
                    deterministic: true,
                    dynamic: dynamic(VirtualMemory::Auto),
                    ..HybridConfig::default()
                },
            )
            .unwrap(),
        ),
    ]
}

#[test]
fn reuse_on_the_same_stream_needs_nothing() {
    let device = Arc::new(SimDevice::default());
    for pool in pools(&device) {
        device.hold_stream(S1);
        let a = pool.allocate(4096, 256, S1).unwrap();
        pool.free(a.addr).unwrap();
        let b = pool.allocate(4096, 256, S1).unwrap();
        assert_eq!(b.addr, a.addr, "{}: reused at once", pool.strategy());
        pool.free(b.addr).unwrap();
        assert_eq!(pool.stats().events_recorded, 0, "{}", pool.strategy());
        assert!(device.stream_waits().is_empty());
        device.release_stream(S1);
    }
}

/// A block freed on S1 while S1 is still busy is handed to S2 only behind an event on S1, whether the
/// free came before or after the pool first saw S2.
#[test]
fn reuse_on_another_stream_waits_for_the_freeing_stream() {
    for pool_index in 0..pools(&Arc::new(SimDevice::default())).len() {
        let device = Arc::new(SimDevice::default());
        let pool = pools(&device).swap_remove(pool_index);
        let name = pool.strategy();
        device.hold_stream(S1);

        // Freed while the pool knew one stream: no event at the free, one recorded at the reuse.
        let a = pool.allocate(4096, 256, S1).unwrap();
        pool.free(a.addr).unwrap();
        assert_eq!(pool.stats().events_recorded, 0);
        let b = pool.allocate(4096, 256, S2).unwrap();
        assert_eq!(b.addr, a.addr, "{name}");
        let waits = device.stream_waits();
        assert_eq!(waits.len(), 1, "{name}: {waits:?}");
        assert_eq!(waits[0].0, S2);
        assert_eq!(device.event_state(waits[0].1), Some((S1, false)), "{name}: waits on S1's pending work");

        // Freed with two streams known: still no event at the free; the reuse on S2 records one after it.
        let c = pool.allocate(4096, 256, S1).unwrap();
        pool.free(c.addr).unwrap();
        assert_eq!(pool.stats().events_recorded, 1, "{name}: a free records nothing");
        let e = pool.allocate(4096, 256, S2).unwrap();
        assert_eq!(e.addr, c.addr, "{name}");
        assert_eq!(pool.stats().events_recorded, 2, "{name}");
        let waits = device.stream_waits();
        assert_eq!(waits.len(), 2, "{name}: {waits:?}");
        assert_eq!((waits[1].0, device.event_state(waits[1].1)), (S2, Some((S1, false))), "{name}");
        pool.free(e.addr).unwrap();
        pool.free(b.addr).unwrap();
        device.release_stream(S1);
        // S1's events are complete now, and S2 freed these blocks last: S2 reuses without waiting.
        let d = pool.allocate(4096, 256, S2).unwrap();
        assert_eq!(device.stream_waits().len(), 2, "{name}: no new wait once S1 has run");
        pool.free(d.addr).unwrap();
        assert_eq!(pool.stats().stream_waits, 2);
    }
}

/// A reuse across streams whose event the device refuses waits for the whole device instead; where that
/// fails too, the allocation fails and the block stays free for the next one.
#[test]
fn a_failed_event_falls_back_to_a_synchronization_and_a_failed_one_leaves_the_pool_as_it_was() {
    for pool_index in 0..pools(&Arc::new(SimDevice::default())).len() {
        let device = Arc::new(SimDevice::default());
        let pool = pools(&device).swap_remove(pool_index);
        let name = pool.strategy();
        let s2 = pool.allocate(256, 256, S2).unwrap();
        let a = pool.allocate(4096, 256, S1).unwrap();
        let calls = device.counters();
        pool.free(a.addr).unwrap();
        assert_eq!(device.counters(), calls, "{name}: a free calls nothing");
        device.set_faults(vrampool::FaultPlan::fail_call(1));
        let b = pool.allocate(4096, 256, S2).unwrap();
        assert_eq!(b.addr, a.addr, "{name}");
        assert_eq!(pool.stats().synchronizations, 1, "{name}: the device was waited for instead");
        pool.free(b.addr).unwrap();

        let c = pool.allocate(4096, 256, S2).unwrap();
        assert_eq!(c.addr, a.addr, "{name}");
        pool.free(c.addr).unwrap();
        let d = pool.allocate(4096, 256, S1).unwrap();
        assert_eq!(d.addr, a.addr, "{name}");
        pool.free(d.addr).unwrap();
        let live = pool.stats().allocated_bytes.current;
        device.set_faults(vrampool::FaultPlan::fail_from_call(1));
        let err = pool.allocate(4096, 256, S2).unwrap_err();
        assert!(matches!(err, vrampool::Error::InjectedFault { .. }), "{name}: {err}");
        assert_eq!(pool.stats().allocated_bytes.current, live, "{name}: nothing handed out");
        device.set_faults(vrampool::FaultPlan::none());
        let e = pool.allocate(4096, 256, S2).unwrap();
        assert_eq!(e.addr, a.addr, "{name}: the block stayed free");
        pool.free(e.addr).unwrap();
        pool.free(s2.addr).unwrap();
    }
}
