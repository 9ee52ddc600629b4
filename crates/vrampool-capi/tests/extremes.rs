//! Every number the C functions take, at 0, 1, 2^63 and 2^64 - 1 (and the ordinals at the ends of `int`):
//! each call answers with a status that says what happened, never a caught panic (the tests build with
//! overflow checks on, so arithmetic that would wrap panics), and never hands out address 0.

mod common;

use std::ffi::{CString, c_void};

use common::last_error;
use vrampool_c::{
    Counters, PoolHandle, Status, vrampool_device_counters, vrampool_device_reset_peaks, vrampool_device_set_limit,
    vrampool_device_trim, vrampool_device_trim_all, vrampool_last_error_code, vrampool_pool_alloc,
    vrampool_pool_counters, vrampool_pool_create_on_device, vrampool_pool_destroy, vrampool_pool_free,
    vrampool_pool_record_stream, vrampool_pool_set_limit, vrampool_pool_stats_json, vrampool_pool_trim,
    vrampool_stats_json, vrampool_string_free, vrampool_torch_alloc, vrampool_torch_free, vrampool_torch_record_stream,
};

/// 0, 1, 2^63 and 2^64 - 1.
const EXTREMES: [u64; 4] = [0, 1, 1 << 63, u64::MAX];

/// Ordinals at the ends of `int` and around the devices served.
const ORDINALS: [i32; 7] = [0, 1, 63, 64, -1, i32::MAX, i32::MIN];

/// Checks that the last call answered `code` with a status that is not a caught panic.
fn answered(code: i32, call: &str) {
    assert_ne!(code, Status::Internal.code(), "{call}: {}", last_error());
    assert!(code <= 0 && code >= Status::Internal.code(), "{call}: status {code}");
}

fn exercise_pool(pool: *mut PoolHandle, what: &str) {
    let mut live = Vec::new();
    for size in EXTREMES {
        for alignment in EXTREMES {
            for stream in EXTREMES {
                let mut addr = u64::MAX;
                // SAFETY: `addr` is a writable u64; simulated and host devices take any stream label.
                let code = unsafe { vrampool_pool_alloc(pool, size as usize, alignment as usize, stream, &mut addr) };
                answered(code, &format!("{what}: alloc {size} at {alignment} on {stream}"));
                if code == 0 && size > 0 {
                    assert_ne!(addr, 0, "{what}: an allocation at address 0");
                    live.push(addr);
                }
            }
        }
    }
    for addr in EXTREMES.into_iter().chain(live.iter().map(|&a| a.wrapping_add(1))) {
        for stream in EXTREMES {
            // SAFETY: simulated and host devices take any stream label.
            answered(unsafe { vrampool_pool_record_stream(pool, addr, stream) }, &format!("{what}: record {addr}"));
        }
        answered(vrampool_pool_free(pool, addr), &format!("{what}: free {addr:#x}"));
    }
    for bytes in EXTREMES {
        let mut limit = 0;
        // SAFETY: `limit` is a writable u64.
        answered(unsafe { vrampool_pool_set_limit(pool, bytes, &mut limit) }, &format!("{what}: limit {bytes}"));
    }
    let mut counters = Counters::default();
    // SAFETY: `counters` is a writable struct.
    answered(unsafe { vrampool_pool_counters(pool, &mut counters) }, what);
    let json = vrampool_pool_stats_json(pool);
    assert!(!json.is_null(), "{what}: {}", last_error());
    vrampool_string_free(json);
    for addr in live {
        assert_eq!(vrampool_pool_free(pool, addr), 0, "{what}: {}", last_error());
    }
    let mut trimmed = 0;
    // SAFETY: `trimmed` is a writable u64.
    answered(unsafe { vrampool_pool_trim(pool, &mut trimmed) }, what);
}

#[test]
fn every_number_at_its_extremes_gets_a_status_never_a_panic() {
    // SAFETY: this test binary runs this one test, which sets the variable before any other thread exists.
    unsafe { std::env::set_var("VRAMPOOL_CONF", "backend=sim,strategy=hybrid,warmup=2") };
    for backend in ["sim", "host"] {
        for strategy in [
            "fixed,block_count=8,block_size=1MiB",
            "fixed,block_count=8,fallback=reject",
            "dynamic",
            "hybrid,warmup=2",
            "hybrid,classes=4KiBx8",
        ] {
            let config = CString::new(format!("backend={backend},strategy={strategy}")).unwrap();
            for device in ORDINALS {
                // SAFETY: `config` is a NUL-terminated string.
                let pool = unsafe { vrampool_pool_create_on_device(config.as_ptr(), device) };
                if (0..64).contains(&device) {
                    assert!(!pool.is_null(), "{config:?} on {device}: {}", last_error());
                } else {
                    assert!(pool.is_null(), "{config:?} on {device}");
                    assert_eq!(vrampool_last_error_code(), Status::BadArgument.code(), "{}", last_error());
                    continue;
                }
                if device == 0 {
                    exercise_pool(pool, &format!("{config:?}"));
                }
                vrampool_pool_destroy(pool);
            }
        }
    }

    // The PyTorch entry points, on the device pools `VRAMPOOL_CONF` makes.
    let mut live = Vec::new();
    for device in ORDINALS {
        for size in EXTREMES {
            for stream in EXTREMES {
                // SAFETY: simulated devices take any stream label.
                let ptr = unsafe {
                    vrampool_torch_alloc(size as usize, device, std::ptr::without_provenance_mut(stream as usize))
                };
                answered(vrampool_last_error_code(), &format!("torch alloc {size} on {device}"));
                if !ptr.is_null() {
                    live.push((ptr, device));
                }
            }
        }
        for bytes in EXTREMES {
            let mut limit = 0;
            // SAFETY: `limit` is a writable u64.
            answered(unsafe { vrampool_device_set_limit(device, bytes, &mut limit) }, "device limit");
        }
        answered(vrampool_device_reset_peaks(device), "reset peaks");
        let mut counters = Counters::default();
        // SAFETY: `counters` is a writable struct.
        answered(unsafe { vrampool_device_counters(device, &mut counters) }, "device counters");
        let json = vrampool_stats_json(device);
        answered(vrampool_last_error_code(), "device stats");
        if !json.is_null() {
            vrampool_string_free(json);
        }
        let mut trimmed = 0;
        // SAFETY: `trimmed` is a writable u64.
        answered(unsafe { vrampool_device_trim(device, &mut trimmed) }, "device trim");
        for addr in EXTREMES {
            let ptr: *mut c_void = std::ptr::without_provenance_mut(addr as usize);
            for stream in EXTREMES {
                let stream = std::ptr::without_provenance_mut(stream as usize);
                // SAFETY: simulated devices take any stream label.
                answered(unsafe { vrampool_torch_record_stream(ptr, device, stream) }, "torch record_stream");
                vrampool_torch_free(ptr, addr as usize, device, stream);
                answered(vrampool_last_error_code(), "torch free");
            }
        }
    }
    assert!(live.iter().all(|&(ptr, _)| ptr.addr() != 0));
    for (ptr, device) in live {
        vrampool_torch_free(ptr, 0, device, std::ptr::null_mut());
        assert_eq!(vrampool_last_error_code(), 0, "{}", last_error());
    }
    let mut trimmed = 0;
    // SAFETY: `trimmed` is a writable u64.
    answered(unsafe { vrampool_device_trim_all(&mut trimmed) }, "trim all");
}
