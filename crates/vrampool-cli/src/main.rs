//! The `vrampool` command: replay real allocation traces through vrampool's strategies on the simulated
//! device, compare them with PyTorch's own allocator, advise a strategy, draw a report, and time the pools.

/// `writeln!` to a command's output, a failure being an [`error::Error::Output`].
macro_rules! outln {
    ($out:expr $(, $($arg:tt)*)?) => {
        writeln!($out $(, $($arg)*)?).map_err($crate::error::Error::Output)
    };
}

mod cli;
mod commands;
mod comparison_columns;
mod error;
mod progress;
mod report_html;
mod table;
mod trace_input;

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Parser;

use crate::error::Error;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let mut out = io::stdout().lock();
    match commands::run(cli, &mut out).and_then(|()| out.flush().map_err(Error::Output)) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of a pipe had what it wanted and closed it: nothing more to say.
        Err(Error::Output(err)) if err.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(err) => {
            // Where standard error is gone too, the status says it all.
            let _ = writeln!(io::stderr(), "error: {err}");
            ExitCode::FAILURE
        }
    }
}
