//! The C functions called from Rust, for what a C test cannot check easily: pools destroyed while other
//! threads use them, text that is not UTF-8, and JSON that parses.

mod common;

use std::ffi::{CStr, c_char};
use std::sync::Barrier;

use common::last_error;
use vrampool_c::{
    PoolHandle, Status, vrampool_last_error_code, vrampool_pool_alloc, vrampool_pool_create, vrampool_pool_destroy,
    vrampool_pool_free, vrampool_pool_stats_json, vrampool_string_free,
};

fn create(config: &CStr) -> *mut PoolHandle {
    // SAFETY: `config` is a NUL-terminated string.
    unsafe { vrampool_pool_create(config.as_ptr()) }
}

fn alloc(pool: *mut PoolHandle, size: usize) -> Result<u64, i32> {
    let mut addr = 0;
    // SAFETY: `addr` is a writable u64; host memory takes any stream label.
    match unsafe { vrampool_pool_alloc(pool, size, 0, 0, &mut addr) } {
        0 => Ok(addr),
        code => Err(code),
    }
}

/// A handle sent to other threads: it is a number, never dereferenced.
#[derive(Clone, Copy)]
struct SendHandle(*mut PoolHandle);
// SAFETY: the handle is an opaque number the library looks up; it is never dereferenced.
unsafe impl Send for SendHandle {}
// SAFETY: as above.
unsafe impl Sync for SendHandle {}

#[test]
fn a_pool_destroyed_while_threads_use_it_answers_no_pool_and_nothing_breaks() {
    let pool = SendHandle(create(c"strategy=dynamic,backend=host,initial_size=64MiB"));
    assert!(!pool.0.is_null(), "{}", last_error());
    let barrier = Barrier::new(5);
    std::thread::scope(|scope| {
        for thread in 0..4usize {
            let barrier = &barrier;
            scope.spawn(move || {
                let pool = pool;
                barrier.wait();
                let mut gone = false;
                for i in 0..50_000_000usize {
                    match alloc(pool.0, 256 * (1 + (i + thread) % 64)) {
                        Ok(addr) => {
                            let code = vrampool_pool_free(pool.0, addr);
                            assert!(code == 0 || code == Status::NoPool.code(), "free: {code} {}", last_error());
                            gone |= code != 0;
                        }
                        Err(code) => {
                            assert_eq!(code, Status::NoPool.code(), "{}", last_error());
                            gone = true;
                        }
                    }
                    if gone {
                        assert!(last_error().contains("not a live pool handle"), "{}", last_error());
                        break;
                    }
                }
                assert!(gone, "the thread ran until the pool was destroyed under it");
            });
        }
        barrier.wait();
        std::thread::sleep(std::time::Duration::from_millis(5));
        vrampool_pool_destroy(pool.0);
        assert_eq!(vrampool_last_error_code(), 0, "{}", last_error());
    });
    assert_eq!(alloc(pool.0, 64), Err(Status::NoPool.code()));
}

#[test]
fn a_config_that_is_not_utf8_is_a_bad_argument() {
    let bytes: &[u8] = b"strategy=\xff\0";
    // SAFETY: the bytes end with a NUL.
    let pool = unsafe { vrampool_pool_create(bytes.as_ptr().cast::<c_char>()) };
    assert!(pool.is_null());
    assert_eq!(vrampool_last_error_code(), Status::BadArgument.code());
    assert_eq!(last_error(), "vrampool_pool_create: argument `config` is not UTF-8 text (invalid byte at offset 9)");
}

#[test]
fn the_stats_json_parses_and_counts_what_happened() {
    let pool = create(c"strategy=fixed,block_size=1MiB,block_count=8,backend=sim");
    assert!(!pool.is_null(), "{}", last_error());
    let a = alloc(pool, 1000).unwrap();
    let b = alloc(pool, 3 << 20).unwrap();
    assert_eq!(vrampool_pool_free(pool, a), 0);
    let text = vrampool_pool_stats_json(pool);
    assert!(!text.is_null(), "{}", last_error());
    // SAFETY: a live string handed out by the library, freed just below.
    let json: serde_json::Value = serde_json::from_str(unsafe { CStr::from_ptr(text) }.to_str().unwrap()).unwrap();
    vrampool_string_free(text);
    assert_eq!(json["strategy"], "fixed");
    assert_eq!(json["backend"].as_str().unwrap(), "sim");
    assert_eq!(json["device"], serde_json::Value::Null);
    assert_eq!(json["stats"]["allocations"], 2);
    assert_eq!(json["stats"]["frees"], 1);
    assert_eq!(json["stats"]["fallbacks"], 1, "3 MiB does not fit a 1 MiB block");
    assert_eq!(json["stats"]["allocated_bytes"]["current"], 3 << 20);
    assert_eq!(json["report"]["blocks"].as_array().unwrap().len(), 1);
    assert_eq!(json["report"]["blocks"][0]["addr"], b);
    vrampool_pool_destroy(pool);
}
