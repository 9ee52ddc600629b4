//! Inputs the fuzz targets (`fuzz/` at the repository root) found to break a property of the readers, kept in
//! `tests/data/fuzz/`: each now reads or fails with an error, and a trace it reads writes out as a vrampool
//! CSV log that reads back to the same events.

mod common;

use common::data;
use vrampool_trace::{EventKind, ReadOptions, VrampoolCsvWriter, parse_trace, parse_traces};

#[test]
fn every_input_the_fuzzers_found_reads_back_from_its_csv_log() {
    let folder = data("fuzz");
    let mut files: Vec<_> = std::fs::read_dir(&folder).unwrap().map(|entry| entry.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty(), "{}", folder.display());
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        for lenient in [false, true] {
            let Ok(traces) = parse_traces("found", &bytes, &ReadOptions::default().lenient(lenient)) else { continue };
            for trace in traces {
                let mut writer = VrampoolCsvWriter::new(Vec::new()).unwrap();
                writer.write_trace(&trace).unwrap();
                let log = writer.finish().unwrap();
                let again = parse_trace("again.csv", &log, &ReadOptions::default())
                    .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
                let live = trace.initial_live.len();
                assert!(again.events[..live].iter().all(|event| event.kind == EventKind::Alloc));
                assert_eq!(&again.events[live..], &trace.events[..], "{}", file.display());
            }
        }
    }
}
