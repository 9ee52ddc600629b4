//! The Python side, run with `python3 -m unittest` over `python/tests`: the module `python/vrampool` loads
//! the library cargo built with this test and reads stats through ctypes (on host memory), and the parts
//! of `scripts/pytorch-e2e.py` that need no GPU.

use std::path::Path;
use std::process::Command;

#[test]
fn the_python_tests_pass() {
    let deps = std::env::current_exe().expect("the test knows its own path").parent().unwrap().to_path_buf();
    let library = deps.join("libvrampool_c.so");
    assert!(library.is_file(), "{} is missing: run `cargo build -p vrampool-capi`", library.display());
    let python_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python");
    let tests = python_dir.join("tests");
    let output = Command::new("python3")
        .args(["-m", "unittest", "discover", "-v", "-s"])
        .arg(&tests)
        .arg("-t")
        .arg(&tests)
        .env("PYTHONPATH", &python_dir)
        .env("VRAMPOOL_LIB", &library)
        .env("VRAMPOOL_CONF", "backend=host,strategy=hybrid")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 runs (Python 3.9 or newer is needed for the module)");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the tests in {} failed ({}):\n{stderr}", tests.display(), output.status);
    let ran = stderr.lines().find(|line| line.starts_with("Ran ")).unwrap_or_default();
    let count: u32 = ran.split(' ').nth(1).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(count >= 11, "too few Python tests ran ({ran}):\n{stderr}");
    assert!(stderr.trim_end().ends_with("OK"), "{stderr}");
}
