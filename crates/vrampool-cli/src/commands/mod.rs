//! The commands, one file each.

mod advise;
mod bench;
mod compare;
mod devices;
mod replay;
mod report;

use vrampool::SimDeviceConfig;
use vrampool_replay::ReplayOptions;

use crate::cli::{Cli, Command, TraceOptions};
use crate::error::Result;

/// Runs the command the line asked for.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Compare(args) => compare::run(&args),
        Command::Replay(args) => replay::run(&args),
        Command::Advise(args) => advise::run(&args),
        Command::Report(args) => report::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Devices => devices::run(),
    }
}

/// The replay options the trace options ask for.
fn replay_options(options: &TraceOptions) -> ReplayOptions {
    ReplayOptions {
        capacity: options.capacity.unwrap_or(SimDeviceConfig::default().capacity),
        ..ReplayOptions::default()
    }
}
