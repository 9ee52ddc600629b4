//! The C API as a C program uses it: `tests/c/api_test.c` is compiled with `cc` against
//! `include/vrampool.h` and linked with the library cargo built for this test (the shared library, and
//! the static one), then run on host memory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The folder cargo put this test's dependencies in, the library among them (`target/<profile>/deps`).
fn deps_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    exe.parent().expect("the test binary lies in a folder").to_path_buf()
}

/// The library file `name` (`libvrampool_c.so`, `libvrampool_c.a`) cargo built with this test.
fn library(name: &str) -> PathBuf {
    let path = deps_dir().join(name);
    assert!(
        path.is_file(),
        "{} is missing: cargo builds the library's cdylib and staticlib with the integration tests \
         (run `cargo build -p vrampool-capi` if it did not)",
        path.display()
    );
    path
}

/// A scratch folder for one compiled program, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("vrampool-capi-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the scratch folder is made");
        Scratch(dir)
    }

    fn join(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Compiles the C test into `output` with `link` arguments.
fn compile(output: &Path, link: &[&str]) {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let include = manifest.join("../../include");
    let source = manifest.join("tests/c/api_test.c");
    let mut cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cc.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-D_POSIX_C_SOURCE=200809L", "-pthread"])
        .arg("-I")
        .arg(&include)
        .arg(&source)
        .arg("-o")
        .arg(output)
        .args(link);
    let result = cc.output().expect("the C compiler `cc` runs");
    assert!(
        result.status.success(),
        "compiling {} failed: {:?}\n{}",
        source.display(),
        cc,
        String::from_utf8_lossy(&result.stderr)
    );
}

/// Runs a compiled test with `VRAMPOOL_CONF` set to `conf`.
fn run(program: &Path, args: &[&str], conf: &str) -> Output {
    Command::new(program)
        .args(args)
        .env("VRAMPOOL_CONF", conf)
        .env_remove("LD_PRELOAD")
        .output()
        .expect("the compiled C test runs")
}

/// Asserts the run passed every check.
fn assert_passed(what: &str, output: &Output) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{what}: {}\nstdout:\n{stdout}\nstderr:\n{stderr}", output.status);
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(summary.starts_with("api_test: ") && summary.ends_with(" passed, 0 failed"), "{what}: {stdout}");
    let checks: u32 = summary["api_test: ".len()..].split(' ').next().unwrap().parse().unwrap();
    assert!(checks >= 10, "{what}: only {checks} checks ran");
}

#[test]
fn the_c_api_works_from_c_with_the_shared_library() {
    let lib = library("libvrampool_c.so");
    let dir = lib.parent().unwrap().to_str().unwrap().to_string();
    let scratch = Scratch::new("shared");
    let program = scratch.join("api_test");
    compile(&program, &[&format!("-L{dir}"), &format!("-Wl,-rpath,{dir}"), "-l:libvrampool_c.so"]);
    let output = run(&program, &[], "backend=host,strategy=hybrid");
    assert_passed("shared library", &output);
}

#[test]
fn the_c_api_works_from_c_with_the_static_library() {
    let lib = library("libvrampool_c.a");
    let scratch = Scratch::new("static");
    let program = scratch.join("api_test");
    compile(&program, &[lib.to_str().unwrap(), "-lpthread", "-ldl", "-lm", "-lrt", "-lgcc_s", "-lutil", "-lc"]);
    let output = run(&program, &[], "backend=host,strategy=dynamic,initial_size=64MiB");
    assert_passed("static library", &output);
}

#[test]
fn an_invalid_vrampool_conf_is_reported_once_and_fails_every_allocation() {
    let lib = library("libvrampool_c.so");
    let dir = lib.parent().unwrap().to_str().unwrap().to_string();
    let scratch = Scratch::new("bad-conf");
    let program = scratch.join("api_test");
    compile(&program, &[&format!("-L{dir}"), &format!("-Wl,-rpath,{dir}"), "-l:libvrampool_c.so"]);
    let output = run(&program, &["bad-conf"], "backend=host,colour=blue");
    assert_passed("bad VRAMPOOL_CONF", &output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let reports: Vec<&str> = stderr.lines().filter(|line| line.contains("VRAMPOOL_CONF")).collect();
    assert_eq!(reports.len(), 1, "reported exactly once:\n{stderr}");
    assert!(
        reports[0].contains("bad config string at `colour`: unknown key") && reports[0].contains("does not fall back"),
        "{}",
        reports[0]
    );
}
