//! Pickles that import or call code are refused, naming the opcode and its byte offset, before anything
//! else happens; the reader decodes data only.

mod common;

use std::io::Read;

use common::{data, data_bytes};
use vrampool_trace::{Error, ReadOptions, parse_trace, read_trace};

/// Reads `file` (strictly and leniently) and returns the refused opcode and offset, checking that the
/// offset holds that opcode.
fn refused(file: &str, content: &[u8]) -> (&'static str, u64) {
    let mut found = Vec::new();
    for options in [ReadOptions::default(), ReadOptions::default().lenient(true)] {
        let error = read_trace(data(file), &options).unwrap_err();
        let message = error.to_string();
        let Error::PickleForbidden { opcode, offset, .. } = error else { panic!("{file}: {message}") };
        assert!(
            message.starts_with(&format!("{file}: refused pickle opcode {opcode} at byte offset {offset}")),
            "{message}"
        );
        let expected_byte = match opcode {
            "GLOBAL" => b'c',
            "STACK_GLOBAL" => 0x93,
            "REDUCE" => b'R',
            other => panic!("{file}: unexpected opcode {other}"),
        };
        assert_eq!(content[offset as usize], expected_byte, "{file}: offset {offset} is not the {opcode} opcode");
        found.push((opcode, offset));
    }
    assert_eq!(found[0], found[1], "a lenient read refuses the same opcode");
    found[0]
}

#[test]
fn an_os_system_reduce_payload_is_refused_at_its_import() {
    // `pickle.dumps(obj)` of an object whose __reduce__ returns (os.system, ("touch ...",)).
    let p0 = data_bytes("malicious_reduce.p0.pickle");
    assert_eq!(refused("malicious_reduce.p0.pickle", &p0), ("GLOBAL", 0));
    let p4 = data_bytes("malicious_reduce.p4.pickle");
    let (opcode, offset) = refused("malicious_reduce.p4.pickle", &p4);
    assert_eq!(opcode, "STACK_GLOBAL");
    assert!(offset > 2);
    // The command is never run: the marker file it would create does not appear.
    assert!(!std::path::Path::new("/tmp/vrampool-trace-test-pwned").exists());
}

#[test]
fn a_pickled_function_reference_is_refused() {
    let content = data_bytes("malicious_global.p2.pickle");
    assert_eq!(refused("malicious_global.p2.pickle", &content), ("GLOBAL", 2));
}

#[test]
fn a_payload_hidden_in_a_trace_entry_is_refused_where_it_is() {
    let compressed = data_bytes("malicious_in_entry.pickle.gz");
    let mut content = Vec::new();
    flate2::read::GzDecoder::new(&compressed[..]).read_to_end(&mut content).unwrap();
    let (opcode, offset) = refused("malicious_in_entry.pickle.gz", &content);
    assert_eq!(opcode, "STACK_GLOBAL");
    assert!(offset > 100, "the payload sits inside the device trace, at {offset}");
}

#[test]
fn every_opcode_that_imports_or_calls_is_refused_by_name() {
    let opcodes: [(u8, &str); 13] = [
        (b'c', "GLOBAL"),
        (0x93, "STACK_GLOBAL"),
        (b'R', "REDUCE"),
        (b'i', "INST"),
        (b'o', "OBJ"),
        (0x81, "NEWOBJ"),
        (0x92, "NEWOBJ_EX"),
        (b'b', "BUILD"),
        (0x82, "EXT1"),
        (0x83, "EXT2"),
        (0x84, "EXT4"),
        (b'P', "PERSID"),
        (b'Q', "BINPERSID"),
    ];
    for (code, name) in opcodes {
        // PROTO 4, EMPTY_DICT, then the opcode (its arguments are never read).
        let pickle = [0x80, 4, b'}', code, b'.'];
        let error = parse_trace("crafted.pickle", &pickle, &ReadOptions::default()).unwrap_err();
        assert!(matches!(error, Error::PickleForbidden { opcode, offset: 3, .. } if opcode == name), "{name}: {error}");
    }
}

#[test]
fn out_of_band_buffers_and_unknown_opcodes_are_unsupported() {
    for (code, name) in [(0x97, "NEXT_BUFFER"), (0xff, "unknown"), (b'z', "unknown")] {
        let pickle = [0x80, 5, code, b'.'];
        let error = parse_trace("crafted.pickle", &pickle, &ReadOptions::default()).unwrap_err();
        assert!(
            matches!(error, Error::PickleUnsupported { opcode, code: c, offset: 2, .. } if opcode == name && c == code),
            "{error}"
        );
    }
}
