//! The commands, one file each.

mod advise;
mod bench;
mod compare;
mod devices;
mod replay;
mod report;

use std::io::Write;

use vrampool::SimDeviceConfig;
use vrampool_replay::{ReplayOptions, ReplayPlan, ShortDuration};

use crate::cli::{Cli, Command, TraceOptions};
use crate::error::Result;

/// Runs the command the line asked for, writing what it prints to `out`.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<()> {
    match cli.command {
        Command::Compare(args) => compare::run(&args, out),
        Command::Replay(args) => replay::run(&args, out),
        Command::Advise(args) => advise::run(&args, out),
        Command::Report(args) => report::run(&args, out),
        Command::Bench(args) => bench::run(&args, out),
        Command::Devices => devices::run(out),
    }
}

/// The replay options the trace options ask for.
fn replay_options(options: &TraceOptions) -> ReplayOptions {
    ReplayOptions {
        capacity: options.capacity.unwrap_or(SimDeviceConfig::default().capacity),
        gpu_lag_us: (options.gpu_lag_ms * 1000.0).round() as u64,
        ..ReplayOptions::default()
    }
}

/// Warns on standard error where `plan` is too short for the driver-time budget ([`ShortDuration`]): its
/// times are likely not the microseconds of the run it recorded.
fn warn_of_short_duration(plan: &ReplayPlan, options: &ReplayOptions) {
    if let Some(short) = ShortDuration::check(plan, options) {
        // Where standard error is gone, the warning goes unsaid.
        let _ = writeln!(std::io::stderr(), "warning: {short}");
    }
}

/// What a table's title adds when the simulated GPU lags: ", simulated GPU 5 ms behind"; nothing for an
/// idle GPU.
fn lag_note(options: &TraceOptions) -> String {
    if options.gpu_lag_ms > 0.0 { format!(", simulated GPU {} ms behind", options.gpu_lag_ms) } else { String::new() }
}
