//! What the command does when its output cannot be written: an error and status 1 for a file or a full
//! disk, a quiet end for a reader that closed the pipe.

mod common;

use std::fs::File;
use std::process::Stdio;

use common::{assert_error, small_log, vrampool};

#[test]
fn an_event_log_that_cannot_be_written_is_an_error() {
    let log = small_log("event_log_to_a_full_disk.csv");
    let output = vrampool(
        &["replay", log.to_str().unwrap(), "--strategy", "dynamic", "--events-out", "/dev/full"],
        Stdio::null(),
    );
    assert_error(&output, "/dev/full: No space left on device", "--events-out");
}

#[test]
fn output_that_cannot_be_written_is_an_error() {
    let log = small_log("output_to_a_full_disk.csv");
    for args in [&["replay", log.to_str().unwrap(), "--strategy", "fixed"][..], &["compare", log.to_str().unwrap()]] {
        let output = vrampool(args, Stdio::from(File::create("/dev/full").unwrap()));
        assert_error(&output, "writing the output: No space left on device", &format!("{args:?}"));
    }
}

#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    let log = small_log("output_to_a_closed_pipe.csv");
    for args in [&["replay", log.to_str().unwrap(), "--strategy", "hybrid"][..], &["compare", log.to_str().unwrap()]] {
        // The reading end is closed before the command writes anything.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let output = vrampool(args, Stdio::from(writer));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
        assert_eq!(stderr, "", "{args:?}");
    }
}
