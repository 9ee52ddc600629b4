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

/// The JSON of a pool whose segments and blocks are many lists those at the lowest addresses only, up to
/// the named limits, and counts the others: its size stays under a megabyte whatever the pool holds.
#[test]
fn the_stats_json_lists_a_bounded_number_of_segments_and_blocks() {
    use vrampool_c::{MAX_REPORTED_BLOCKS, MAX_REPORTED_SEGMENTS};
    let json_of = |pool| {
        let text = vrampool_pool_stats_json(pool);
        assert!(!text.is_null(), "{}", last_error());
        // SAFETY: a live string handed out by the library, freed just below.
        let owned = unsafe { CStr::from_ptr(text) }.to_str().unwrap().to_string();
        vrampool_string_free(text);
        owned
    };
    // 100,000 live blocks of a dynamic pool.
    let pool = create(c"strategy=dynamic,backend=sim");
    let mut blocks: Vec<u64> = (0..100_000).map(|_| alloc(pool, 256).unwrap()).collect();
    let text = json_of(pool);
    assert!(text.len() < 1 << 20, "{} bytes of JSON", text.len());
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let listed: Vec<u64> =
        json["report"]["blocks"].as_array().unwrap().iter().map(|b| b["addr"].as_u64().unwrap()).collect();
    blocks.sort_unstable();
    assert_eq!(listed, blocks[..MAX_REPORTED_BLOCKS], "the blocks at the lowest addresses, in order");
    assert_eq!(json["report"]["blocks_left_out"], (100_000 - MAX_REPORTED_BLOCKS) as u64);
    assert_eq!(json["report"]["segments_left_out"], 0);
    assert_eq!(json["stats"]["active_allocations"], 100_000, "the counters count every block");
    vrampool_pool_destroy(pool);

    // A fixed pool of one block whose other requests each take a fallback segment of their own.
    let pool = create(c"strategy=fixed,block_size=256,block_count=1,backend=sim");
    let requests = MAX_REPORTED_SEGMENTS + 500;
    for _ in 0..requests {
        alloc(pool, 512).unwrap();
    }
    let json: serde_json::Value = serde_json::from_str(&json_of(pool)).unwrap();
    assert_eq!(json["report"]["segments"].as_array().unwrap().len(), MAX_REPORTED_SEGMENTS);
    assert_eq!(json["report"]["segments_left_out"], (requests + 1 - MAX_REPORTED_SEGMENTS) as u64);
    assert_eq!(json["report"]["blocks"].as_array().unwrap().len(), requests);
    vrampool_pool_destroy(pool);
}
