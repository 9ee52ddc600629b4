//! What the command does when its output cannot be written: an error and status 1.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// A small vrampool CSV log, written once into the target directory.
fn small_log() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("output_errors.csv");
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
    let log = small_log();
    let output = vrampool(
        &["replay", log.to_str().unwrap(), "--strategy", "dynamic", "--events-out", "/dev/full"],
        Stdio::null(),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("error: /dev/full: No space left on device"), "{stderr}");
}
