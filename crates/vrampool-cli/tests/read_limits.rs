//! The command's limit on what it reads of a trace.

mod common;

use std::process::Stdio;

use common::{assert_error, small_log, vrampool};

#[test]
fn a_trace_past_the_content_limit_is_an_error_and_the_limit_can_be_raised() {
    let log = small_log("read_limit.csv");
    let args = ["replay", log.to_str().unwrap(), "--strategy", "dynamic", "--max-trace-bytes"];
    let refused = vrampool(&[&args[..], &["1KiB"]].concat(), Stdio::null());
    assert_error(&refused, "read_limit.csv: the content passes 1024 bytes", "1KiB");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("`--max-trace-bytes` on the command line"), "{stderr}");
    let read = vrampool(&[&args[..], &["1MiB"]].concat(), Stdio::null());
    assert_eq!(read.status.code(), Some(0), "{}", String::from_utf8_lossy(&read.stderr));
}
