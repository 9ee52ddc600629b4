//! Input that is not a readable trace: each gives a clear error naming the file and the place, never a
//! panic.

mod common;

use common::{data, data_bytes};
use vrampool_trace::{Error, ReadOptions, parse_trace, read_trace};

fn read_error(file: &str) -> Error {
    read_trace(data(file), &ReadOptions::default()).unwrap_err()
}

#[test]
fn a_missing_file_names_its_path() {
    let error = read_error("no_such_trace.pickle.gz");
    assert!(matches!(&error, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound), "{error}");
    assert!(error.to_string().contains("tests/data/no_such_trace.pickle.gz: cannot read the file"), "{error}");
}

#[test]
fn a_truncated_gzip_is_an_error_naming_the_file() {
    let error = read_error("truncated.pickle.gz");
    assert!(matches!(error, Error::Gzip { .. }), "{error}");
    assert!(error.to_string().starts_with("truncated.pickle.gz: the gzip data is truncated or corrupt"), "{error}");
    // Lenient reads do not skip file-level errors.
    let lenient = read_trace(data("truncated.pickle.gz"), &ReadOptions::default().lenient(true)).unwrap_err();
    assert!(matches!(lenient, Error::Gzip { .. }), "{lenient}");
}

#[test]
fn a_truncated_pickle_names_the_offset_where_it_ends() {
    let content = data_bytes("truncated.pickle");
    let error = read_error("truncated.pickle");
    let Error::PickleTruncated { offset, .. } = error else { panic!("{error}") };
    assert!(
        offset as usize <= content.len() && offset as usize >= content.len() - 300,
        "{offset} of {}",
        content.len()
    );
}

#[test]
fn every_cut_of_a_snapshot_is_an_error_not_a_panic() {
    let content = data_bytes("small_snapshot.p4.pickle");
    for len in 0..content.len() {
        let result = parse_trace("cut.pickle", &content[..len], &ReadOptions::default().device(0));
        let error = result.expect_err("a cut pickle must not read");
        assert!(
            matches!(
                error,
                Error::PickleTruncated { .. } | Error::UnknownFormat { .. } | Error::PickleMalformed { .. }
            ),
            "{len}: {error}"
        );
    }
}

#[test]
fn corrupted_bytes_never_panic() {
    // Flip each byte of a small snapshot to a few values: the reader errs or reads, never panics.
    let content = data_bytes("small_snapshot.p2.pickle");
    for index in 0..content.len() {
        for value in [0x00, 0x28, 0x4b, 0x5d, 0x65, 0x71, 0x75, 0x7d, 0x80, 0x8a, 0xff] {
            let mut corrupted = content.clone();
            corrupted[index] = value;
            let _ = parse_trace("corrupted.pickle", &corrupted, &ReadOptions::default().device(0).lenient(true));
        }
    }
}

#[test]
fn pickles_that_are_not_snapshots_say_what_is_missing() {
    let cases = [
        ("not_snapshot.pickle", "the top-level dict has no `device_traces` key"),
        ("list_top.pickle", "the pickled value is a list, not a dict"),
        ("device_traces_not_list.pickle", "`device_traces` is a dict, not a list"),
        ("device_trace_not_list.pickle", "`device_traces[1]` is an integer, not a list"),
    ];
    for (file, reason) in cases {
        let error = read_error(file);
        assert!(matches!(error, Error::NotASnapshot { .. }), "{file}: {error}");
        assert_eq!(error.to_string(), format!("{file}: not a PyTorch memory snapshot: {reason}"));
    }
}

#[test]
fn content_of_no_known_format_is_refused_with_its_first_bytes() {
    let error = read_error("unknown_format.txt");
    assert!(matches!(error, Error::UnknownFormat { .. }), "{error}");
    assert!(error.to_string().ends_with("it starts with b\"this is not a trace\\n1,2,\"..."), "{error}");
    let empty = parse_trace("empty", b"", &ReadOptions::default()).unwrap_err();
    assert!(empty.to_string().ends_with("it starts with nothing (the content is empty)"), "{empty}");
}

#[test]
fn a_pickle_with_a_protocol_newer_than_5_is_refused() {
    let error = parse_trace("new.pickle", &[0x80, 5, 0x80, 6, b'}', b'.'], &ReadOptions::default()).unwrap_err();
    assert!(error.to_string().contains("pickle protocol 6 is newer than 5"), "{error}");
}

#[test]
fn malformed_pickles_are_errors_with_offsets() {
    let cases: [(&[u8], &str); 6] = [
        (&[0x80, 4, b'.'], "offset 2: the stack is empty"),
        (&[0x80, 4, b'h', 3, b'.'], "offset 2: memo entry 3 is not set"),
        (&[0x80, 4, b'K', 1, b'K', 2, b'u', b'.'], "offset 6: no MARK is open"),
        (&[0x80, 4, b']', b'(', b'K', 1, b'u', b'.'], "offset 6: SETITEMS needs a dict below its items, found a list"),
        (&[0x80, 4, b'}', b'(', b'K', 1, b'u', b'.'], "offset 6: 1 items after MARK: keys and values do not pair"),
        (&[0x80, 4, b'K', 1, b'a', b'.'], "offset 4: APPEND needs a list below its items, found nothing"),
    ];
    for (pickle, message) in cases {
        let error = parse_trace("bad.pickle", pickle, &ReadOptions::default()).unwrap_err();
        assert!(matches!(error, Error::PickleMalformed { .. }), "{error}");
        assert!(error.to_string().contains(message), "{error} does not say {message}");
    }
}

#[test]
fn a_csv_log_has_device_0_only() {
    let error = read_trace(data("vrampool_small.csv"), &ReadOptions::default().device(1)).unwrap_err();
    assert!(matches!(error, Error::NoSuchDevice { device: 1, devices: 1, .. }), "{error}");
}
