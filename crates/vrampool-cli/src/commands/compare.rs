//! `vrampool compare`: each strategy at its best configuration on each trace, beside PyTorch.

use vrampool::Strategy;
use vrampool_replay::{Advice, ComparisonRow, ReplayPlan, advise};

use super::replay_options;
use crate::cli::CompareArgs;
use crate::comparison_columns::{COLUMNS, config_cell, figure_cells};
use crate::error::Result;
use crate::progress;
use crate::table::Table;
use crate::trace_input::{read, traces_or_bundled};

/// Runs the comparison and prints tables (or JSON).
pub fn run(args: &CompareArgs) -> Result<()> {
    let mut rows: Vec<ComparisonRow> = Vec::new();
    for path in traces_or_bundled(&args.traces)? {
        let trace = read(&path, &args.options)?;
        let plan = ReplayPlan::from_trace(&trace);
        let advice = advise_with_progress(&plan, &replay_options(&args.options))?;
        let mut trace_rows: Vec<ComparisonRow> =
            advice.strategies.iter().map(|s| ComparisonRow::from(&s.best)).collect();
        trace_rows.push(ComparisonRow::pytorch(&trace));
        if !args.json {
            let title = format!("{}{}", trace.name, super::lag_note(&args.options));
            println!("{}", render(&title, &trace_rows, &advice));
        }
        rows.extend(trace_rows);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows).expect("rows are plain data"));
    }
    Ok(())
}

/// Advises on a plan with a progress bar on stderr.
pub fn advise_with_progress(plan: &ReplayPlan, options: &vrampool_replay::ReplayOptions) -> Result<Advice> {
    let bar = progress::bar(0, &plan.name);
    let advice = advise(plan, &Strategy::ALL, options, &|done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    });
    bar.finish_and_clear();
    Ok(advice?)
}

/// The table of one trace, with the advice under it.
pub fn render(name: &str, rows: &[ComparisonRow], advice: &Advice) -> String {
    let mut table = Table::new(&COLUMNS);
    for row in rows {
        let mut cells = vec![row.strategy.clone()];
        cells.extend(figure_cells(row));
        cells.push(config_cell(row));
        table.row(cells);
    }
    let events = rows.first().map_or(0, |r| r.events);
    format!(
        "{name} ({events} events)\n{}\nadvice: {} with `{}`: {}.\n",
        table.render(),
        advice.recommended.name(),
        advice.config,
        advice.reason
    )
}
