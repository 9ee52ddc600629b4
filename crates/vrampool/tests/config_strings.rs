//! Random config strings, as a user or `VRAMPOOL_CONF` may write them: parsing never panics, a string that
//! parses builds a pool or returns an error, and whatever pool it builds serves, refuses and frees
//! correctly, checked against the shadow model after every step, on the simulated device and on host
//! memory with canaries.

mod common;

use common::{Device, Shadow, snapshot};
use proptest::prelude::*;
use proptest::sample::Index;
use vrampool::{Error, PoolSpec, StreamId};

/// Every key, with values that parse, from the ordinary to the extreme.
const VALUES: &[(&str, &[&str])] = &[
    ("initial_size", &["0", "256", "1MiB", "3MiB", "64MiB", "200GB"]),
    ("growth_factor", &["1", "1.0001", "1.5", "2", "100", "1e9"]),
    ("cap", &["0.000001", "0.5", "1", "1MiB", "2MiB", "3MiB", "64MiB", "16EiB"]),
    ("virtual_memory", &["auto", "off"]),
    ("reclaim_idle", &["true", "false"]),
    ("wait_for_idle", &["true", "false"]),
    ("alias_in_use", &["true", "false"]),
    ("avoid_retiring", &["true", "false"]),
    ("page_size", &["1MiB", "2MiB", "4MiB", "1GiB"]),
    ("paging", &["device", "adaptive"]),
    ("pages_per_pool", &["1", "2", "256", "4096", "18446744073709551615"]),
    ("driver_per_mille", &["0", "1", "10", "1000"]),
    ("block_size", &["256", "512", "4KiB", "1MiB", "64MiB", "1GiB"]),
    ("block_count", &["1", "2", "1000", "100000", "4294967294"]),
    ("fallback", &["backend", "reject"]),
    (
        "classes",
        &[
            "256x1",
            "4KiBx3+1MiBx2",
            "1MiBx1000000000",
            "256x4294967294",
            "64MiBx10",
            "1GiBx1000",
            "4KiBx1+8KiBx1+12KiBx1",
        ],
    ),
    ("warmup", &["0", "1", "2", "12", "100", "1000000"]),
    ("coverage", &["0.000001", "0.5", "1"]),
    ("max_waste", &["0", "0.0001", "0.5", "1"]),
    ("waste_floor", &["0", "256", "1MiB", "1TiB"]),
    ("cached_waste", &["0", "0.5", "1"]),
    ("max_classes", &["1", "2", "255"]),
    ("max_class_size", &["256", "4KiB", "4MiB", "1GiB", "16EiB"]),
    ("headroom", &["1", "1.5", "2", "1000", "1e9"]),
    ("watermark", &["0.000001", "0.5", "1"]),
    ("deterministic", &["true", "false"]),
];

/// Values no key takes.
const JUNK: &[&str] = &[
    "",
    "x",
    "-1",
    "NaN",
    "inf",
    "-inf",
    "1e308",
    "1e-300",
    "18446744073709551616",
    "0x5",
    "4KiB x 3",
    "1MiBx0",
    "16EiB",
    "hybrid",
    "on",
];

fn item() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => (any::<Index>(), any::<Index>()).prop_map(|(k, v)| {
            let (key, values) = VALUES[k.index(VALUES.len())];
            format!("{key}={}", values[v.index(values.len())])
        }),
        2 => (any::<Index>(), any::<Index>())
            .prop_map(|(k, v)| format!("{}={}", VALUES[k.index(VALUES.len())].0, JUNK[v.index(JUNK.len())])),
        1 => prop::sample::select(vec!["colour=red", "strategy", "=", " cap = 64MiB ", "strategy=tlsf"])
            .prop_map(String::from),
    ]
}

/// A few items, then a strategy (so that every strategy meets every key; the adaptive pool refuses most). A fixed pool starts from 100
/// blocks: its default of 2048 blocks of 4 MiB does not fit the test devices, so few would build.
fn config() -> impl Strategy<Value = String> {
    (prop::collection::vec(item(), 0..5), prop::sample::select(vec!["fixed", "dynamic", "hybrid", "adaptive"]))
        .prop_map(|(mut items, strategy)| {
            if strategy == "fixed" {
                items.insert(0, "block_count=100".into());
            }
            items.push(format!("strategy={strategy}"));
            items.join(",")
        })
}

#[derive(Clone, Debug)]
enum Op {
    Alloc { size: u64, alignment: u64, stream: u64 },
    Free(Index),
    Foreign(u64),
    Trim,
}

fn op() -> impl Strategy<Value = Op> {
    let size = prop_oneof![
        4 => 1u64..4096,
        4 => 4096u64..(1 << 20),
        2 => (1u64 << 20)..(64 << 20),
        1 => Just(0u64),
        1 => (u64::MAX - 1000)..=u64::MAX,
    ];
    let alignment = prop_oneof![Just(1u64), Just(256), Just(4096), Just(1 << 16), Just(1 << 40), Just(3)];
    prop_oneof![
        8 => (size, alignment, 0u64..2).prop_map(|(size, alignment, stream)| Op::Alloc { size, alignment, stream }),
        6 => any::<Index>().prop_map(Op::Free),
        1 => any::<u64>().prop_map(Op::Foreign),
        1 => Just(Op::Trim),
    ]
}

/// Builds the pool `text` describes on `device`, if it parses and builds, and runs `ops` on it.
fn run(text: &str, device: Device, ops: &[Op]) {
    let Ok(spec) = PoolSpec::parse(text) else { return };
    let Ok(pool) = spec.build(device.backend()) else { return };
    let mut shadow = Shadow::default();
    for op in ops {
        let before = snapshot(&*pool);
        let unchanged = |pool: &dyn vrampool::Pool| assert_eq!(snapshot(pool), before, "{op:?} changed the pool");
        match *op {
            Op::Alloc { size, alignment, stream } => match pool.allocate(size, alignment, StreamId(stream)) {
                Ok(a) => {
                    assert_eq!(a.addr % alignment.max(256), 0, "alignment of {a:?}");
                    assert_eq!(a.size, size);
                    shadow.allocated(a, &device);
                }
                Err(Error::OutOfMemory { requested, .. }) => assert_eq!(requested, size),
                Err(Error::ZeroSize) => assert_eq!(size, 0),
                Err(
                    Error::AlignmentNotPowerOfTwo { .. }
                    | Error::AlignmentTooLarge { .. }
                    | Error::BlockTooSmall { .. },
                ) => unchanged(&*pool),
                Err(err) => panic!("unexpected error for {op:?} under `{text}`: {err}"),
            },
            Op::Free(i) if !shadow.live.is_empty() => {
                let addr = *shadow.live.keys().nth(i.index(shadow.live.len())).unwrap();
                shadow.free(&*pool, addr, &device);
            }
            Op::Free(_) => {}
            Op::Foreign(addr) => {
                if !shadow.live.contains_key(&addr) {
                    assert!(pool.free(addr).is_err(), "a free of {addr:#x}, never handed out, succeeded");
                    unchanged(&*pool);
                }
            }
            Op::Trim => {
                pool.trim().unwrap_or_else(|e| panic!("trim under `{text}`: {e}"));
            }
        }
        shadow.check(&*pool, &device);
    }
    let live: Vec<u64> = shadow.live.keys().copied().collect();
    for addr in live {
        shadow.free(&*pool, addr, &device);
    }
    pool.trim().unwrap();
    shadow.check(&*pool, &device);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn any_string_that_parses_builds_a_pool_that_keeps_its_blocks_apart(
        text in config(),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        run(&text, Device::sim(Some(2 << 20)), &ops);
    }

    #[test]
    fn the_same_on_host_memory_with_canaries_and_no_virtual_memory(
        text in config(),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        run(&text, Device::host(None), &ops);
    }

    #[test]
    fn no_string_makes_the_parser_panic(text in "[a-z_=,.0-9xKMGiB +-]{0,60}") {
        let _ = PoolSpec::parse(&text);
    }
}
