//! A device call that fails, at any point, leaves every pool consistent and usable.

mod common;

use common::{Device, S0, Shadow, Shape};
use vrampool::{DeviceCounters, Error, FaultPlan, Pool};

/// Every call the device counted, numbered as a fault plan numbers them.
fn calls(c: &DeviceCounters) -> u64 {
    c.memory_calls() + c.events_recorded + c.event_queries + c.stream_waits + c.synchronizations + c.failed_calls
}

fn counters(device: &Device) -> DeviceCounters {
    match device {
        Device::Sim(sim) => sim.counters(),
        Device::Host(host) => host.counters(),
    }
}

/// A fixed sequence that grows, falls back, frees, trims and grows again.
fn script() -> Vec<Option<u64>> {
    let mut ops = Vec::new();
    for round in 0..3u64 {
        for size in [3000, 700_000, 2 << 20, 5000, 9 << 20, 100, 1 << 20] {
            ops.push(Some(size + round * 4096));
        }
        ops.extend([None, None, None]);
    }
    ops
}

/// Runs the script, tolerating failed calls; frees the oldest block on `None`; trims at the end.
fn run(pool: &dyn Pool, device: &Device, shadow: &mut Shadow) {
    for op in script() {
        match op {
            Some(size) => match pool.allocate(size, 256, S0) {
                Ok(a) => shadow.allocated(a, device),
                Err(Error::InjectedFault { .. } | Error::OutOfMemory { .. } | Error::BlockTooSmall { .. }) => {}
                Err(err) => panic!("unexpected {err}"),
            },
            None => {
                if let Some(&addr) = shadow.live.keys().next() {
                    match pool.free(addr) {
                        Ok(()) => shadow.freed(addr),
                        Err(Error::InjectedFault { .. }) => {}
                        Err(err) => panic!("unexpected {err}"),
                    }
                }
            }
        }
        shadow.check(pool, device);
    }
    match pool.trim() {
        Ok(_) | Err(Error::InjectedFault { .. }) => {}
        Err(err) => panic!("unexpected {err}"),
    }
    shadow.check(pool, device);
}

#[test]
fn a_failure_at_any_call_leaves_the_pool_consistent_and_usable() {
    for shape in Shape::ALL {
        let clean = Device::host(shape.granularity());
        let pool = shape.build(&clean);
        let before = calls(&counters(&clean));
        run(&*pool, &clean, &mut Shadow::default());
        let total = calls(&counters(&clean)) - before;
        // A fixed pool that rejects what its blocks do not hold calls the device only when it is made.
        let expected_calls = if shape == Shape::FixedReject { 0..1 } else { 2..1000 };
        assert!(expected_calls.contains(&total), "{shape:?}: the script makes {total} device calls");
        for plan in (1..=total).flat_map(|n| [FaultPlan::fail_call(n), FaultPlan::fail_from_call(n)]) {
            let device = Device::host(shape.granularity());
            let pool = shape.build(&device);
            let mut shadow = Shadow::default();
            device.set_faults(plan.clone());
            run(&*pool, &device, &mut shadow);
            device.set_faults(FaultPlan::none());
            // Usable again: a fresh allocation works, and everything frees.
            let a = pool.allocate(4096, 256, S0).unwrap_or_else(|e| panic!("{shape:?} {plan:?}: {e}"));
            shadow.allocated(a, &device);
            for addr in shadow.live.keys().copied().collect::<Vec<_>>() {
                shadow.free(&*pool, addr, &device);
            }
            shadow.check(&*pool, &device);
            drop(pool);
            assert_eq!(device.used_bytes(), 0, "{shape:?} {plan:?}: memory lost");
        }
    }
}

#[test]
fn a_failure_while_a_pool_is_made_leaks_nothing() {
    for shape in Shape::ALL {
        for n in 1..=3 {
            let device = Device::host(shape.granularity());
            device.set_faults(FaultPlan::fail_call(n));
            match shape.try_build(&device) {
                Err(err) => {
                    assert!(matches!(err, Error::InjectedFault { index, .. } if index == n), "{err}");
                    assert_eq!(device.used_bytes(), 0, "{shape:?}: call {n}");
                    let c = counters(&device);
                    assert_eq!(c.ranges_reserved, c.ranges_released, "{shape:?}: call {n}");
                }
                Ok(_) => assert!(n > 1, "{shape:?}: the first call is always the pool's own"),
            }
        }
    }
}
