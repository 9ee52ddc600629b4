//! Sequences of C ABI calls on pools of the simulated and host devices, as a C caller may make them: pools
//! made from config strings, allocations of every size and alignment, frees of live, freed and foreign
//! addresses, trims, stats and destroys. Every call answers with a status that says what happened, never a
//! caught panic (`VRAMPOOL_STATUS_INTERNAL`); live blocks never share an address; the JSON stats parse and
//! count the live blocks.
#![no_main]

use std::collections::BTreeSet;
use std::ffi::{CStr, CString};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use vrampool_c::{
    PoolHandle, Status, vrampool_last_error, vrampool_last_error_code, vrampool_pool_alloc, vrampool_pool_create,
    vrampool_pool_destroy, vrampool_pool_free, vrampool_pool_stats_json, vrampool_pool_trim, vrampool_string_free,
};

/// Items of the config strings pools are made from: each strategy with its usual keys, values at their
/// edges, and keys and values the parser refuses.
const ITEMS: &[&str] = &[
    "strategy=fixed,block_size=64KiB,block_count=100",
    "strategy=fixed,block_size=1MiB,block_count=8,fallback=reject",
    "strategy=fixed,block_size=256,block_count=1",
    "strategy=dynamic",
    "strategy=dynamic,initial_size=1MiB,cap=64MiB",
    "strategy=dynamic,growth_factor=1.01,page_size=8MiB",
    "strategy=dynamic,reclaim_idle=false",
    "strategy=hybrid",
    "strategy=hybrid,warmup=4",
    "strategy=hybrid,classes=4KiBx3+1MiBx2",
    "strategy=hybrid,drain_before_growth=true",
    "cap=3MiB",
    "cap=0.000001",
    "initial_size=200GB",
    "growth_factor=1e9",
    "page_size=3MiB",
    "coverage=0",
    "colour=red",
    "strategy",
    "=",
    "",
];

/// The most pools alive at once.
const MAX_POOLS: usize = 4;

#[derive(Arbitrary, Debug)]
enum Size {
    Small(u16),
    Medium(u32),
    Any(u64),
}

impl Size {
    fn bytes(&self) -> usize {
        match *self {
            Size::Small(size) => usize::from(size),
            Size::Medium(size) => (size % (64 << 20)) as usize,
            Size::Any(size) => size as usize,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Alignment {
    Default,
    PowerOfTwo(u8),
    Any(u64),
}

impl Alignment {
    fn bytes(&self) -> usize {
        match *self {
            Alignment::Default => 0,
            Alignment::PowerOfTwo(shift) => 1usize.checked_shl(u32::from(shift % 64)).unwrap_or(0),
            Alignment::Any(alignment) => alignment as usize,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Call {
    Create { items: [u8; 3], host: bool },
    Alloc { pool: u8, size: Size, alignment: Alignment, stream: u8 },
    Free { pool: u8, which: u16 },
    FreeAgain { pool: u8, which: u16 },
    FreeForeign { pool: u8, addr: u64 },
    Trim { pool: u8 },
    Stats { pool: u8 },
    Destroy { pool: u8 },
}

/// A pool made by the calls, and what it should hold.
struct Made {
    handle: *mut PoolHandle,
    config: String,
    live: BTreeSet<u64>,
    freed: Vec<u64>,
}

/// The calling thread's last error message.
fn last_error() -> String {
    // SAFETY: the library returns a NUL-terminated string that stays valid until the thread's next call.
    unsafe { CStr::from_ptr(vrampool_last_error()) }.to_string_lossy().into_owned()
}

/// The pool's stats, parsed.
fn stats(pool: *mut PoolHandle) -> serde_json::Value {
    let text = vrampool_pool_stats_json(pool);
    assert!(!text.is_null(), "stats: {}", last_error());
    // SAFETY: a non-null result is a NUL-terminated string the library handed out, freed once below.
    let json = unsafe { CStr::from_ptr(text) }.to_str().expect("UTF-8").to_owned();
    vrampool_string_free(text);
    serde_json::from_str(&json).unwrap_or_else(|error| panic!("stats JSON does not parse ({error}): {json}"))
}

/// Asserts that `status` is one of `expected`.
fn expect(status: i32, expected: &[Status], call: &Call, config: &str) {
    assert!(
        expected.iter().any(|s| s.code() == status),
        "{call:?} under `{config}` returned {status}: {}",
        last_error()
    );
}

fuzz_target!(|calls: Vec<Call>| {
    let mut pools: Vec<Made> = Vec::new();
    for call in &calls {
        let pick = |pool: u8, pools: &[Made]| (!pools.is_empty()).then(|| usize::from(pool) % pools.len());
        match *call {
            Call::Create { items, host } => {
                if pools.len() == MAX_POOLS {
                    continue;
                }
                let items: Vec<&str> = items.iter().map(|&i| ITEMS[usize::from(i) % ITEMS.len()]).collect();
                let config = format!("{},backend={}", items.join(","), if host { "host" } else { "sim" });
                let text = CString::new(config.as_str()).expect("no NUL in the items");
                // SAFETY: `text` is a NUL-terminated string.
                let handle = unsafe { vrampool_pool_create(text.as_ptr()) };
                if handle.is_null() {
                    let code = vrampool_last_error_code();
                    expect(code, &[Status::BadConfig, Status::OutOfMemory], call, &config);
                } else {
                    pools.push(Made { handle, config, live: BTreeSet::new(), freed: Vec::new() });
                }
            }
            Call::Alloc { pool, ref size, ref alignment, stream } => {
                let Some(i) = pick(pool, &pools) else { continue };
                let made = &mut pools[i];
                let (size, alignment) = (size.bytes(), alignment.bytes());
                let mut addr = u64::MAX;
                // SAFETY: `addr` is a writable u64; the simulated and host devices take any stream label.
                let status = unsafe { vrampool_pool_alloc(made.handle, size, alignment, u64::from(stream), &mut addr) };
                if status == Status::Ok.code() {
                    assert!(size == 0 || addr != 0, "{call:?} under `{}` gave no address", made.config);
                    if addr != 0 {
                        assert!(made.live.insert(addr), "{addr:#x} handed out twice under `{}`", made.config);
                        made.freed.retain(|&freed| freed != addr);
                    }
                } else {
                    assert_eq!(addr, 0, "a failed allocation writes 0");
                    expect(status, &[Status::BadArgument, Status::OutOfMemory], call, &made.config);
                }
            }
            Call::Free { pool, which } => {
                let Some(i) = pick(pool, &pools) else { continue };
                let made = &mut pools[i];
                let Some(&addr) = made.live.iter().nth(usize::from(which) % made.live.len().max(1)) else { continue };
                made.live.remove(&addr);
                made.freed.push(addr);
                expect(vrampool_pool_free(made.handle, addr), &[Status::Ok], call, &made.config);
            }
            Call::FreeAgain { pool, which } => {
                let Some(i) = pick(pool, &pools) else { continue };
                let made = &pools[i];
                let Some(&addr) = made.freed.get(usize::from(which) % made.freed.len().max(1)) else { continue };
                let status = vrampool_pool_free(made.handle, addr);
                expect(status, &[Status::NotLive, Status::ForeignAddress], call, &made.config);
            }
            Call::FreeForeign { pool, addr } => {
                let Some(i) = pick(pool, &pools) else { continue };
                let made = &pools[i];
                if addr == 0 || made.live.contains(&addr) {
                    continue;
                }
                let status = vrampool_pool_free(made.handle, addr);
                expect(status, &[Status::NotLive, Status::ForeignAddress], call, &made.config);
            }
            Call::Trim { pool } => {
                let Some(i) = pick(pool, &pools) else { continue };
                let mut bytes = 0;
                // SAFETY: `bytes` is a writable u64.
                let status = unsafe { vrampool_pool_trim(pools[i].handle, &mut bytes) };
                expect(status, &[Status::Ok], call, &pools[i].config);
            }
            Call::Stats { pool } => {
                let Some(i) = pick(pool, &pools) else { continue };
                let json = stats(pools[i].handle);
                assert_eq!(json["stats"]["active_allocations"], pools[i].live.len() as u64, "{json}");
            }
            Call::Destroy { pool } => {
                let Some(i) = pick(pool, &pools) else { continue };
                vrampool_pool_destroy(pools.swap_remove(i).handle);
            }
        }
    }
    for made in pools {
        for &addr in &made.live {
            assert_eq!(vrampool_pool_free(made.handle, addr), Status::Ok.code(), "{}", last_error());
        }
        let json = stats(made.handle);
        assert_eq!(json["stats"]["allocated_bytes"]["current"], 0, "{json}");
        vrampool_pool_destroy(made.handle);
    }
});
