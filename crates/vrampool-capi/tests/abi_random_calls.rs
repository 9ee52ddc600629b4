//! Random config strings and random calls through the C functions, as a C caller may make them: every call
//! answers with a status that says what happened, never a caught panic (`VRAMPOOL_STATUS_INTERNAL`), and
//! the pool's JSON, counters and report stay valid and their counts right (blocks used on another stream
//! and freed count as live until the pool has them back).

mod common;

use std::collections::BTreeSet;
use std::ffi::{CStr, CString, c_void};

use common::last_error;
use proptest::prelude::*;
use proptest::sample::Index;
use vrampool_c::{
    BlockInfo, Counters, PoolHandle, Status, vrampool_last_error_code, vrampool_pool_alloc, vrampool_pool_counters,
    vrampool_pool_create, vrampool_pool_destroy, vrampool_pool_free, vrampool_pool_record_stream,
    vrampool_pool_stats_json, vrampool_pool_trim, vrampool_pool_visit, vrampool_string_free,
};

/// Items of config strings: good values of each strategy's keys, values the keys refuse, unknown keys.
const ITEMS: &[&str] = &[
    "strategy=fixed,block_size=64KiB,block_count=100",
    "strategy=fixed,block_size=1MiB,block_count=8,fallback=reject",
    "strategy=dynamic",
    "strategy=dynamic,initial_size=1MiB,cap=64MiB",
    "strategy=hybrid",
    "strategy=hybrid,warmup=4",
    "strategy=hybrid,classes=4KiBx3+1MiBx2",
    "strategy=hybrid,classes=1MiBx1000000000,cap=256MiB",
    "cap=3MiB",
    "cap=0.000001",
    "initial_size=200GB",
    "growth_factor=1e9",
    "headroom=1e9",
    "page_size=3MiB",
    "block_count=4294967294",
    "coverage=0",
    "colour=red",
    "strategy",
    "=",
    "",
];

fn config() -> impl Strategy<Value = String> {
    (prop::collection::vec(prop::sample::select(ITEMS), 0..4), prop::sample::select(&["sim", "host"][..]))
        .prop_map(|(items, backend)| format!("{},backend={backend}", items.join(",")))
}

#[derive(Clone, Debug)]
enum Call {
    Alloc { size: usize, alignment: usize, stream: u64 },
    Free(Index),
    FreeAgain(Index),
    FreeForeign(u64),
    RecordStream(Index, u64),
    Trim,
    Stats,
    Counters,
    Visit,
}

fn call() -> impl Strategy<Value = Call> {
    let size = prop_oneof![
        4 => 0usize..4096,
        4 => 4096usize..(1 << 20),
        2 => (1usize << 20)..(64 << 20),
        1 => (usize::MAX - 1000)..=usize::MAX,
    ];
    let alignment = prop_oneof![Just(0usize), Just(256), Just(4096), Just(1 << 40), Just(3)];
    prop_oneof![
        8 => (size, alignment, 0u64..3).prop_map(|(size, alignment, stream)| Call::Alloc { size, alignment, stream }),
        5 => any::<Index>().prop_map(Call::Free),
        1 => any::<Index>().prop_map(Call::FreeAgain),
        1 => any::<u64>().prop_map(Call::FreeForeign),
        2 => (any::<Index>(), 0u64..4).prop_map(|(i, stream)| Call::RecordStream(i, stream)),
        1 => Just(Call::Trim),
        1 => Just(Call::Stats),
        1 => Just(Call::Counters),
        1 => Just(Call::Visit),
    ]
}

/// The pool's JSON, parsed.
fn stats(pool: *mut PoolHandle) -> serde_json::Value {
    let text = vrampool_pool_stats_json(pool);
    assert!(!text.is_null(), "stats: {}", last_error());
    // SAFETY: a non-null result is a NUL-terminated string the library handed out, freed once below.
    let json = unsafe { CStr::from_ptr(text) }.to_str().expect("UTF-8").to_owned();
    vrampool_string_free(text);
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("stats JSON does not parse ({e}): {json}"))
}

/// The pool's counters.
fn counters(pool: *mut PoolHandle) -> Counters {
    let mut out = Counters::default();
    // SAFETY: `out` is a writable struct.
    let status = unsafe { vrampool_pool_counters(pool, &mut out) };
    assert_eq!(status, Status::Ok.code(), "counters: {}", last_error());
    out
}

/// Counts the blocks a visit hands over.
unsafe extern "C" fn count_block(context: *mut c_void, _block: *const BlockInfo) {
    // SAFETY: the context is the `u64` the caller passed, alive across the visit.
    unsafe { *context.cast::<u64>() += 1 };
}

fn run(config: &str, calls: &[Call]) {
    let text = CString::new(config).unwrap();
    // SAFETY: `text` is a NUL-terminated string.
    let pool = unsafe { vrampool_pool_create(text.as_ptr()) };
    if pool.is_null() {
        let code = vrampool_last_error_code();
        assert!(
            [Status::BadConfig, Status::OutOfMemory].iter().any(|s| s.code() == code),
            "`{config}` refused with code {code}: {}",
            last_error()
        );
        return;
    }
    let mut live: BTreeSet<u64> = BTreeSet::new();
    let mut freed: Vec<u64> = Vec::new();
    for call in calls {
        let status = match *call {
            Call::Alloc { size, alignment, stream } => {
                let mut addr = u64::MAX;
                // SAFETY: `addr` is a writable u64; the simulated and host devices take any stream label.
                let status = unsafe { vrampool_pool_alloc(pool, size, alignment, stream, &mut addr) };
                if status == Status::Ok.code() {
                    assert!(size == 0 || addr != 0, "{call:?} succeeded without an address");
                    if addr != 0 {
                        assert!(live.insert(addr), "{addr:#x} handed out twice under `{config}`");
                        freed.retain(|&f| f != addr);
                    }
                } else {
                    assert_eq!(addr, 0, "a failed allocation writes 0");
                    let expected = [Status::BadArgument, Status::OutOfMemory];
                    assert!(expected.iter().any(|s| s.code() == status), "{call:?}: {status} {}", last_error());
                }
                status
            }
            Call::Free(i) if !live.is_empty() => {
                let addr = *live.iter().nth(i.index(live.len())).unwrap();
                live.remove(&addr);
                freed.push(addr);
                let status = vrampool_pool_free(pool, addr);
                assert_eq!(status, Status::Ok.code(), "free of {addr:#x}: {}", last_error());
                status
            }
            Call::FreeAgain(i) if !freed.is_empty() => {
                // Not live; or, once its memory went back to the device or into a later block, foreign.
                let status = vrampool_pool_free(pool, freed[i.index(freed.len())]);
                let expected = [Status::NotLive, Status::ForeignAddress];
                assert!(expected.iter().any(|s| s.code() == status), "second free: {status} {}", last_error());
                status
            }
            Call::FreeForeign(addr) if addr != 0 && !live.contains(&addr) => {
                let status = vrampool_pool_free(pool, addr);
                let expected = [Status::NotLive, Status::ForeignAddress];
                assert!(expected.iter().any(|s| s.code() == status), "free of {addr:#x}: {status}");
                status
            }
            Call::RecordStream(i, stream) if !live.is_empty() => {
                let addr = *live.iter().nth(i.index(live.len())).unwrap();
                // SAFETY: the simulated and host devices take any stream label.
                let status = unsafe { vrampool_pool_record_stream(pool, addr, stream) };
                assert_eq!(status, Status::Ok.code(), "record_stream: {}", last_error());
                status
            }
            Call::Counters => {
                let c = counters(pool);
                assert_eq!(c.active_allocations - c.held_frees, live.len() as u64, "{c:?}");
                assert!(c.reserved_bytes_peak >= c.reserved_bytes && c.allocated_bytes_peak >= c.allocated_bytes);
                Status::Ok.code()
            }
            Call::Visit => {
                let mut blocks = 0u64;
                // SAFETY: `count_block` returns normally; `blocks` outlives the call.
                let status = unsafe { vrampool_pool_visit(pool, None, Some(count_block), (&raw mut blocks).cast()) };
                assert_eq!(status, Status::Ok.code(), "visit: {}", last_error());
                assert_eq!(blocks - counters(pool).held_frees, live.len() as u64);
                status
            }
            Call::Trim => {
                let mut bytes = 0;
                // SAFETY: `bytes` is a writable u64.
                let status = unsafe { vrampool_pool_trim(pool, &mut bytes) };
                assert_eq!(status, Status::Ok.code(), "trim: {}", last_error());
                status
            }
            Call::Stats => {
                let json = stats(pool);
                let held = json["held_frees"].as_u64().unwrap();
                assert_eq!(json["stats"]["active_allocations"].as_u64().unwrap() - held, live.len() as u64, "{json}");
                Status::Ok.code()
            }
            _ => Status::Ok.code(),
        };
        assert_ne!(status, Status::Internal.code(), "{call:?} under `{config}` panicked: {}", last_error());
    }
    for addr in std::mem::take(&mut live) {
        assert_eq!(vrampool_pool_free(pool, addr), Status::Ok.code(), "{}", last_error());
    }
    // A trim waits for the held frees, so everything is back in the pool.
    // SAFETY: NULL asks for no byte count.
    assert_eq!(unsafe { vrampool_pool_trim(pool, std::ptr::null_mut()) }, Status::Ok.code(), "{}", last_error());
    let json = stats(pool);
    assert_eq!(json["stats"]["allocated_bytes"]["current"], 0, "{json}");
    vrampool_pool_destroy(pool);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn random_calls_get_statuses_and_never_a_caught_panic(
        config in config(),
        calls in prop::collection::vec(call(), 1..60),
    ) {
        run(&config, &calls);
    }
}
