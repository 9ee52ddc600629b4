//! The `vrampool` command: replay real allocation traces through vrampool's strategies on the simulated
//! device, compare them with PyTorch's own allocator, advise a strategy, draw a report, and time the pools.

mod cli;
mod commands;
mod comparison_columns;
mod error;
mod progress;
mod report_html;
mod table;
mod trace_input;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}
