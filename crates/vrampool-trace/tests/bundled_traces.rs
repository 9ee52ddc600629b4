//! The bundled PyTorch snapshots in `traces/`: decoded events, summaries and PyTorch's own baseline, checked
//! against what Python's `pickle` module reads from the same files (`tests/data/real_traces_expected.txt`,
//! written by `tests/data/generate.py`) and against the figures of `traces/README.md`.

mod common;

use std::io::Read;

use common::{bundled, data};
use vrampool_trace::{
    PytorchBaseline, ReadOptions, Trace, TraceFormat, TraceSummary, parse_trace, read_trace, read_traces,
};

const MIB: f64 = (1u64 << 20) as f64;
const KIB: f64 = 1024.0;
const GIB: f64 = (1u64 << 30) as f64;

/// One line of `real_traces_expected.txt`.
#[derive(Debug)]
struct Expected {
    entries: usize,
    allocations: usize,
    distinct_sizes: usize,
    p50: u64,
    p90: u64,
    max: u64,
    peak_live: u64,
    peak_reserved: u64,
    event_hash: u64,
}

fn expected(file: &str) -> Expected {
    let text = std::fs::read_to_string(data("real_traces_expected.txt")).unwrap();
    let line = text.lines().find(|line| line.split_whitespace().next() == Some(file)).unwrap();
    let numbers: Vec<u64> = line.split_whitespace().skip(1).map(|n| n.parse().unwrap()).collect();
    let [entries, allocations, distinct_sizes, p50, p90, max, peak_live, peak_reserved, event_hash] = numbers[..]
    else {
        panic!("bad line {line}")
    };
    Expected {
        entries: entries as usize,
        allocations: allocations as usize,
        distinct_sizes: distinct_sizes as usize,
        p50,
        p90,
        max,
        peak_live,
        peak_reserved,
        event_hash,
    }
}

/// The hash `generate.py` computes over (kind, addr, size, stream, time_us) of every entry.
fn event_hash(trace: &Trace) -> u64 {
    let mut hash: u64 = 0;
    for event in &trace.events {
        for value in [event.kind as u64, event.addr, event.size, event.stream, event.time_us as u64] {
            hash = hash.wrapping_mul(1_099_511_628_211).wrapping_add(value);
        }
    }
    hash
}

fn mib(bytes: u64) -> u64 {
    (bytes as f64 / MIB).round() as u64
}

fn three_decimals(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// Reads a bundled trace and checks it against Python's reading; returns it with its summary and baseline.
fn check_against_python(file: &str) -> (Trace, TraceSummary, PytorchBaseline) {
    let trace = read_trace(bundled(file), &ReadOptions::default()).unwrap();
    let expected = expected(file);
    assert_eq!(trace.name, file);
    assert_eq!(trace.format, Some(TraceFormat::PytorchSnapshot));
    assert_eq!(trace.device, 0);
    assert_eq!(trace.events.len(), expected.entries, "every entry of these traces is an event");
    assert_eq!((trace.skipped, trace.ignored), (0, 0));
    assert!(trace.initial_live.is_empty(), "every freed block is allocated in these traces");
    assert!(trace.events.iter().all(|event| event.stream == 0), "README: all events are on stream 0");
    assert_eq!(event_hash(&trace), expected.event_hash, "events differ from Python's reading");

    let summary = TraceSummary::of(&trace);
    assert_eq!(summary.events, expected.entries);
    assert_eq!(summary.allocations, expected.allocations);
    assert_eq!(summary.distinct_sizes, expected.distinct_sizes);
    assert_eq!((summary.size_p50, summary.size_p90, summary.size_max), (expected.p50, expected.p90, expected.max));
    assert_eq!(summary.streams, 1);

    let baseline = PytorchBaseline::of(&trace);
    assert_eq!(baseline.peak_live_bytes, expected.peak_live);
    assert_eq!(baseline.peak_reserved_bytes, expected.peak_reserved);
    assert_eq!(baseline.initial_reserved_bytes, 0);
    (trace, summary, baseline)
}

#[test]
fn resnet_train_fixed_matches_python_and_the_readme() {
    let (_, summary, baseline) = check_against_python("resnet_train_fixed.pickle.gz");
    // README table: 17,979 events, 5,958 allocations, 68 distinct sizes, 4 MiB / 81.5 MiB / 302 MiB.
    assert_eq!((summary.events, summary.allocations, summary.distinct_sizes), (17_979, 5_958, 68));
    assert_eq!(summary.size_p50 as f64 / MIB, 4.0);
    assert_eq!((summary.size_p90 as f64 / MIB * 10.0).round() / 10.0, 81.5);
    assert_eq!((summary.size_max as f64 / MIB).round(), 302.0);
    // README: 5,607 MiB live, 6,706 MiB reserved, utilization 0.836.
    assert_eq!(mib(baseline.peak_live_bytes), 5_607);
    assert_eq!(mib(baseline.peak_reserved_bytes), 6_706);
    assert_eq!(three_decimals(baseline.utilization().unwrap()), 0.836);
}

#[test]
fn gpt_train_varlen_matches_python_and_the_readme() {
    let (_, summary, baseline) = check_against_python("gpt_train_varlen.pickle.gz");
    // README table: 86,886 events, 28,896 allocations, 386 distinct sizes, 4.5 MiB / 62.7 MiB / 5.06 GiB.
    assert_eq!((summary.events, summary.allocations, summary.distinct_sizes), (86_886, 28_896, 386));
    assert_eq!(summary.size_p50 as f64 / MIB, 4.5);
    assert_eq!((summary.size_p90 as f64 / MIB * 10.0).round() / 10.0, 62.7);
    assert_eq!((summary.size_max as f64 / GIB * 100.0).round() / 100.0, 5.06);
    // README: 38,716 MiB live, 49,888 MiB reserved, utilization 0.776.
    assert_eq!(mib(baseline.peak_live_bytes), 38_716);
    assert_eq!(mib(baseline.peak_reserved_bytes), 49_888);
    assert_eq!(three_decimals(baseline.utilization().unwrap()), 0.776);
}

#[test]
fn gpt_serve_matches_python_and_the_readme() {
    let (trace, summary, baseline) = check_against_python("gpt_serve.pickle.gz");
    // README table: 980,456 events, 326,806 allocations, 1,945 distinct sizes, 6 KiB / 50 KiB / 147 MiB.
    assert_eq!((summary.events, summary.allocations, summary.distinct_sizes), (980_456, 326_806, 1_945));
    assert_eq!(summary.size_p50 as f64 / KIB, 6.0);
    assert_eq!((summary.size_p90 as f64 / KIB).round(), 50.0);
    assert_eq!((summary.size_max as f64 / MIB).round(), 147.0);
    // README: 548 MiB live, 636 MiB reserved, utilization 0.862.
    assert_eq!(mib(baseline.peak_live_bytes), 548);
    assert_eq!(mib(baseline.peak_reserved_bytes), 636);
    assert_eq!(three_decimals(baseline.utilization().unwrap()), 0.862);

    // The same content, decompressed, reads the same: the format comes from the content.
    let mut plain = Vec::new();
    let compressed = std::fs::read(bundled("gpt_serve.pickle.gz")).unwrap();
    flate2::read::GzDecoder::new(&compressed[..]).read_to_end(&mut plain).unwrap();
    let from_plain = parse_trace("gpt_serve.pickle", &plain, &ReadOptions::default()).unwrap();
    assert_eq!(from_plain.events, trace.events);
}

#[test]
fn live_bytes_drop_at_free_requested_or_free_completed_alike_on_these_traces() {
    // The baseline drops live bytes at free_completed; on these traces dropping them at free_requested gives
    // the same peak, because each free_requested is followed at once by its free_completed.
    for file in ["resnet_train_fixed.pickle.gz", "gpt_train_varlen.pickle.gz"] {
        let trace = read_trace(bundled(file), &ReadOptions::default()).unwrap();
        let mut sizes = std::collections::HashMap::new();
        let (mut live, mut peak) = (0u64, 0u64);
        for event in &trace.events {
            match event.kind {
                vrampool_trace::EventKind::Alloc => {
                    sizes.insert(event.addr, event.size);
                    live += event.size;
                    peak = peak.max(live);
                }
                vrampool_trace::EventKind::FreeRequested => live -= sizes.remove(&event.addr).unwrap(),
                _ => {}
            }
        }
        assert_eq!(peak, PytorchBaseline::of(&trace).peak_live_bytes, "{file}");
    }
}

#[test]
fn read_traces_gives_the_one_device_of_a_bundled_trace() {
    let traces = read_traces(bundled("resnet_train_fixed.pickle.gz"), &ReadOptions::default()).unwrap();
    assert_eq!(traces.len(), 1);
    assert_eq!(traces[0].events.len(), 17_979);
}
