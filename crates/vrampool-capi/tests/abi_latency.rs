//! `scripts/torch_latency/abi_latency.c`, the program that times and profiles the PyTorch entry points on
//! any machine: compiled with `cc` and run briefly against the shared library cargo built for this test, on
//! the simulated device. Its churn frees every block it allocated through the entry points, and it fails if
//! the pool still holds one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The shared library cargo built with this test (`target/<profile>/deps/libvrampool_c.so`).
fn shared_library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    let path = exe.parent().expect("the test binary lies in a folder").join("libvrampool_c.so");
    assert!(path.is_file(), "{} is missing: cargo builds the cdylib with the integration tests", path.display());
    path
}

/// Compiles the program into a scratch folder of its own; returns the folder (removed by the caller) and
/// the program.
fn compile() -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("vrampool-abi-latency-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("the scratch folder is made");
    let program = dir.join("abi_latency");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/torch_latency/abi_latency.c");
    let mut cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cc.args(["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-D_POSIX_C_SOURCE=200809L"])
        .arg(&source)
        .arg("-o")
        .arg(&program)
        .args(["-ldl", "-lm"]);
    let result = cc.output().expect("the C compiler `cc` runs");
    assert!(
        result.status.success(),
        "compiling {} failed:\n{}",
        source.display(),
        String::from_utf8_lossy(&result.stderr)
    );
    (dir, program)
}

fn run(program: &Path, conf: &str, args: &[&str]) -> Output {
    run_with(program, conf, args, &[])
}

fn run_with(program: &Path, conf: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(program)
        .arg(shared_library())
        .args(args)
        .env("VRAMPOOL_CONF", conf)
        .envs(env.iter().copied())
        .output()
        .expect("the compiled program runs")
}

#[test]
fn the_latency_program_runs_both_patterns_through_the_entry_points_and_leaves_nothing_live() {
    let (dir, program) = compile();
    let churn = run(&program, "backend=sim", &["churn", "3", "50"]);
    let pair = run(&program, "backend=sim", &["pair", "3", "50", "4096"]);
    let bad = run(&program, "backend=sim,colour=blue", &["pair", "1", "1", "4096"]);
    let usage = run(&program, "backend=sim", &["pair", "1", "1"]);
    let counted = run_with(&program, "backend=sim", &["churn", "3", "50"], &[("ABI_PERF", "1")]);
    let _ = std::fs::remove_dir_all(&dir);

    let text = |output: &Output| {
        format!(
            "stdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    };
    assert!(churn.status.success(), "{}", text(&churn));
    let out = String::from_utf8_lossy(&churn.stdout);
    assert!(out.contains("churn: median ") && out.contains("over 3 rounds of 50"), "{out}");
    // 1000 blocks, 5000 untimed steps and 150 timed ones: one allocation each.
    assert!(out.contains("pool: 6150 allocations, ") && out.ends_with(", 0 live at the end\n"), "{out}");
    assert!(out.contains(" MiB reserved at the peak (") && out.contains(" MiB allocated at the peak)"), "{out}");

    assert!(pair.status.success(), "{}", text(&pair));
    let out = String::from_utf8_lossy(&pair.stdout);
    assert!(out.contains("pool: 5150 allocations, ") && out.ends_with(", 0 live at the end\n"), "{out}");

    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("vrampool_torch_alloc(4096) failed: VRAMPOOL_CONF="),
        "{}",
        text(&bad)
    );
    assert_eq!(usage.status.code(), Some(2), "{}", text(&usage));

    // With the CPU's counters where the machine gives them, and without (said on stderr) where it does not:
    // the churn runs and ends clean either way.
    assert!(counted.status.success(), "{}", text(&counted));
    let (out, err) = (String::from_utf8_lossy(&counted.stdout), String::from_utf8_lossy(&counted.stderr));
    assert!(out.contains("churn: median ") && out.ends_with(", 0 live at the end\n"), "{}", text(&counted));
    assert!(
        out.contains("perf per operation: cycles ") || err.contains("perf: cycles cannot be counted here"),
        "{}",
        text(&counted)
    );
}
