//! Random sequences of allocations, frees and bad input, on every pool shape, on the simulated device
//! and on host memory with canaries, checked against a shadow model after every step.

mod common;

use common::{Device, Shadow, Shape, snapshot};
use proptest::prelude::*;
use vrampool::{Error, Pool, StreamId};

#[derive(Clone, Debug)]
enum Op {
    Alloc { size: u64, alignment: u64, stream: u64 },
    Free(usize),
    DoubleFree(usize),
    Interior(usize, u64),
    Foreign(u64),
    ZeroSize,
    BadAlignment(u64),
    Huge,
    Trim,
}

fn op() -> impl Strategy<Value = Op> {
    let size = prop_oneof![1u64..4096, 4096u64..(1 << 20), (1u64 << 20)..(12 << 20)];
    let alignment = prop_oneof![Just(1u64), Just(256), Just(512), Just(4096), Just(65536)];
    prop_oneof![
        8 => (size, alignment, 0u64..2).prop_map(|(size, alignment, stream)| Op::Alloc { size, alignment, stream }),
        5 => any::<usize>().prop_map(Op::Free),
        1 => any::<usize>().prop_map(Op::DoubleFree),
        1 => (any::<usize>(), 1u64..4096).prop_map(|(i, o)| Op::Interior(i, o)),
        1 => any::<u64>().prop_map(Op::Foreign),
        1 => Just(Op::ZeroSize),
        1 => (3u64..100_000).prop_filter("not a power of two", |a| !a.is_power_of_two()).prop_map(Op::BadAlignment),
        1 => Just(Op::Huge),
        1 => Just(Op::Trim),
    ]
}

/// Runs `ops` and checks after every step; bad input must leave the pool exactly as it was.
fn run(shape: Shape, device: Device, ops: &[Op]) {
    let pool = shape.build(&device);
    let mut shadow = Shadow::default();
    let mut freed: Vec<u64> = Vec::new();
    for op in ops {
        let before = snapshot(&*pool);
        let unchanged = |pool: &dyn Pool| assert_eq!(snapshot(pool), before, "{op:?} changed the pool");
        match *op {
            Op::Alloc { size, alignment, stream } => match pool.allocate(size, alignment, StreamId(stream)) {
                Ok(a) => {
                    assert_eq!(a.addr % alignment.max(256), 0, "alignment of {a:?}");
                    assert_eq!(a.size, size);
                    freed.retain(|&f| f != a.addr);
                    shadow.allocated(a, &device);
                }
                Err(Error::OutOfMemory { requested, .. }) => assert_eq!(requested, size),
                Err(Error::BlockTooSmall { .. } | Error::AlignmentTooLarge { .. }) => unchanged(&*pool),
                Err(err) => panic!("unexpected error for {op:?}: {err}"),
            },
            Op::Free(i) if !shadow.live.is_empty() => {
                let addr = *shadow.live.keys().nth(i % shadow.live.len()).unwrap();
                shadow.free(&*pool, addr, &device);
                freed.push(addr);
            }
            Op::DoubleFree(i) if !freed.is_empty() => {
                let addr = freed[i % freed.len()];
                match pool.free(addr) {
                    // The address may since lie inside a newer, larger block.
                    Err(Error::NotLive { .. } | Error::ForeignAddress { .. } | Error::InteriorAddress { .. }) => {
                        unchanged(&*pool)
                    }
                    other => panic!("second free of {addr:#x}: {other:?}"),
                }
            }
            Op::Interior(i, offset) if !shadow.live.is_empty() => {
                let (a, _) = *shadow.live.values().nth(i % shadow.live.len()).unwrap();
                let addr = a.addr + offset % a.size.max(1);
                if addr != a.addr {
                    assert_eq!(pool.free(addr), Err(Error::InteriorAddress { addr, block: a.addr }));
                    unchanged(&*pool);
                }
            }
            Op::Foreign(addr) => {
                let report = pool.report();
                if !report.segments.iter().any(|s| addr >= s.addr && addr < s.addr + s.size) {
                    assert_eq!(pool.free(addr), Err(Error::ForeignAddress { addr }));
                    unchanged(&*pool);
                }
            }
            Op::ZeroSize => {
                assert_eq!(pool.allocate(0, 256, StreamId::DEFAULT), Err(Error::ZeroSize));
                unchanged(&*pool);
            }
            Op::BadAlignment(alignment) => {
                assert_eq!(
                    pool.allocate(64, alignment, StreamId::DEFAULT),
                    Err(Error::AlignmentNotPowerOfTwo { alignment })
                );
                unchanged(&*pool);
            }
            Op::Huge => {
                assert!(matches!(pool.allocate(u64::MAX, 256, StreamId::DEFAULT), Err(Error::OutOfMemory { .. })));
                unchanged(&*pool);
            }
            Op::Trim => {
                pool.trim().unwrap();
            }
            _ => {}
        }
        shadow.check(&*pool, &device);
    }
    for addr in shadow.live.keys().copied().collect::<Vec<_>>() {
        shadow.free(&*pool, addr, &device);
    }
    shadow.check(&*pool, &device);
    drop(pool);
    assert_eq!(device.used_bytes(), 0, "a dropped pool gives everything back");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn fixed_with_backend_fallback(ops in proptest::collection::vec(op(), 1..120)) {
        let shape = Shape::FixedBackendFallback;
        run(shape, Device::sim(shape.granularity()), &ops);
        run(shape, Device::host(shape.granularity()), &ops);
    }

    #[test]
    fn fixed_with_reject(ops in proptest::collection::vec(op(), 1..120)) {
        let shape = Shape::FixedReject;
        run(shape, Device::sim(shape.granularity()), &ops);
        run(shape, Device::host(shape.granularity()), &ops);
    }

    #[test]
    fn dynamic_on_segments(ops in proptest::collection::vec(op(), 1..120)) {
        let shape = Shape::DynamicSegments;
        run(shape, Device::sim(shape.granularity()), &ops);
        run(shape, Device::host(shape.granularity()), &ops);
    }

    #[test]
    fn hybrid_learning_on_virtual_memory(ops in proptest::collection::vec(op(), 1..120)) {
        let shape = Shape::HybridLearnedVirtual;
        run(shape, Device::sim(shape.granularity()), &ops);
        run(shape, Device::host(shape.granularity()), &ops);
    }

    #[test]
    fn hybrid_with_given_classes_on_segments(ops in proptest::collection::vec(op(), 1..120)) {
        let shape = Shape::HybridGivenSegments;
        run(shape, Device::sim(shape.granularity()), &ops);
        run(shape, Device::host(shape.granularity()), &ops);
    }

    #[test]
    fn hybrid_draining_its_classes_on_segments(ops in proptest::collection::vec(op(), 1..120)) {
        let shape = Shape::HybridDraining;
        run(shape, Device::sim(shape.granularity()), &ops);
        run(shape, Device::host(shape.granularity()), &ops);
    }

    #[test]
    fn dynamic_on_virtual_memory(ops in proptest::collection::vec(op(), 1..120)) {
        let shape = Shape::DynamicVirtual;
        run(shape, Device::sim(shape.granularity()), &ops);
        run(shape, Device::host(shape.granularity()), &ops);
    }

    #[test]
    fn dynamic_sizing_its_own_pages(ops in proptest::collection::vec(op(), 1..120)) {
        let shape = Shape::DynamicAdaptivePages;
        run(shape, Device::sim(shape.granularity()), &ops);
        run(shape, Device::host(shape.granularity()), &ops);
    }

    #[test]
    fn adaptive(ops in proptest::collection::vec(op(), 1..120)) {
        let shape = Shape::Adaptive;
        run(shape, Device::sim(shape.granularity()), &ops);
        run(shape, Device::host(shape.granularity()), &ops);
    }

    #[test]
    fn hybrid_over_adaptive_pages(ops in proptest::collection::vec(op(), 1..120)) {
        let shape = Shape::HybridAdaptivePages;
        run(shape, Device::sim(shape.granularity()), &ops);
        run(shape, Device::host(shape.granularity()), &ops);
    }
}
