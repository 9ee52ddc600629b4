//! Pools of the simulated device and host memory each hold an address range of their own: a pointer of one
//! is foreign to every other, whatever their ordinals, and an ordinal those devices do not serve is a bad
//! argument, never a pool whose addresses wrap (to 0, which no free can name).

mod common;

use std::ffi::{CStr, CString, c_void};

use common::last_error;
use vrampool_c::{
    MAX_DEVICES, PoolHandle, SegmentInfo, Status, vrampool_last_error_code, vrampool_pool_alloc,
    vrampool_pool_create_on_device, vrampool_pool_destroy, vrampool_pool_free, vrampool_pool_visit,
};

fn create(config: &CStr, device: i32) -> *mut PoolHandle {
    // SAFETY: `config` is a NUL-terminated string.
    unsafe { vrampool_pool_create_on_device(config.as_ptr(), device) }
}

fn alloc(pool: *mut PoolHandle, size: usize) -> u64 {
    let mut addr = 0;
    // SAFETY: `addr` is a writable u64; simulated and host devices take any stream label.
    let code = unsafe { vrampool_pool_alloc(pool, size, 0, 0, &mut addr) };
    assert_eq!(code, 0, "{}", last_error());
    assert_ne!(addr, 0, "an allocation is never at address 0");
    addr
}

/// Collects each segment into the `Vec<(u64, u64)>` behind `context`.
unsafe extern "C" fn collect(context: *mut c_void, segment: *const SegmentInfo) {
    // SAFETY: the test passes a `Vec<(u64, u64)>` as the context and the library a segment valid for the
    // call.
    let (spans, segment) = unsafe { (&mut *context.cast::<Vec<(u64, u64)>>(), &*segment) };
    spans.push((segment.addr, segment.addr + segment.size));
}

/// Every stretch of addresses the pool holds.
fn segments(pool: *mut PoolHandle) -> Vec<(u64, u64)> {
    let mut spans: Vec<(u64, u64)> = Vec::new();
    // SAFETY: `collect` takes the Vec passed as the context, which outlives the call.
    let code = unsafe { vrampool_pool_visit(pool, Some(collect), None, (&raw mut spans).cast()) };
    assert_eq!(code, 0, "{}", last_error());
    spans
}

#[test]
fn pools_of_the_devices_without_a_gpu_never_share_an_address() {
    for backend in ["host", "sim"] {
        for strategy in ["dynamic", "hybrid", "fixed,block_size=1MiB,block_count=16"] {
            let config = CString::new(format!("backend={backend},strategy={strategy}")).unwrap();
            // Two pools on the same ordinal, and one on another.
            let pools = [create(&config, 0), create(&config, 0), create(&config, 5)];
            assert!(pools.iter().all(|pool| !pool.is_null()), "{}", last_error());
            let blocks: Vec<u64> = pools.iter().map(|&pool| alloc(pool, 1 << 20)).collect();
            for (i, &pool) in pools.iter().enumerate() {
                for (j, &block) in blocks.iter().enumerate() {
                    if i != j {
                        assert_eq!(
                            vrampool_pool_free(pool, block),
                            Status::ForeignAddress.code(),
                            "`{config:?}`: pool {i} took pool {j}'s pointer: {}",
                            last_error()
                        );
                    }
                }
            }
            let mut spans: Vec<(u64, u64)> = pools.iter().flat_map(|&pool| segments(pool)).collect();
            spans.sort_unstable();
            assert!(spans.windows(2).all(|pair| pair[0].1 <= pair[1].0), "`{config:?}`: {spans:x?}");
            for (&pool, &block) in pools.iter().zip(&blocks) {
                assert_eq!(vrampool_pool_free(pool, block), 0, "{}", last_error());
                vrampool_pool_destroy(pool);
            }
        }
    }
}

#[test]
fn ordinals_the_devices_without_a_gpu_do_not_serve_are_bad_arguments() {
    for backend in ["host", "sim"] {
        let config = CString::new(format!("strategy=dynamic,backend={backend}")).unwrap();
        for device in [-1, MAX_DEVICES as i32, 16777089, i32::MAX, i32::MIN] {
            assert!(create(&config, device).is_null(), "{backend} device {device}");
            assert_eq!(vrampool_last_error_code(), Status::BadArgument.code(), "{}", last_error());
            let message = last_error();
            assert!(
                message.contains(&format!("device {device} is not a device ordinal")) && message.contains("(0 to 63)"),
                "{message}"
            );
        }
        let last = create(&config, MAX_DEVICES as i32 - 1);
        assert!(!last.is_null(), "{}", last_error());
        let block = alloc(last, 1 << 20);
        assert_eq!(vrampool_pool_free(last, block), 0);
        vrampool_pool_destroy(last);
    }
}
