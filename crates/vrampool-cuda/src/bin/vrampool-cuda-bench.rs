//! Allocation latency on a GPU: `cuMemAlloc`, CUDA's own pool and the vrampool strategies on both CUDA
//! backends, over the design's patterns, in one process. Prints a markdown table and writes JSON.
//!
//! ```text
//! vrampool-cuda-bench [--json PATH] [--device N] [--budget-ms N] [--one-cell-at-a-time]
//! ```
//!
//! `--json` defaults to `cuda-latency.json`; `--budget-ms` is the measuring time per cell (default 1000:
//! about 35 s in all). The methods' timed rounds of one pattern take turns; `--one-cell-at-a-time` times
//! each cell to the end before the next instead. Exits 1 with a message where no driver or device is
//! present.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use vrampool_cuda::bench::{BenchConfig, BenchDevice, default_methods, run};

/// The command line, parsed.
struct Options {
    json: String,
    device: usize,
    budget_ms: u64,
    take_turns: bool,
}

fn parse(args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut options = Options { json: "cuda-latency.json".into(), device: 0, budget_ms: 1000, take_turns: true };
    let mut args = args.skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--json" => options.json = value("--json")?,
            "--device" => {
                let text = value("--device")?;
                options.device = text.parse().map_err(|_| format!("--device {text}: not a device ordinal"))?;
            }
            "--budget-ms" => {
                let text = value("--budget-ms")?;
                options.budget_ms = text.parse().map_err(|_| format!("--budget-ms {text}: not a number"))?;
            }
            "--one-cell-at-a-time" => options.take_turns = false,
            "-h" | "--help" => {
                return Err(
                    "usage: vrampool-cuda-bench [--json PATH] [--device N] [--budget-ms N] [--one-cell-at-a-time]"
                        .into(),
                );
            }
            other => return Err(format!("unknown argument {other:?}; try --help")),
        }
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse(std::env::args()) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let device = match BenchDevice::open(options.device) {
        Ok(device) => device,
        Err(err) => {
            eprintln!("vrampool-cuda-bench: cannot open CUDA device {}: {err}", options.device);
            return ExitCode::from(1);
        }
    };
    let config = BenchConfig {
        budget_per_cell: Duration::from_millis(options.budget_ms),
        take_turns: options.take_turns,
        ..BenchConfig::default()
    };
    let methods = default_methods();
    eprintln!(
        "measuring {} methods x {} patterns on {} ({} ms per cell, {})...",
        methods.len(),
        config.patterns.len(),
        device.name(),
        options.budget_ms,
        if options.take_turns { "the methods' rounds taking turns" } else { "one cell at a time" }
    );
    let start = Instant::now();
    let report = run(&device, &methods, &config);
    println!("{}", report.to_markdown());
    println!("total time: {:.1} s", start.elapsed().as_secs_f64());
    if let Err(err) = std::fs::write(&options.json, report.to_json()) {
        eprintln!("vrampool-cuda-bench: cannot write {}: {err}", options.json);
        return ExitCode::from(1);
    }
    println!("JSON written to {}", options.json);
    ExitCode::SUCCESS
}
