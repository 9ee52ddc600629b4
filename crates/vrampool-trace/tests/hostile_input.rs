//! Input built to exhaust the reader: huge claims, decompression bombs, endless streams. Each ends in a clear
//! error naming the file and the limit, soon and in little memory, and what a genuine trace needs still reads.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::data_bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use vrampool_trace::{DEFAULT_MAX_CONTENT_BYTES, Error, EventKind, ReadOptions, parse_trace, read_trace};

/// `bytes` as one gzip member.
fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// A gzip file whose content is `head` followed by `times` MiB of `fill`: cheap to build however large its
/// content, since gzip members simply follow one another.
fn gz_bomb(head: &[u8], fill: &[u8], times: usize) -> Vec<u8> {
    let mebibyte: Vec<u8> = fill.iter().copied().cycle().take(1 << 20).collect();
    let member = gz(&mebibyte);
    let mut file = gz(head);
    for _ in 0..times {
        file.extend_from_slice(&member);
    }
    file
}

/// A read of `bytes` named `name` that must fail within `seconds`.
fn read_error(name: &str, bytes: &[u8], options: &ReadOptions, seconds: u64) -> Error {
    let start = Instant::now();
    let error = parse_trace(name, bytes, options).expect_err("hostile input must not read");
    assert!(start.elapsed() < Duration::from_secs(seconds), "{name}: {:?} before the error {error}", start.elapsed());
    error
}

/// Pickle opcodes for the snapshots built here.
mod op {
    pub const PROTO4: [u8; 2] = [0x80, 4];
    pub const EMPTY_DICT: u8 = b'}';
    pub const EMPTY_LIST: u8 = b']';
    pub const MARK: u8 = b'(';
    pub const NONE: u8 = b'N';
    pub const SETITEM: u8 = b's';
    pub const SETITEMS: u8 = b'u';
    pub const APPEND: u8 = b'a';
    pub const APPENDS: u8 = b'e';
    pub const MEMOIZE: u8 = 0x94;
    pub const LONG_BINPUT: u8 = b'r';
    pub const LONG_BINGET: u8 = b'j';
    pub const STOP: u8 = b'.';
}

/// A SHORT_BINUNICODE of `text`.
fn text(text: &str) -> Vec<u8> {
    let mut bytes = vec![0x8c, text.len() as u8];
    bytes.extend_from_slice(text.as_bytes());
    bytes
}

/// A LONG1 of `value`.
fn long(value: i64) -> Vec<u8> {
    let mut bytes = vec![0x8a, 8];
    bytes.extend_from_slice(&value.to_le_bytes());
    bytes
}

/// A trace entry dict.
fn entry(action: &str, addr: u64, size: u64, time_us: i64) -> Vec<u8> {
    let mut bytes = vec![op::EMPTY_DICT, op::MARK];
    for (key, value) in
        [("action", text(action)), ("addr", long(addr as i64)), ("size", long(size as i64)), ("time_us", long(time_us))]
    {
        bytes.extend(text(key));
        bytes.extend(value);
    }
    bytes.push(op::SETITEMS);
    bytes
}

/// `{"device_traces": [[entries...]]}`: the pickle's start (up to the device trace's open MARK), and its end.
fn snapshot_parts() -> (Vec<u8>, Vec<u8>) {
    let mut head = op::PROTO4.to_vec();
    head.push(op::EMPTY_DICT);
    head.extend(text("device_traces"));
    head.extend([op::EMPTY_LIST, op::EMPTY_LIST, op::MARK]);
    (head, vec![op::APPENDS, op::APPEND, op::SETITEM, op::STOP])
}

/// A snapshot of `entries` on device 0.
fn snapshot(entries: &[Vec<u8>]) -> Vec<u8> {
    let (mut pickle, end) = snapshot_parts();
    entries.iter().for_each(|entry| pickle.extend(entry));
    pickle.extend(end);
    pickle
}

#[test]
fn a_gigabyte_of_none_in_one_list_stops_at_the_stack_limit() {
    // 1 GiB of NONE opcodes after a list's MARK, in about a megabyte of gzip.
    let (head, _) = snapshot_parts();
    let file = gz_bomb(&head, &[op::NONE], 1024);
    assert!(file.len() < 2 << 20, "{} bytes", file.len());
    let error = read_error("nones.pickle.gz", &file, &ReadOptions::default(), 10);
    assert!(matches!(error, Error::PickleLimit { limit: 1_048_576, .. }), "{error}");
    assert!(
        error.to_string().starts_with("nones.pickle.gz: the pickle passes a limit of this reader at byte offset")
            && error.to_string().ends_with("more stack entries (values and open MARKs) than 1048576"),
        "{error}"
    );
}

#[test]
fn nones_appended_one_by_one_to_a_trace_are_counted_not_stored() {
    // A list of a million NONEs built with APPEND: the stack stays small, and the items take no memory.
    let (mut pickle, end) = snapshot_parts();
    pickle.pop();
    for _ in 0..1_000_000 {
        pickle.extend([op::NONE, op::APPEND]);
    }
    pickle.push(op::MARK);
    pickle.extend(entry("alloc", 0x1000, 512, 7));
    pickle.extend(end);
    let error = parse_trace("appended.pickle", &pickle, &ReadOptions::default()).unwrap_err();
    assert!(error.to_string().contains("device 0 event 0: the entry is a value without trace-entry keys"), "{error}");
    let trace = parse_trace("appended.pickle", &pickle, &ReadOptions::default().lenient(true)).unwrap();
    assert_eq!(trace.skipped, 1_000_000);
    assert_eq!(trace.skipped_reasons.len(), 1, "{:?}", trace.skipped_reasons);
    assert!(trace.skipped_reasons[0].ends_with("(and the 999999 records after it)"), "{:?}", trace.skipped_reasons);
    assert_eq!(trace.events.len(), 1);
}

#[test]
fn a_memo_index_of_a_billion_reads_without_room_for_the_indices_below_it() {
    // The key `action` put at memo index 10^9 and fetched from there for every entry.
    let billion = 1_000_000_000u32.to_le_bytes();
    let mut entries = Vec::new();
    for (i, action) in ["alloc", "free_completed"].iter().enumerate() {
        let mut entry = vec![op::EMPTY_DICT, op::MARK];
        if i == 0 {
            entry.extend(text("action"));
            entry.push(op::LONG_BINPUT);
            entry.extend(billion);
        } else {
            entry.push(op::LONG_BINGET);
            entry.extend(billion);
        }
        entry.extend(text(action));
        for (key, value) in [("addr", long(0x2000)), ("size", long(4096))] {
            entry.extend(text(key));
            entry.extend(value);
        }
        entry.push(op::SETITEMS);
        entries.push(entry);
    }
    let trace = parse_trace("memo.pickle", &snapshot(&entries), &ReadOptions::default()).unwrap();
    let kinds: Vec<EventKind> = trace.events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::Alloc, EventKind::Free]);
}

#[test]
fn a_memo_filled_past_what_the_file_size_allows_is_stopped() {
    // MEMOIZE of one value, 200 million times over, in a few hundred kilobytes of gzip.
    let (mut head, _) = snapshot_parts();
    head.push(op::NONE);
    let file = gz_bomb(&head, &[op::MEMOIZE], 200);
    let error = read_error("memo.pickle.gz", &file, &ReadOptions::default(), 30);
    let Error::MemoryBudget { held_bytes, limit, file_bytes, .. } = error else { panic!("{error}") };
    assert!(held_bytes > limit && limit < 128 << 20, "{held_bytes} held, {limit} allowed");
    assert!(file_bytes <= file.len() as u64);
    let message = error_message("memo.pickle.gz", &file);
    assert!(
        message.contains("(64 MiB plus 256 per byte read)") && message.contains("decompress it first"),
        "{message}"
    );
}

fn error_message(name: &str, bytes: &[u8]) -> String {
    parse_trace(name, bytes, &ReadOptions::default()).unwrap_err().to_string()
}

#[test]
fn a_gzip_of_ten_gibibytes_of_zeros_is_refused_at_its_first_bytes() {
    let file = gz_bomb(b"", &[0], 10 << 10);
    let error = read_error("zeros.gz", &file, &ReadOptions::default(), 5);
    assert!(matches!(error, Error::UnknownFormat { .. }), "{error}");
    assert!(error.to_string().contains(r#"it starts with b"\x00\x00\x00"#), "{error}");
}

#[test]
fn an_endless_stream_is_refused_at_its_first_bytes() {
    let start = Instant::now();
    let error = read_trace("/dev/zero", &ReadOptions::default()).unwrap_err();
    assert!(matches!(error, Error::UnknownFormat { .. }), "{error}");
    assert!(error.to_string().starts_with("zero: not a trace this crate reads"), "{error}");
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn content_past_the_limit_is_an_error_that_says_how_to_raise_it() {
    // A pickle that never ends: POP of NONE, over and over.
    let file = gz_bomb(&op::PROTO4, &[op::NONE, b'0'], 64);
    let options = ReadOptions::default().max_content_bytes(16 << 20);
    let error = read_error("endless.pickle.gz", &file, &options, 30);
    assert!(matches!(error, Error::ContentTooLarge { limit, .. } if limit == 16 << 20), "{error}");
    assert_eq!(
        error.to_string(),
        "endless.pickle.gz: the content passes 16777216 bytes, the most a read takes \
         (`ReadOptions::max_content_bytes`, `--max-trace-bytes` on the command line): raise it to read a larger trace"
    );
    assert_eq!(ReadOptions::default().max_content_bytes, DEFAULT_MAX_CONTENT_BYTES);
    // A CSV log past the limit alike.
    let mut log = b"time_us,action,addr,size,stream\n".to_vec();
    while log.len() < 1 << 20 {
        log.extend_from_slice(b"0,alloc,0x1000,256,0\n0,free,0x1000,256,0\n");
    }
    let error = parse_trace("log.csv", &log, &ReadOptions::default().max_content_bytes(1 << 19)).unwrap_err();
    assert!(matches!(error, Error::ContentTooLarge { .. }), "{error}");
    assert!(parse_trace("log.csv", &log, &ReadOptions::default().max_content_bytes(log.len() as u64)).is_ok());
}

#[test]
fn bytes_after_the_pickle_are_an_error() {
    let pickle = data_bytes("small_snapshot.p4.pickle");
    assert!(parse_trace("ok.pickle", &pickle, &ReadOptions::default().device(0)).is_ok());
    for tail in [&b"\n"[..], b"junk", &pickle] {
        let mut bytes = pickle.clone();
        bytes.extend_from_slice(tail);
        let error = parse_trace("tail.pickle", &bytes, &ReadOptions::default().device(0)).unwrap_err();
        assert!(matches!(error, Error::PickleTrailingData { offset, .. } if offset == pickle.len() as u64), "{error}");
        assert!(error.to_string().contains("data after the end of the pickle"), "{error}");
    }
    // A second gzip member holding another pickle is data after the first, too.
    let mut two = gz(&pickle);
    two.extend(gz(&pickle));
    let error = parse_trace("two.pickle.gz", &two, &ReadOptions::default().device(0)).unwrap_err();
    assert!(matches!(error, Error::PickleTrailingData { .. }), "{error}");
}

#[test]
fn actions_the_reader_does_not_know_are_counted_apart_from_pytorchs_non_events() {
    let trace = parse_trace(
        "actions.pickle",
        &snapshot(&[
            entry("alloc", 0x1000, 512, 1),
            entry("snapshot", 0, 0, 2),
            entry("defragment", 0x1000, 512, 3),
            entry("free_completed", 0x1000, 512, 4),
            entry("teleport", 0, 0, 5),
        ]),
        &ReadOptions::default(),
    )
    .unwrap();
    assert_eq!((trace.events.len(), trace.ignored, trace.unknown_actions), (2, 1, 2));
}

#[test]
fn a_long_csv_line_is_a_bad_record_and_errors_quote_a_short_excerpt() {
    let mut log = b"time_us,action,addr,size,stream\n0,alloc,0x1000,256,0\n".to_vec();
    log.extend(std::iter::repeat_n(b'7', 1 << 20));
    log.extend_from_slice(b",alloc,0x2000,256,0\n1,free,0x1000,256,0\n");
    let error = parse_trace("long.csv", &log, &ReadOptions::default()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "long.csv: line 3: the line is longer than 4096 bytes, the most a CSV log's line may have"
    );
    let trace = parse_trace("long.csv", &log, &ReadOptions::default().lenient(true)).unwrap();
    assert_eq!((trace.events.len(), trace.skipped), (2, 1));

    // Lines and fields that do not parse are quoted by their first characters only.
    let long_action = "x".repeat(4000);
    for line in [format!("0,{long_action},0x1,1,0"), format!("0,alloc,0x1,1,0,{long_action}")] {
        let log = format!("time_us,action,addr,size,stream\n{line}\n");
        let message = parse_trace("bad.csv", log.as_bytes(), &ReadOptions::default()).unwrap_err().to_string();
        assert!(message.len() < 200, "{} characters: {message}", message.len());
        assert!(message.contains("xxx..."), "{message}");
    }
}

#[test]
fn csv_numbers_read_at_their_extremes_and_are_refused_past_them() {
    let log = "time_us,action,addr,size,stream\n\
               -9223372036854775808,alloc,0xffffffffffffffff,18446744073709551615,18446744073709551615\n\
               9223372036854775807,free,0xffffffffffffffff,18446744073709551615,0\n\
               0,alloc,0,1,0\n";
    let trace = parse_trace("extremes.csv", log.as_bytes(), &ReadOptions::default()).unwrap();
    assert_eq!(trace.events[0].time_us, i64::MIN);
    assert_eq!(trace.events[0].size, u64::MAX);
    assert_eq!(trace.events[1].time_us, i64::MAX);
    for (field, line) in [
        ("size", "0,alloc,0x1,18446744073709551616,0"),
        ("time_us", "9223372036854775808,alloc,0x1,1,0"),
        ("time_us", "-9223372036854775809,alloc,0x1,1,0"),
        ("addr", "0,alloc,0x10000000000000000,1,0"),
    ] {
        let log = format!("time_us,action,addr,size,stream\n{line}\n");
        let message = parse_trace("past.csv", log.as_bytes(), &ReadOptions::default()).unwrap_err().to_string();
        assert!(message.contains(&format!("{field} `")) && message.ends_with("does not fit 64 bits"), "{message}");
    }
}
