//! The examples of `traces/README.md` read as it says they do, so that the README cannot drift from the
//! readers: each ```csv block as it stands and gzipped, and the snapshot its ```python block writes
//! (`tests/data/readme_tiny.pickle`, which `tests/data/generate.py` makes by running that very block), whose
//! events must be the entries the block lists.

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;

use common::{data, data_bytes};
use vrampool_trace::{Event, EventKind, ReadOptions, Trace, TraceFormat, parse_trace, read_trace};

/// The text of `traces/README.md`.
fn readme() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../traces/README.md");
    std::fs::read_to_string(path).expect("traces/README.md reads")
}

/// The contents of the README's fenced blocks whose info string is `language`, in order.
fn blocks(readme: &str, language: &str) -> Vec<String> {
    let opening = format!("```{language}\n");
    readme
        .split(opening.as_str())
        .skip(1)
        .map(|rest| rest.split("```").next().expect("a block ends").to_owned())
        .collect()
}

/// `bytes` gzipped.
fn gzipped(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// Reads `bytes` as the README's example `name`, strictly, plain and gzipped (the two must read the same).
fn read_example(name: &str, bytes: &[u8]) -> Trace {
    let trace = parse_trace(name, bytes, &ReadOptions::default()).unwrap_or_else(|err| panic!("{name}: {err}"));
    let from_gzip = parse_trace(name, &gzipped(bytes), &ReadOptions::default()).unwrap();
    assert_eq!(from_gzip, trace, "{name} gzipped");
    assert_eq!((trace.skipped, trace.ignored, trace.unknown_actions), (0, 0, 0), "{name}");
    trace
}

/// The events as they would be with their first at time 0.
fn from_zero(events: &[Event]) -> Vec<Event> {
    let start = events.first().map_or(0, |event| event.time_us);
    events.iter().map(|event| Event { time_us: event.time_us - start, ..*event }).collect()
}

#[test]
fn every_csv_example_reads_as_the_readme_says() {
    let readme = readme();
    let examples = blocks(&readme, "csv");
    assert_eq!(examples.len(), 3, "two RMM logs and a vrampool CSV");
    let mut traces = Vec::new();
    for (index, example) in examples.iter().enumerate() {
        let trace = read_example(&format!("example{index}.csv"), example.as_bytes());
        let lines = example.lines().filter(|line| !line.trim().is_empty()).count();
        assert_eq!(trace.events.len(), lines - 1, "one event per line after the header:\n{example}");
        traces.push(trace);
    }
    let formats: Vec<Option<TraceFormat>> = traces.iter().map(|trace| trace.format).collect();
    assert_eq!(formats, [Some(TraceFormat::RmmCsv), Some(TraceFormat::RmmCsv), Some(TraceFormat::VrampoolCsv)]);

    // The RMM log with `0x` and times of day, past midnight.
    let stream = 0x7f8a_3800_1020;
    let day = 86_400_000_000;
    assert_eq!(
        traces[0].events,
        [
            Event::new(day - 500_000, EventKind::Alloc, 0x7f8a_4000_0000, 1024, 0),
            Event::new(day - 250_000, EventKind::Alloc, 0x7f8a_4000_0400, 2048, stream),
            Event::new(day - 100_000, EventKind::AllocFailure, 0, 1 << 40, 0),
            Event::new(day + 250_000, EventKind::Free, 0x7f8a_4000_0000, 1024, 0),
            Event::new(day + 1_000_000, EventKind::Free, 0x7f8a_4000_0400, 2048, stream),
        ]
    );
    // "The same calls" in bare hexadecimal and seconds: the same events at the same intervals.
    let calls: Vec<Event> =
        traces[0].events.iter().copied().filter(|event| event.kind != EventKind::AllocFailure).collect();
    assert_eq!(from_zero(&traces[1].events), from_zero(&calls));
    assert_eq!(traces[1].events[0].time_us, 1_700_000_000_500_000);

    assert_eq!(
        traces[2].events,
        [
            Event::new(0, EventKind::SegmentAlloc, 0x7f00_0000_0000, 2 << 20, 0),
            Event::new(1000, EventKind::Alloc, 0x7f00_0000_0000, 1_000_000, 0),
            Event::new(1500, EventKind::Alloc, 0x7f00_0010_0000, 4096, 16),
            Event::new(6000, EventKind::Free, 0x7f00_0000_0000, 1_000_000, 0),
            Event::new(9000, EventKind::Free, 0x7f00_0010_0000, 4096, 16),
        ]
    );
}

/// A number as the Python example writes it: decimal, or hexadecimal after `0x`.
fn python_int(text: &str) -> u64 {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).unwrap(),
        None => text.parse().unwrap(),
    }
}

/// The events of the entries the Python example lists: each line holding one `{"action": ..., ...}` dict.
fn listed_entries(code: &str) -> Vec<Event> {
    let mut events = Vec::new();
    for line in code.lines().map(str::trim).filter(|line| line.starts_with("{\"action\"")) {
        let body = line.trim_end_matches(',').trim_start_matches('{').trim_end_matches('}');
        let field = |key: &str| -> &str {
            body.split(", ")
                .find_map(|pair| pair.strip_prefix(&format!("\"{key}\": ")))
                .unwrap_or_else(|| panic!("`{key}` in {line}"))
        };
        let action = field("action").trim_matches('"');
        let kind = match action {
            "free_completed" => EventKind::Free,
            other => EventKind::from_name(other).unwrap_or_else(|| panic!("{other}")),
        };
        let time_us = python_int(field("time_us")) as i64;
        events.push(Event::new(
            time_us,
            kind,
            python_int(field("addr")),
            python_int(field("size")),
            python_int(field("stream")),
        ));
    }
    events
}

#[test]
fn the_snapshot_the_python_example_writes_reads_as_the_entries_it_lists() {
    let readme = readme();
    let examples = blocks(&readme, "python");
    assert_eq!(examples.len(), 1);
    let listed = listed_entries(&examples[0]);
    assert_eq!(listed.len(), 4, "{}", examples[0]);
    let trace = read_trace(data("readme_tiny.pickle"), &ReadOptions::default()).unwrap();
    assert_eq!(trace.format, Some(TraceFormat::PytorchSnapshot));
    assert_eq!(
        trace.events, listed,
        "tests/data/readme_tiny.pickle is not what the README's example writes: run tests/data/generate.py"
    );
    assert_eq!(read_example("tiny.pickle", &data_bytes("readme_tiny.pickle")).events, trace.events, "and gzipped");
}

/// The README has an example of every format.
#[test]
fn the_examples_cover_every_format() {
    let readme = readme();
    let mut formats = BTreeSet::new();
    for example in blocks(&readme, "csv") {
        formats
            .insert(format!("{:?}", parse_trace("e.csv", example.as_bytes(), &ReadOptions::default()).unwrap().format));
    }
    formats.insert(format!("{:?}", read_trace(data("readme_tiny.pickle"), &ReadOptions::default()).unwrap().format));
    let every: BTreeSet<String> = [TraceFormat::PytorchSnapshot, TraceFormat::RmmCsv, TraceFormat::VrampoolCsv]
        .into_iter()
        .map(|format| format!("{:?}", Some(format)))
        .collect();
    assert_eq!(formats, every);
}
