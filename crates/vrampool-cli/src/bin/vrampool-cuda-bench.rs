//! Allocation latency on a GPU: `cuMemAlloc`, CUDA's own pool and the vrampool strategies on both CUDA
//! backends, over the design's patterns, in one process. Prints a markdown table and writes JSON.
//!
//! ```text
//! vrampool-cuda-bench [--json PATH] [--device N] [--budget-ms N] [--one-cell-at-a-time]
//! ```
//!
//! `--help` says what each option does and its default. Exits 1 with a message where no driver or device
//! is present, 2 on a bad command line.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use vrampool_cuda::bench::{BenchConfig, BenchDevice, default_methods, run};

/// Allocation latency on a GPU: `cuMemAlloc`, CUDA's own pool and the vrampool strategies on both CUDA
/// backends, over the pair and churn patterns, in one process. Prints a markdown table (median ns per
/// operation) and writes the figures as JSON.
#[derive(Parser, Debug)]
#[command(name = "vrampool-cuda-bench")]
struct Options {
    /// Where the JSON report is written.
    #[arg(long, value_name = "PATH", default_value = "cuda-latency.json")]
    json: String,
    /// The CUDA device's ordinal.
    #[arg(long, value_name = "N", default_value_t = 0)]
    device: usize,
    /// Measuring time per cell (method and pattern), in milliseconds; 1000 takes about 35 s in all.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    budget_ms: u64,
    /// Time each cell to the end before the next, instead of the methods' rounds of one pattern taking
    /// turns (taking turns keeps the host's drift out of the ratios, but slows CUDA's pool's churn more
    /// than the pools'; docs/BENCHMARKS.md compares the two ways).
    #[arg(long)]
    one_cell_at_a_time: bool,
}

fn main() -> ExitCode {
    let options = Options::parse();
    let take_turns = !options.one_cell_at_a_time;
    let device = match BenchDevice::open(options.device) {
        Ok(device) => device,
        Err(err) => {
            eprintln!("vrampool-cuda-bench: cannot open CUDA device {}: {err}", options.device);
            return ExitCode::from(1);
        }
    };
    let config =
        BenchConfig { budget_per_cell: Duration::from_millis(options.budget_ms), take_turns, ..BenchConfig::default() };
    let methods = default_methods();
    eprintln!(
        "measuring {} methods x {} patterns on {} ({} ms per cell, {})...",
        methods.len(),
        config.patterns.len(),
        device.name(),
        options.budget_ms,
        if take_turns { "the methods' rounds taking turns" } else { "one cell at a time" }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_default_to_every_documented_value() {
        let options = Options::try_parse_from(["vrampool-cuda-bench"]).unwrap();
        assert_eq!(options.json, "cuda-latency.json");
        assert_eq!(options.device, 0);
        assert_eq!(options.budget_ms, 1000);
        assert!(!options.one_cell_at_a_time);
    }

    #[test]
    fn options_are_parsed_and_bad_ones_refused() {
        let options = Options::try_parse_from([
            "vrampool-cuda-bench",
            "--json",
            "out.json",
            "--device",
            "2",
            "--budget-ms",
            "500",
            "--one-cell-at-a-time",
        ])
        .unwrap();
        assert_eq!((options.json.as_str(), options.device, options.budget_ms), ("out.json", 2, 500));
        assert!(options.one_cell_at_a_time);
        for bad in [&["--device", "-1"][..], &["--budget-ms", "soon"], &["--colour"], &["--json"]] {
            let args = std::iter::once("vrampool-cuda-bench").chain(bad.iter().copied());
            assert!(Options::try_parse_from(args).is_err(), "{bad:?} accepted");
        }
    }
}
