//! What the trace-reading fuzz targets check of every input: reading it, strictly and leniently, ends in a
//! trace or an error, never a panic; a trace read writes out as a vrampool CSV log that reads back to the
//! same events; its summary, PyTorch's figures, its replay plan and the model of PyTorch's expandable segments
//! on it compute.

use vrampool::CostModel;
use vrampool_replay::{ReplayPlan, SizeProfile, expandable_segments};
use vrampool_trace::{
    EventKind, PytorchBaseline, ReadOptions, Trace, TraceSummary, VrampoolCsvWriter, parse_trace, parse_traces,
};

/// The most content a fuzz input is read to: enough for any input the fuzzer makes, small enough that a
/// gzip bomb it finds costs little time.
pub const MAX_CONTENT_BYTES: u64 = 16 << 20;

/// Reads `bytes` as a trace file named `name`, strictly and leniently, and checks every trace read.
pub fn read_and_check(name: &str, bytes: &[u8]) {
    for lenient in [false, true] {
        let options = ReadOptions::default().lenient(lenient).max_content_bytes(MAX_CONTENT_BYTES);
        if let Ok(traces) = parse_traces(name, bytes, &options) {
            traces.iter().for_each(check);
        }
    }
}

/// Checks a trace that was read.
pub fn check(trace: &Trace) {
    TraceSummary::of(trace);
    PytorchBaseline::of(trace).utilization();
    if let Ok(plan) = ReplayPlan::from_trace(trace) {
        let profile = SizeProfile::of(&plan);
        profile.percentile(0.5);
        profile.sizes_covering(0.9);
        let expandable = expandable_segments(&plan, &CostModel::default());
        assert!(
            expandable.peak_reserved_bytes >= expandable.peak_live_bytes,
            "expandable segments map at least what is live: {expandable:?}"
        );
    }
    let mut writer = VrampoolCsvWriter::new(Vec::new()).expect("writing to memory");
    writer.write_trace(trace).expect("writing to memory");
    let log = writer.finish().expect("writing to memory");
    let again = parse_trace("again.csv", &log, &ReadOptions::default())
        .unwrap_or_else(|error| panic!("a trace read does not read back from its CSV log: {error}"));
    let live = trace.initial_live.len();
    assert_eq!(again.events.len(), live + trace.events.len(), "the log holds each event once");
    assert!(again.events[..live].iter().zip(&trace.initial_live).all(|(event, block)| {
        event.kind == EventKind::Alloc
            && (event.addr, event.size, event.stream) == (block.addr, block.size, block.stream)
    }));
    assert_eq!(&again.events[live..], &trace.events[..], "the log reads back to the same events");
}
