//! Configurations checked against the device before anything is reserved: a class table, a block count or
//! a growth the device cannot hold is an error at once, in time that does not grow with the counts, and the
//! device is never asked for memory. Every number a config string takes, at 0, 1, 2^63 and 2^64 - 1, parses,
//! validates and builds to a pool or an error, never a panic (the tests build with overflow checks on).

use std::sync::Arc;
use std::time::{Duration, Instant};

use vrampool::{
    Backend, Error, GIB, HostMemory, HostMemoryConfig, MAX_BLOCK_SIZE, MIB, Pool, PoolSpec, SimDevice, SimDeviceConfig,
    StreamId, StreamUses,
};

/// A config refused in less than this is refused by a check of its keys, not of its blocks.
const AT_ONCE: Duration = Duration::from_secs(1);

/// Builds `text` on `device` and checks that it is refused, at once, naming `key`, with nothing asked of
/// the device.
fn refused_before_reserving(text: &str, device: Arc<SimDevice>, key: &str) {
    let spec = PoolSpec::parse(text).unwrap();
    let started = Instant::now();
    let validated = spec.validate(device.capacity());
    let built = spec.build_any(device.clone());
    assert!(started.elapsed() < AT_ONCE, "`{text}` took {:?}", started.elapsed());
    for err in [validated.unwrap_err(), built.expect_err("refused")] {
        assert!(matches!(&err, Error::InvalidConfig { field, .. } if *field == key), "`{text}`: {err}");
    }
    let counters = device.counters();
    assert_eq!((counters.segments_allocated, counters.ranges_reserved), (0, 0), "`{text}` reserved memory");
}

#[test]
fn a_class_table_the_device_cannot_hold_is_refused_before_anything_is_reserved() {
    let h200 = || Arc::new(SimDevice::default());
    refused_before_reserving("strategy=hybrid,classes=256x4294967294", h200(), "classes");
    refused_before_reserving("strategy=hybrid,classes=1MiBx1000000000", h200(), "classes");
    refused_before_reserving("strategy=hybrid,classes=8388608TiBx2", h200(), "classes");
    refused_before_reserving("strategy=hybrid,classes=4KiBx512+256GiBx1", h200(), "classes");
    // A class of more than 1 GiB of blocks on a device of 1 GiB.
    let small = || Arc::new(SimDevice::new(SimDeviceConfig::default().capacity(GIB)));
    refused_before_reserving("strategy=hybrid,classes=256x4194305", small(), "classes");
    refused_before_reserving("strategy=hybrid,classes=4KiBx8+1MiBx1025,cap=0.5", small(), "classes");
    // Classes that each fit the device share the region, even where all of them together would not.
    let fits = PoolSpec::parse("strategy=hybrid,classes=1MiBx1024+2MiBx512").unwrap();
    assert!(fits.build_any(small()).is_ok());
}

#[test]
fn a_block_count_or_a_growth_the_device_cannot_hold_is_refused_before_anything_is_reserved() {
    let h200 = || Arc::new(SimDevice::default());
    refused_before_reserving("strategy=fixed,block_size=256,block_count=4294967294", h200(), "block_count");
    refused_before_reserving("strategy=fixed,block_size=1TiB,block_count=1000", h200(), "block_count");
    refused_before_reserving("strategy=fixed,block_size=8388608TiB,block_count=2", h200(), "block_size");
    refused_before_reserving("strategy=dynamic,initial_size=200GB", h200(), "initial_size");
    refused_before_reserving("strategy=dynamic,initial_size=8388608TiB", h200(), "initial_size");
    refused_before_reserving("strategy=hybrid,initial_size=100GB,cap=0.5", h200(), "initial_size");
    refused_before_reserving("strategy=dynamic,cap=0B", h200(), "cap");
}

/// Every key that takes a number, and each of the number's forms.
const NUMERIC_KEYS: &[&str] = &[
    "page_size",
    "block_size",
    "block_count",
    "initial_size",
    "growth_factor",
    "cap",
    "warmup",
    "coverage",
    "max_waste",
    "waste_floor",
    "cached_waste",
    "max_classes",
    "max_class_size",
    "headroom",
    "watermark",
];

/// 0, 1, 2^63 and 2^64 - 1, as a number and as bytes, and as class tables.
const EXTREME_TEXTS: &[&str] = &["0", "1", "9223372036854775808", "18446744073709551615", "8388608TiB", "0B", "1B"];

#[test]
fn numbers_at_their_extremes_build_a_pool_or_an_error() {
    let mut items: Vec<String> =
        NUMERIC_KEYS.iter().flat_map(|key| EXTREME_TEXTS.iter().map(move |value| format!("{key}={value}"))).collect();
    for size in EXTREME_TEXTS {
        for count in ["0", "1", "4294967294", "4294967295", "9223372036854775808", "18446744073709551615"] {
            items.push(format!("classes={size}x{count}"));
        }
    }
    for strategy in ["fixed", "dynamic", "hybrid", "adaptive"] {
        for item in &items {
            let text = format!("strategy={strategy},{item}");
            let Ok(spec) = PoolSpec::parse(&text) else { continue };
            for device in [
                Arc::new(SimDevice::new(SimDeviceConfig::default().capacity(GIB))) as Arc<dyn Backend>,
                Arc::new(SimDevice::new(SimDeviceConfig::default().capacity(u64::MAX))),
                Arc::new(HostMemory::new(HostMemoryConfig::default().capacity(256 * MIB).granularity(None))),
            ] {
                let started = Instant::now();
                let _ = spec.validate(device.capacity());
                if let Ok(pool) = spec.build_any(device) {
                    for size in [1, 1 << 63, u64::MAX] {
                        if let Ok(block) = pool.allocate(size, 256, StreamId::DEFAULT) {
                            pool.free(block.addr).unwrap();
                        }
                    }
                }
                assert!(started.elapsed() < AT_ONCE, "`{text}` took {:?}", started.elapsed());
            }
        }
    }
}

/// An alignment no block of the pool can have is an alignment error naming it and the largest the pool
/// gives, and changes nothing; the largest itself is given.
#[test]
fn an_alignment_the_pool_cannot_give_is_an_alignment_error() {
    for text in [
        "strategy=dynamic",
        "strategy=dynamic,virtual_memory=off",
        "strategy=hybrid",
        "strategy=hybrid,classes=4KiBx8,virtual_memory=off",
        "strategy=adaptive",
        "strategy=adaptive,virtual_memory=off",
        "strategy=fixed,block_count=8",
        "strategy=fixed,block_count=8,fallback=reject",
    ] {
        let pool = PoolSpec::parse(text).unwrap().build_any(Arc::new(SimDevice::default())).unwrap();
        let before = pool.stats();
        let mut largest = None;
        for alignment in [1 << 40, 1 << 63] {
            match pool.allocate(MIB, alignment, StreamId::DEFAULT) {
                Err(err @ Error::AlignmentTooLarge { alignment: asked, max }) => {
                    assert_eq!(asked, alignment, "`{text}`");
                    assert!(max.is_power_of_two() && max < alignment, "`{text}`: {max}");
                    let message = err.to_string();
                    assert!(
                        message.contains(&alignment.to_string()) && message.contains(&max.to_string()),
                        "{message}"
                    );
                    largest = Some(max);
                }
                other => panic!("`{text}`: alignment {alignment}: {other:?}"),
            }
        }
        assert_eq!(pool.stats(), before, "`{text}`: a refused alignment changes nothing");
        let largest = largest.unwrap();
        let block = pool.allocate(MIB, largest, StreamId::DEFAULT).unwrap_or_else(|e| panic!("`{text}`: {e}"));
        assert_eq!(block.addr % largest, 0, "`{text}`");
        pool.free(block.addr).unwrap();
    }
    // On the default H200, the dynamic pool's cap is 112.8 GB: alignments up to 64 GiB.
    let pool = PoolSpec::parse("strategy=dynamic").unwrap().build_any(Arc::new(SimDevice::default())).unwrap();
    let err = pool.allocate(1, 1 << 40, StreamId::DEFAULT).unwrap_err();
    assert_eq!(
        err.to_string(),
        "alignment 1099511627776 exceeds the largest alignment this pool guarantees (68719476736)"
    );
}

/// 0, 1, 2^63 and 2^64 - 1.
const EXTREMES: [u64; 4] = [0, 1, 1 << 63, u64::MAX];

/// Every number a pool's calls take, at its extremes, on every strategy: each call answers, a refused one
/// changes nothing, and what is handed out is within the device.
#[test]
fn pool_calls_at_the_extremes_answer_and_change_nothing_when_refused() {
    for text in [
        "strategy=fixed,block_size=1MiB,block_count=16",
        "strategy=fixed,block_size=1MiB,block_count=16,fallback=reject",
        "strategy=dynamic",
        "strategy=dynamic,virtual_memory=off",
        "strategy=hybrid,warmup=2",
        "strategy=hybrid,classes=4KiBx8+1MiBx4,virtual_memory=off",
        "",
        "strategy=adaptive,virtual_memory=off",
    ] {
        for device in [
            Arc::new(SimDevice::new(SimDeviceConfig::default().capacity(GIB))) as Arc<dyn Backend>,
            Arc::new(HostMemory::new(HostMemoryConfig::default().capacity(GIB))),
        ] {
            let pool = StreamUses::new(PoolSpec::parse(text).unwrap().build_any(device).unwrap());
            let mut live = Vec::new();
            for size in EXTREMES {
                for alignment in EXTREMES {
                    for stream in EXTREMES {
                        let before = pool.stats();
                        match pool.allocate(size, alignment, StreamId(stream)) {
                            Ok(block) => {
                                assert!(block.addr != 0 && block.addr.checked_add(size).is_some(), "`{text}`");
                                live.push(block.addr);
                            }
                            Err(_) => assert_eq!(pool.stats().allocations, before.allocations, "`{text}`"),
                        }
                    }
                }
            }
            for addr in EXTREMES {
                assert!(pool.free(addr).is_err(), "`{text}`: a free of {addr:#x}");
            }
            for &addr in &live {
                for stream in EXTREMES {
                    pool.record_stream(addr, StreamId(stream));
                }
            }
            for bytes in EXTREMES {
                let limit = pool.set_limit(Some(bytes)).unwrap();
                assert!(limit <= bytes, "`{text}`: limit {limit} for {bytes}");
            }
            pool.set_limit(None).unwrap();
            for addr in live {
                pool.free(addr).unwrap();
            }
            pool.trim().unwrap();
            assert_eq!(pool.stats().allocated_bytes.current, 0, "`{text}`");
        }
    }
}

/// A block's record keeps the bytes requested of it in 56 bits: no fixed block or class block is larger
/// than [`MAX_BLOCK_SIZE`], given or learned, so a request's size and stream read back as they were,
/// however large the device.
#[test]
fn blocks_are_never_larger_than_their_records_count() {
    let huge = || {
        let config = SimDeviceConfig::default().capacity(u64::MAX).address_space(u64::MAX).granularity(None);
        Arc::new(SimDevice::new(config))
    };
    for (text, key) in [
        ("strategy=fixed,block_size=1152921504606846976,block_count=1", "block_size"),
        ("strategy=hybrid,classes=72057594037927936x1", "classes"),
    ] {
        let err = PoolSpec::parse(text).unwrap().build_any(huge()).expect_err(text);
        assert!(matches!(&err, Error::InvalidConfig { field, .. } if *field == key), "{err}");
        assert!(err.to_string().contains(&MAX_BLOCK_SIZE.to_string()), "{err}");
    }
    let spec = "strategy=hybrid,max_class_size=18446744073709551615,warmup=2,deterministic=true,coverage=1,max_waste=1";
    let pool = PoolSpec::parse(spec).unwrap().build_any(huge()).unwrap();
    let size = 1 << 57;
    for _ in 0..2 {
        let block = pool.allocate(size, 256, StreamId::DEFAULT).unwrap();
        pool.free(block.addr).unwrap();
    }
    let block = pool.allocate(size, 256, StreamId(5)).unwrap();
    let report = pool.report();
    assert!(report.classes.iter().all(|class| class.block_size <= MAX_BLOCK_SIZE), "{:?}", report.classes);
    let listed = report.blocks.iter().find(|b| b.addr == block.addr).unwrap();
    assert_eq!((listed.size, listed.stream), (size, StreamId(5)));
    pool.free(block.addr).unwrap();
    assert_eq!(pool.stats().allocated_bytes.current, 0);
}
