//! Crafted PyTorch snapshots (`tests/data/generate.py`): every pickle protocol, two devices, every action,
//! unknown keys and values, and a ring buffer that dropped its oldest entries.

mod common;

use common::{data, data_bytes};
use vrampool_trace::{
    Error, Event, EventKind, LiveBlock, Location, PytorchBaseline, ReadOptions, TraceFormat, TraceSummary, parse_trace,
    read_trace, read_traces,
};

const T0: i64 = 1_796_219_185_214_220;
const MIB: u64 = 1 << 20;
const A: u64 = 0x7F00_0000_0000;
const B: u64 = 0x7F00_0000_0400;
const S: u64 = 0x7F10_0000_0000;
const Y: u64 = 0x7F10_0000_1000;
const M: u64 = 0x7F20_0000_0000;
const BIG_STREAM: u64 = 0x7F3C_2000_1230;

/// Device 0 of the crafted snapshot, as the reader must give it.
fn device0_events() -> Vec<Event> {
    use EventKind::*;
    vec![
        Event::new(T0, FreeRequested, A, 512, 0),
        Event::new(T0 + 1, Free, A, 512, 0),
        Event::new(T0 + 2, Free, B, 1024, 0),
        Event::new(T0 + 3, SegmentAlloc, S, 2 * MIB, 0),
        Event::new(T0 + 4, Alloc, S, 1000, 0),
        // annotate, ignored
        Event::new(T0 + 6, Alloc, Y, 3000, BIG_STREAM),
        // snapshot, ignored
        Event::new(T0 + 8, FreeRequested, S, 1000, 0),
        Event::new(T0 + 9, Oom, 123_456_789, 64 * MIB, 0),
        Event::new(T0 + 10, Free, S, 1000, 0),
        Event::new(T0 + 11, SegmentMap, M, 2 * MIB, 0),
        Event::new(T0 + 12, SegmentUnmap, M, 2 * MIB, 0),
        // user_defined, ignored
        Event::new(T0 + 14, FreeRequested, Y, 3000, BIG_STREAM),
        Event::new(T0 + 15, Free, Y, 3000, BIG_STREAM),
        Event::new(T0 + 16, SegmentFree, S, 2 * MIB, 0),
        Event::new(T0 + 17, Alloc, 1 << 63, 7, 0),
    ]
}

#[test]
fn every_protocol_and_gzip_decode_to_the_same_events() {
    let mut files: Vec<String> = (0..=5).map(|protocol| format!("small_snapshot.p{protocol}.pickle")).collect();
    files.push("small_snapshot.p4.pickle.gz".to_owned());
    for file in files {
        let trace = read_trace(data(&file), &ReadOptions::default().device(0)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(trace.name, file);
        assert_eq!(trace.format, Some(TraceFormat::PytorchSnapshot));
        assert_eq!(trace.device, 0);
        assert_eq!(trace.events, device0_events(), "{file}");
        assert_eq!(trace.ignored, 3, "{file}: annotate, snapshot and user_defined are left out");
        assert_eq!(trace.skipped, 0);
        assert_eq!(
            trace.initial_live,
            [LiveBlock { addr: A, size: 512, stream: 0 }, LiveBlock { addr: B, size: 1024, stream: 0 }],
            "{file}: blocks freed but never allocated are live from the start"
        );

        let device1 = read_trace(data(&file), &ReadOptions::default().device(1)).unwrap();
        assert_eq!(device1.device, 1);
        assert_eq!(
            device1.events,
            [
                Event::new(T0 + 100, EventKind::SegmentAlloc, 0x7E00_0000_0000, 20 * MIB, 7),
                Event::new(T0 + 101, EventKind::Alloc, 0x7E00_0000_0000, 5 * MIB, 7),
                Event::new(T0 + 102, EventKind::Alloc, 0x7E00_0050_0000, 6 * MIB, 7),
            ]
        );
    }
}

#[test]
fn the_baseline_counts_initial_live_blocks_and_mapped_segments() {
    let trace = read_trace(data("small_snapshot.p4.pickle"), &ReadOptions::default().device(0)).unwrap();
    let baseline = PytorchBaseline::of(&trace);
    // Live: 1536 from the start, down to 0 by event 2, then 1000 + 3000.
    assert_eq!(baseline.peak_live_bytes, 4000);
    // Reserved: the 2 MiB segment plus the 2 MiB mapped, then both gone.
    assert_eq!(baseline.peak_reserved_bytes, 4 * MIB);
    assert_eq!(baseline.utilization(), Some(4000.0 / (4 * MIB) as f64));

    let summary = TraceSummary::of(&trace);
    assert_eq!(summary.events, 15);
    assert_eq!(summary.allocations, 3);
    assert_eq!(summary.frees, 4);
    assert_eq!(summary.segment_events, 4);
    assert_eq!(summary.failures, 1);
    assert_eq!(summary.streams, 2);
    assert_eq!(summary.initial_live_blocks, 2);
    assert_eq!((summary.size_p50, summary.size_max, summary.distinct_sizes), (1000, 3000, 3));
}

#[test]
fn a_snapshot_with_events_on_two_devices_needs_a_device_choice() {
    let error = read_trace(data("small_snapshot.p4.pickle"), &ReadOptions::default()).unwrap_err();
    assert!(matches!(&error, Error::AmbiguousDevice { devices, .. } if devices == &[0, 1]), "{error}");
    assert!(error.to_string().starts_with("small_snapshot.p4.pickle: devices [0, 1]"), "{error}");

    let traces = read_traces(data("small_snapshot.p4.pickle"), &ReadOptions::default()).unwrap();
    assert_eq!(traces.iter().map(|t| (t.device, t.events.len())).collect::<Vec<_>>(), [(0, 15), (1, 3)]);
    let only_one = read_traces(data("small_snapshot.p4.pickle"), &ReadOptions::default().device(1)).unwrap();
    assert_eq!(only_one.len(), 1);
    assert_eq!(only_one[0].device, 1);

    let error = read_trace(data("small_snapshot.p4.pickle"), &ReadOptions::default().device(2)).unwrap_err();
    assert!(matches!(error, Error::NoSuchDevice { device: 2, devices: 2, .. }), "{error}");
}

#[test]
fn the_only_device_with_events_is_read_by_default() {
    let trace = read_trace(data("second_device_only.pickle"), &ReadOptions::default()).unwrap();
    assert_eq!(trace.device, 1);
    assert_eq!(trace.events.len(), 3);
    let empty = read_trace(data("second_device_only.pickle"), &ReadOptions::default().device(0)).unwrap();
    assert!(empty.events.is_empty());
}

#[test]
fn bad_entries_fail_a_strict_read_at_the_first_one() {
    let error = read_trace(data("bad_entries.pickle"), &ReadOptions::default()).unwrap_err();
    assert!(matches!(&error, Error::BadRecord { at: Location::Event { device: 0, index: 1 }, .. }), "{error:?}");
    assert_eq!(error.to_string(), "bad_entries.pickle: device 0 event 1: the alloc entry has no `addr`");
}

#[test]
fn a_lenient_read_skips_each_bad_entry_and_says_why() {
    let trace = read_trace(data("bad_entries.pickle"), &ReadOptions::default().lenient(true)).unwrap();
    assert_eq!(
        trace.events,
        [
            Event::new(1, EventKind::Alloc, 0x1000, 256, 0),
            Event::new(6, EventKind::Free, 0x1000, 256, 0),
            Event::new(8, EventKind::Alloc, 0x4000, 512, 0),
            Event::new(13, EventKind::Free, 0x4000, 512, 0),
        ]
    );
    // The free of the skipped allocation at 0x2000 is skipped too, not taken as a block live from the start.
    assert!(trace.initial_live.is_empty());
    let expected = [
        (1, "has no `addr`"),
        (2, "`size` is a string, not a 64-bit integer"),
        (3, "free of 0x2000, whose allocation was skipped as bad"),
        (4, "`size` is negative (-4)"),
        (6, "double free of 0x1000: the block was freed already at device 0 event 5"),
        (8, "allocation of 512 bytes at 0x4000, where the block allocated at device 0 event 7 is still live"),
        (9, "free of 0x4000 with size 100, but the block was allocated with size 512 at device 0 event 7"),
        (10, "the entry has no `action`"),
        (11, "the entry is an integer, not a dict"),
        (12, "`action` is an integer, not a string"),
    ];
    assert_eq!(trace.skipped, expected.len());
    for (reason, (index, phrase)) in trace.skipped_reasons.iter().zip(expected) {
        assert!(reason.starts_with(&format!("bad_entries.pickle: device 0 event {index}: ")), "{reason}");
        assert!(reason.contains(phrase), "{reason} does not say {phrase}");
    }
}

#[test]
fn snapshots_read_from_bytes_and_readers_alike() {
    let bytes = data_bytes("small_snapshot.p4.pickle.gz");
    let options = ReadOptions::default().device(0);
    let from_bytes = parse_trace("snap", &bytes, &options).unwrap();
    let from_reader = vrampool_trace::read_trace_from("snap", &bytes[..], &options).unwrap();
    assert_eq!(from_bytes, from_reader);
    assert_eq!(from_bytes.name, "snap");
    assert_eq!(from_bytes.events, device0_events());
}

/// Appends a length-prefixed string opcode: `code`, the length as `width` little-endian bytes, the text.
fn string_op(pickle: &mut Vec<u8>, code: u8, width: usize, text: &str) {
    pickle.push(code);
    pickle.extend_from_slice(&(text.len() as u64).to_le_bytes()[..width]);
    pickle.extend_from_slice(text.as_bytes());
}

#[test]
fn the_less_common_data_opcodes_decode() {
    // A snapshot written with the opcodes Python 3 rarely emits for it: STRING, SHORT_BINSTRING, BINSTRING,
    // BINUNICODE8, UNICODE, LONG4, BINBYTES8, READONLY_BUFFER, LONG_BINPUT/LONG_BINGET, DUP, POP, POP_MARK,
    // and SETITEM, APPEND outside protocol 0.
    let mut p = vec![0x80, 5, b'}', b'r', 0, 0, 0, 0];
    p.extend_from_slice(b"S'device_traces'\n");
    p.extend_from_slice(b"]]("); // outer list, device list, MARK for the entries
    // Entry 1: {'action': 'alloc', 'addr': 2**63, 'size': 4096, 'stream': 7, 'junk': b'abc', 'x': 9}
    p.extend_from_slice(b"}(");
    p.extend_from_slice(b"(K\x01K\x021"); // MARK, 1, 2, POP_MARK: leaves nothing
    string_op(&mut p, b'U', 1, "action");
    string_op(&mut p, b'U', 1, "alloc");
    string_op(&mut p, b'T', 4, "addr");
    p.extend_from_slice(&[0x8b, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0]); // LONG4: 2**63
    p.extend_from_slice(&[b'r', 4, 0, 0, 0]);
    string_op(&mut p, 0x8d, 8, "size");
    p.extend_from_slice(&[b'r', 3, 0, 0, 0]);
    p.extend_from_slice(&[0x8a, 2, 0x00, 0x10]); // LONG1: 4096
    string_op(&mut p, b'X', 4, "stream");
    p.extend_from_slice(&[b'J', 7, 0, 0, 0]);
    string_op(&mut p, 0x8c, 1, "junk");
    string_op(&mut p, 0x8e, 8, "abc");
    p.push(0x98); // READONLY_BUFFER
    string_op(&mut p, 0x8c, 1, "x");
    p.extend_from_slice(b"K\x0920"); // 9, DUP, POP
    p.extend_from_slice(b"u20"); // SETITEMS, DUP, POP
    // Entry 2: {'action': 'free_completed', 'addr': <memo 4>, 'size' (memo 3): 4096}, one SETITEM at a time.
    p.extend_from_slice(b"}Vaction\nVfree_completed\nsVaddr\n");
    p.extend_from_slice(&[b'j', 4, 0, 0, 0, b's', b'j', 3, 0, 0, 0, b'M', 0x00, 0x10, b's']);
    p.extend_from_slice(b"eas."); // APPENDS (entries), APPEND (device list), SETITEM (device_traces), STOP

    let trace = parse_trace("rare.pickle", &p, &ReadOptions::default()).unwrap();
    assert_eq!(
        trace.events,
        [Event::new(0, EventKind::Alloc, 1 << 63, 4096, 7), Event::new(0, EventKind::Free, 1 << 63, 4096, 0)]
    );
}
