//! RMM `logging_resource_adaptor` logs.

mod common;

use common::data;
use vrampool_trace::{Error, Event, EventKind, Location, PytorchBaseline, ReadOptions, TraceFormat, read_trace};

const DAY_US: i64 = 86_400_000_000;

#[test]
fn an_rmm_log_reads_with_failures_streams_and_a_midnight() {
    let trace = read_trace(data("rmm_small.csv"), &ReadOptions::default()).unwrap();
    assert_eq!(trace.format, Some(TraceFormat::RmmCsv));
    assert_eq!(trace.name, "rmm_small.csv");
    let stream = 0x7f8a_3800_1020;
    assert_eq!(
        trace.events,
        [
            Event::new(DAY_US - 500_000, EventKind::Alloc, 0x7f8a_4000_0000, 1024, 0),
            Event::new(DAY_US - 250_000, EventKind::Alloc, 0x7f8a_4000_0400, 2048, stream),
            Event::new(DAY_US - 100_000, EventKind::AllocFailure, 0, 1 << 40, 0),
            // Past midnight, the clock keeps counting.
            Event::new(DAY_US + 250_000, EventKind::Free, 0x7f8a_4000_0000, 1024, 0),
            Event::new(DAY_US + 1_000_000, EventKind::Free, 0x7f8a_4000_0400, 2048, stream),
        ]
    );
    let baseline = PytorchBaseline::of(&trace);
    assert_eq!(baseline.peak_live_bytes, 3072);
    assert_eq!(baseline.utilization(), None, "an RMM log has no segment events");
}

#[test]
fn bare_hex_pointers_mean_a_bare_hex_stream() {
    let trace = read_trace(data("rmm_bare_hex.csv"), &ReadOptions::default()).unwrap();
    assert_eq!(trace.events.len(), 2);
    assert_eq!(trace.events[0], Event::new(36_000_000_001, EventKind::Alloc, 0x7f8a_4000_0000, 4096, 0x10));
}

#[test]
fn a_free_of_an_unknown_pointer_names_the_file_and_line() {
    let error = read_trace(data("rmm_unknown_free.csv"), &ReadOptions::default()).unwrap_err();
    assert!(matches!(error, Error::FreeOfUnknownBlock { at: Location::Line(3), addr: 0x2000, .. }), "{error}");
    assert_eq!(error.to_string(), "rmm_unknown_free.csv: line 3: free of 0x2000, which the log never allocated");

    let trace = read_trace(data("rmm_unknown_free.csv"), &ReadOptions::default().lenient(true)).unwrap();
    assert_eq!(trace.skipped, 1);
    assert_eq!(trace.events.len(), 2);
    assert!(trace.initial_live.is_empty(), "a log's unknown free is not a block live from the start");
}

#[test]
fn malformed_lines_fail_strictly_and_are_skipped_leniently() {
    let error = read_trace(data("rmm_malformed.csv"), &ReadOptions::default()).unwrap_err();
    assert_eq!(error.to_string(), "rmm_malformed.csv: line 3: pointer `0xZZZZ` is not a hexadecimal number");

    let trace = read_trace(data("rmm_malformed.csv"), &ReadOptions::default().lenient(true)).unwrap();
    assert_eq!(trace.skipped, 3);
    assert_eq!(
        trace.events.iter().map(|e| (e.kind, e.addr)).collect::<Vec<_>>(),
        [(EventKind::Alloc, 0x1000), (EventKind::Free, 0x1000)]
    );
    assert!(
        trace.skipped_reasons[1].starts_with("rmm_malformed.csv: line 4: expected 6 comma-separated fields, found 5")
    );
    assert!(trace.skipped_reasons[2].ends_with("line 5: unknown action `reallocate`"), "{}", trace.skipped_reasons[2]);
}
