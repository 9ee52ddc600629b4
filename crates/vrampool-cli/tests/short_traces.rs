//! A trace whose times are too close together for the driver-time budget (a microsecond apart, or all the
//! same) is replayed and advised on as any other, with a warning on standard error that the driver-time share
//! is relative to its duration and may be meaningless.

mod common;

use std::process::Stdio;

use common::{small_log, small_log_ticking, vrampool};

/// The standard error of a command that succeeded.
fn stderr_of(args: &[&str]) -> String {
    let output = vrampool(args, Stdio::null());
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
    stderr
}

#[test]
fn replay_and_advise_warn_of_times_a_microsecond_apart() {
    let log = small_log_ticking("microseconds_apart.csv", 1);
    let log = log.to_str().unwrap();
    for args in [&["replay", log][..], &["replay", log, "--strategy", "dynamic"], &["advise", log], &["compare", log]] {
        let stderr = stderr_of(args);
        assert!(
            stderr.contains(
                "warning: microseconds_apart.csv: the driver-time share is relative to the trace's duration of \
                 99.0 µs and may be meaningless"
            ),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains("at least 43.0 µs in the driver"), "{args:?}: {stderr}");
        assert_eq!(stderr.matches("warning:").count(), 1, "once: {stderr}");
    }
}

#[test]
fn times_all_the_same_are_warned_of() {
    let log = small_log_ticking("all_at_once.csv", 0);
    let stderr = stderr_of(&["advise", log.to_str().unwrap()]);
    assert!(stderr.contains("duration of 0.00 µs (its events all have the same time)"), "{stderr}");
}

#[test]
fn times_a_millisecond_apart_warn_of_nothing() {
    let log = small_log("milliseconds_apart.csv");
    let log = log.to_str().unwrap();
    for args in [&["replay", log][..], &["advise", log]] {
        assert!(!stderr_of(args).contains("warning"), "{args:?}");
    }
}
