//! Running the command on small logs.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// A small vrampool CSV log, written into the target directory as `name`: 50 allocations of 4 to 12 KiB,
/// each freed a millisecond later, a millisecond apart (99 ms in all, long enough for the driver-time budget).
pub fn small_log(name: &str) -> PathBuf {
    small_log_ticking(name, 1000)
}

/// [`small_log`] with its events `tick_us` microseconds apart.
pub fn small_log_ticking(name: &str, tick_us: u64) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let mut log = String::from("time_us,action,addr,size,stream\n");
    for i in 0..50u64 {
        let (addr, size) = (0x1000 * (i % 4 + 1), 4096 * (i % 3 + 1));
        log.push_str(&format!("{},alloc,{addr:#x},{size},0\n", 2 * i * tick_us));
        log.push_str(&format!("{},free,{addr:#x},{size},0\n", (2 * i + 1) * tick_us));
    }
    std::fs::write(&path, log).unwrap();
    path
}

/// Runs the command with `args`, its standard output going to `stdout`; its standard error is kept.
pub fn vrampool(args: &[&str], stdout: Stdio) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vrampool"))
        .args(args)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .expect("the command runs")
}

/// Checks that the command ended with status 1 and an error whose message starts with `message`.
pub fn assert_error(output: &Output, message: &str, what: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{what}: {stderr}");
    assert!(stderr.starts_with(&format!("error: {message}")), "{what}: {stderr}");
}
