//! What the command does when its output cannot be written: an error and status 1 for a file or a full
//! disk, a quiet end for a reader that closed the pipe.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// A small vrampool CSV log, written into the target directory as `name`.
fn small_log(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let mut log = String::from("time_us,action,addr,size,stream\n");
    for i in 0..50u64 {
        log.push_str(&format!("{},alloc,{:#x},{},0\n", 2 * i, 0x1000 * (i % 4 + 1), 4096 * (i % 3 + 1)));
        log.push_str(&format!("{},free,{:#x},{},0\n", 2 * i + 1, 0x1000 * (i % 4 + 1), 4096 * (i % 3 + 1)));
    }
    std::fs::write(&path, log).unwrap();
    path
}

fn vrampool(args: &[&str], stdout: Stdio) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vrampool"))
        .args(args)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .expect("the command runs")
}

#[test]
fn an_event_log_that_cannot_be_written_is_an_error() {
    let log = small_log("event_log_to_a_full_disk.csv");
    let output = vrampool(
        &["replay", log.to_str().unwrap(), "--strategy", "dynamic", "--events-out", "/dev/full"],
        Stdio::null(),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("error: /dev/full: No space left on device"), "{stderr}");
}

#[test]
fn output_that_cannot_be_written_is_an_error() {
    let log = small_log("output_to_a_full_disk.csv");
    for args in [&["replay", log.to_str().unwrap(), "--strategy", "fixed"][..], &["compare", log.to_str().unwrap()]] {
        let output = vrampool(args, Stdio::from(File::create("/dev/full").unwrap()));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: writing the output: No space left on device"), "{args:?}: {stderr}");
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
