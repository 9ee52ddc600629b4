//! `vrampool replay` takes its strategy from `--strategy`, from the config string's `strategy=`, or both where
//! they agree; without either it replays the default pool.

mod common;

use std::process::{Output, Stdio};

use common::{assert_error, small_log, vrampool};

/// The `config:` line a replay printed.
fn config_line(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let line = stdout.lines().find(|line| line.starts_with("config:")).unwrap_or_else(|| panic!("{stdout}"));
    line.trim_start_matches("config:").trim().to_owned()
}

#[test]
fn the_config_string_may_name_the_strategy_without_the_option() {
    let log = small_log("strategy_in_the_config.csv");
    let log = log.to_str().unwrap();
    let replay = |args: &[&str]| vrampool(&[&["replay", log][..], args].concat(), Stdio::piped());
    assert_eq!(config_line(&replay(&["--config", "strategy=hybrid,coverage=0.8"])), "strategy=hybrid,coverage=0.8");
    assert_eq!(config_line(&replay(&["--config", "coverage=0.8,strategy = hybrid"])), "strategy=hybrid,coverage=0.8");
    assert_eq!(
        config_line(&replay(&["--strategy", "hybrid", "--config", "strategy=hybrid,coverage=0.8"])),
        "strategy=hybrid,coverage=0.8",
        "both, agreeing"
    );
    assert_eq!(
        config_line(&replay(&["--strategy", "fixed", "--config", "block_count=8"])),
        "strategy=fixed,block_count=8"
    );
    assert_eq!(config_line(&replay(&[])), "strategy=adaptive", "neither: the default pool");
}

#[test]
fn a_strategy_option_and_config_string_that_disagree_are_an_error_naming_both() {
    let log = small_log("strategies_that_disagree.csv");
    let output = vrampool(
        &["replay", log.to_str().unwrap(), "--strategy", "dynamic", "--config", "strategy=hybrid,coverage=0.8"],
        Stdio::piped(),
    );
    assert_error(&output, "--strategy dynamic and the config string's strategy=hybrid disagree", "disagreeing");
    assert!(output.stdout.is_empty(), "nothing replayed");
}

#[test]
fn a_json_replay_gives_the_pools_device_time_beside_the_modelled_driver_time() {
    let log = small_log("device_time_in_json.csv");
    let output = vrampool(&["replay", log.to_str().unwrap(), "--json"], Stdio::piped());
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let row: serde_json::Value = serde_json::from_slice(&output.stdout).expect("one JSON object");
    let driver = row["driver_time_us"].as_f64().expect("driver_time_us");
    let device = row["device_time_us"].as_f64().expect("device_time_us");
    assert!(driver > 0.0, "the pool mapped memory on the simulated device: {row}");
    assert!(device > 0.0 && device.is_finite(), "the host's time in that work: {row}");
}
