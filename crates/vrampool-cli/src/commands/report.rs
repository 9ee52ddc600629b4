//! `vrampool report`: one self-contained HTML file for one or more traces.

use std::io::Write;

use vrampool_replay::{ComparisonRow, ReplayPlan};

use super::compare::advise_with_progress;
use super::replay_options;
use crate::cli::ReportArgs;
use crate::error::{Error, Result};
use crate::report_html::{self, TraceReport};
use crate::trace_input::{read, traces_or_bundled};

/// Replays, advises and writes the report.
pub fn run(args: &ReportArgs, out: &mut dyn Write) -> Result<()> {
    let mut reports = Vec::new();
    for path in traces_or_bundled(&args.traces)? {
        let trace = read(&path, &args.options)?;
        let plan = ReplayPlan::from_trace(&trace)?;
        let advice = advise_with_progress(&plan, &replay_options(&args.options))?;
        let pytorch = ComparisonRow::pytorch(&trace);
        let expandable = ComparisonRow::expandable(&plan);
        reports.push(TraceReport { trace, plan, advice, pytorch, expandable });
    }
    let html = report_html::render(&reports, args.options.gpu_lag_ms);
    std::fs::write(&args.output, html)
        .map_err(|source| Error::Write { path: args.output.display().to_string(), source })?;
    outln!(out, "wrote {}", args.output.display())?;
    Ok(())
}
