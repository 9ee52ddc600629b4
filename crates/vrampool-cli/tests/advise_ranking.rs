//! `vrampool advise` recommends what its ranking says: on ResNet-50's training, the dynamic and hybrid pools
//! reach the same utilization, and the one with less driver time is recommended; the sentence it prints
//! under the advice is the ranking's own.

mod common;

use std::path::PathBuf;
use std::process::Stdio;

use common::vrampool;

fn bundled(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../traces").join(name).display().to_string()
}

#[test]
fn equal_utilizations_go_to_the_least_driver_time() {
    let trace = bundled("resnet_train_fixed.pickle.gz");
    let output = vrampool(&["advise", &trace, "--json"], Stdio::piped());
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let advice: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let budget_us = advice["objective"]["driver_budget_us"].as_f64().unwrap();
    let rows: Vec<(String, i64, f64)> = advice["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let utilization = (row["utilization"].as_f64().unwrap() * 1000.0).round() as i64;
            (row["strategy"].as_str().unwrap().to_owned(), utilization, row["driver_time_us"].as_f64().unwrap())
        })
        .filter(|(_, _, driver_us)| *driver_us <= budget_us)
        .collect();
    let best_utilization = rows.iter().map(|row| row.1).max().unwrap();
    let tied: Vec<&(String, i64, f64)> = rows.iter().filter(|row| row.1 == best_utilization).collect();
    assert!(tied.len() >= 2, "the dynamic and hybrid pools tie on this trace: {rows:?}");
    let fastest = tied.iter().min_by(|a, b| a.2.total_cmp(&b.2)).unwrap();
    assert_eq!(advice["recommended"], fastest.0.as_str(), "{rows:?}");
    assert_eq!(advice["recommended"], "dynamic", "{rows:?}");
    // Beside PyTorch's recorded figures, what its expandable segments would reserve (modelled): 5,714 MiB.
    assert_eq!(advice["expandable"]["strategy"], "expandable");
    assert_eq!(advice["expandable"]["peak_reserved_bytes"], 5714u64 << 20);

    let text = vrampool(&["advise", &trace], Stdio::piped());
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.contains("expandable segments modelled 5,714 MiB"), "{stdout}");
    let last = stdout.lines().last().unwrap();
    let ranking = vrampool_replay::Objective { driver_budget_us: budget_us }.ranking();
    assert_eq!(last, format!("({ranking})"));
}
