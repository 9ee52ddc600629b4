//! The command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// The furthest a simulated GPU may run behind the program, in milliseconds: a minute, far past any real
/// GPU's lag. The simulated device counts the time the program waits for it in nanoseconds, which a lag of
/// centuries would overflow.
const MAX_GPU_LAG_MS: f64 = 60_000.0;

/// vrampool: a GPU memory pool. Replay real allocation traces through its default pool and its strategies
/// on a simulated H200 or a GPU, compare them with PyTorch's allocator, find the strategy and configuration a
/// workload needs, and time the pools on the CPU.
// The help's `about` is this comment, not the package's description: that one also names the package's
// second binary, `vrampool-cuda-bench`, which is no command of this one.
#[derive(Debug, Parser)]
#[command(name = "vrampool", version)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// A table per trace: each strategy at its best configuration, beside PyTorch's recorded figures (where
    /// the trace has them: a PyTorch snapshot's segment events) and what its expandable segments would
    /// reserve (modelled).
    Compare(CompareArgs),
    /// One strategy on one trace.
    Replay(ReplayArgs),
    /// Sweep each strategy's parameters on a trace and recommend one, with its config string, and say how
    /// much better than the default it does.
    Advise(AdviseArgs),
    /// One self-contained HTML report: memory over time, request sizes, the comparison, the advice.
    Report(ReportArgs),
    /// Time the strategies and the default on the CPU (pairs and churn), beside offset-allocator.
    Bench(BenchArgs),
    /// List the GPUs the CUDA driver sees.
    Devices,
}

/// How traces are read and replayed.
#[derive(Debug, Args, Clone)]
pub struct TraceOptions {
    /// The device whose events to replay, for snapshots of several devices.
    #[arg(long)]
    pub device: Option<usize>,
    /// Skip bad events instead of failing, and say how many were skipped.
    #[arg(long)]
    pub lenient: bool,
    /// The most content to read from a trace, in bytes or with a unit (decompressed, for a gzipped file):
    /// 1GiB by default; more is an error.
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub max_trace_bytes: Option<u64>,
    /// The simulated device's memory, in bytes or with a unit (141GB by default, an H200).
    #[arg(long, value_parser = parse_size)]
    pub capacity: Option<u64>,
    /// How far the simulated GPU runs behind the program, in milliseconds of trace time: memory freed is
    /// known idle (and its pages free to move) only this long after the free. 0 (the default) simulates an
    /// idle GPU; at most 60000 (a minute).
    #[arg(long, value_name = "MS", default_value_t = 0.0, value_parser = parse_lag_ms)]
    pub gpu_lag_ms: f64,
}

/// A lag in milliseconds: a number from 0 to [`MAX_GPU_LAG_MS`].
fn parse_lag_ms(text: &str) -> std::result::Result<f64, String> {
    match text.parse::<f64>() {
        Ok(ms) if (0.0..=MAX_GPU_LAG_MS).contains(&ms) => Ok(ms),
        _ => Err(format!("`{text}` is not a number of milliseconds from 0 to {MAX_GPU_LAG_MS}")),
    }
}

/// `vrampool compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Traces to compare (PyTorch snapshots, RMM logs, vrampool CSV); the bundled traces when none.
    pub traces: Vec<PathBuf>,
    /// Print a JSON array of rows instead of tables.
    #[arg(long)]
    pub json: bool,
    /// How traces are read.
    #[command(flatten)]
    pub options: TraceOptions,
}

/// `vrampool replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The trace.
    pub trace: PathBuf,
    /// The strategy: fixed, dynamic, hybrid or adaptive. Optional: without it the config string's
    /// `strategy=` names it, and without either it is the default pool (adaptive); where both name one, they
    /// must be the same.
    #[arg(long)]
    pub strategy: Option<String>,
    /// The config string, `key=value,...` (as in VRAMPOOL_CONF), which may name the strategy itself
    /// (`strategy=hybrid,coverage=0.8`).
    #[arg(long, default_value = "")]
    pub config: String,
    /// Write the pool's own event log (vrampool CSV) to this file.
    #[arg(long)]
    pub events_out: Option<PathBuf>,
    /// Print the run as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// The device to replay on: `sim` (the simulated H200), or a real GPU through `cuda` (segments) or
    /// `cuda-vm` (virtual memory).
    #[arg(long, default_value = "sim")]
    pub on: String,
    /// The GPU's ordinal, with `--on cuda` or `--on cuda-vm`.
    #[arg(long, default_value_t = 0)]
    pub gpu: usize,
    /// With a real GPU: replay on the simulated device too, and fail unless the GPU's peak reserved bytes
    /// (the pool's count and the driver's) agree with the simulation's within 1%.
    #[arg(long)]
    pub check_against_sim: bool,
    /// How the trace is read.
    #[command(flatten)]
    pub options: TraceOptions,
}

/// `vrampool advise`.
#[derive(Debug, Args)]
pub struct AdviseArgs {
    /// The trace.
    pub trace: PathBuf,
    /// Print the advice as JSON.
    #[arg(long)]
    pub json: bool,
    /// How the trace is read.
    #[command(flatten)]
    pub options: TraceOptions,
}

/// `vrampool report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Traces to report on; the bundled traces when none.
    pub traces: Vec<PathBuf>,
    /// The HTML file to write.
    #[arg(short, long, default_value = "report.html")]
    pub output: PathBuf,
    /// How traces are read.
    #[command(flatten)]
    pub options: TraceOptions,
}

/// `vrampool bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Print a JSON array instead of a table: `{strategy, pattern, ns_per_op}`, or with `--threads`
    /// `{strategy, threads, ops_per_second, rounds_ops_per_second, vs_one_thread, region_share, events_per_1000,
    /// shards, peak_reserved_bytes, peak_live_bytes}` (the median of three rounds, and each round's).
    #[arg(long)]
    pub json: bool,
    /// About how long to run, in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Time, instead of one thread's latency, the throughput of a churn that 1, 2, 4, ... up to N threads run
    /// on one pool at once, each on a stream of its own and freeing some blocks the others made (1 to 1024);
    /// three rounds of every thread count, taking turns, the median reported.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
}

fn parse_size(text: &str) -> Result<u64, String> {
    vrampool::parse_bytes(text).ok_or_else(|| format!("`{text}` is not a byte count (like 141GB or 80GiB)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpu_lag_is_milliseconds_from_zero_to_a_minute_and_defaults_to_an_idle_gpu() {
        let replay = |extra: &[&str]| {
            let mut line = vec!["vrampool", "replay", "t.pickle.gz", "--strategy", "dynamic"];
            line.extend_from_slice(extra);
            Cli::try_parse_from(line)
        };
        let Command::Replay(args) = replay(&[]).unwrap().command else { panic!("not a replay") };
        assert_eq!(args.options.gpu_lag_ms, 0.0);
        let Command::Replay(args) = replay(&["--gpu-lag-ms", "2.5"]).unwrap().command else { panic!() };
        assert_eq!(args.options.gpu_lag_ms, 2.5);
        let Command::Replay(args) = replay(&["--gpu-lag-ms", "60000"]).unwrap().command else { panic!() };
        assert_eq!(args.options.gpu_lag_ms, 60_000.0);
        for bad in ["-1", "NaN", "inf", "soon", "60000.5", "1e300"] {
            let err = replay(&[&format!("--gpu-lag-ms={bad}")]).unwrap_err().to_string();
            assert!(err.contains("is not a number of milliseconds from 0 to 60000"), "{bad}: {err}");
        }
    }

    /// The top-level help describes this command and its subcommands only: `vrampool-cuda-bench` is a
    /// binary of its own, not one of them.
    #[test]
    fn the_help_names_no_command_that_is_not_one() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        assert!(!help.contains("vrampool-cuda-bench"), "{help}");
        assert!(help.starts_with("vrampool: a GPU memory pool. Replay real allocation traces"), "{help}");
        let commands: Vec<String> = Cli::command().get_subcommands().map(|c| c.get_name().to_owned()).collect();
        assert_eq!(commands, ["compare", "replay", "advise", "report", "bench", "devices"]);
    }

    #[test]
    fn the_content_limit_takes_bytes_or_a_unit() {
        let compare = |extra: &[&str]| {
            let mut line = vec!["vrampool", "compare"];
            line.extend_from_slice(extra);
            match Cli::try_parse_from(line).map(|cli| cli.command) {
                Ok(Command::Compare(args)) => Ok(args.options.max_trace_bytes),
                Ok(other) => panic!("{other:?}"),
                Err(err) => Err(err.to_string()),
            }
        };
        assert_eq!(compare(&[]), Ok(None));
        assert_eq!(compare(&["--max-trace-bytes", "4GiB"]), Ok(Some(4 << 30)));
        assert_eq!(compare(&["--max-trace-bytes", "18446744073709551615"]), Ok(Some(u64::MAX)));
        assert!(compare(&["--max-trace-bytes", "lots"]).unwrap_err().contains("is not a byte count"));
    }
}
