//! `vrampool compare`: each strategy at its best configuration on each trace, beside PyTorch's recorded
//! figures and its expandable segments as modelled.

use std::io::Write;

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
pub fn run(args: &CompareArgs, out: &mut dyn Write) -> Result<()> {
    let mut rows: Vec<ComparisonRow> = Vec::new();
    for path in traces_or_bundled(&args.traces)? {
        let trace = read(&path, &args.options)?;
        let plan = ReplayPlan::from_trace(&trace)?;
        let advice = advise_with_progress(&plan, &replay_options(&args.options))?;
        let mut trace_rows: Vec<ComparisonRow> =
            advice.strategies.iter().map(|s| ComparisonRow::from(&s.best)).collect();
        trace_rows.extend(ComparisonRow::pytorch(&trace));
        trace_rows.push(ComparisonRow::expandable(&plan));
        if !args.json {
            let title = format!("{}{}", trace.name, super::lag_note(&args.options));
            outln!(out, "{}", render(&title, &trace_rows, &advice))?;
        }
        rows.extend(trace_rows);
    }
    if args.json {
        outln!(out, "{}", serde_json::to_string_pretty(&rows).expect("rows are plain data"))?;
    } else {
        outln!(out, "{}", summary(&rows))?;
    }
    Ok(())
}

/// Every trace's utilization by strategy, in one table: the tunable strategies at their best, the
/// default as it is, PyTorch as recorded, PyTorch's expandable segments as modelled.
pub fn summary(rows: &[ComparisonRow]) -> String {
    let columns = ["fixed", "dynamic", "hybrid", "adaptive", "pytorch", "expandable"];
    let mut table = Table::new(&[
        "trace",
        "fixed",
        "dynamic",
        "hybrid",
        "adaptive (default)",
        "pytorch (recorded)",
        "expandable (modelled)",
    ]);
    let mut traces: Vec<&str> = Vec::new();
    for row in rows {
        if !traces.contains(&row.trace.as_str()) {
            traces.push(&row.trace);
        }
    }
    for trace in traces {
        let mut cells = vec![trace.trim_end_matches(".pickle.gz").to_string()];
        for strategy in columns {
            let row = rows.iter().find(|r| r.trace == trace && r.strategy == strategy);
            cells.push(crate::table::or_dash(row.and_then(|r| r.utilization).map(|u| format!("{u:.3}"))));
        }
        table.row(cells);
    }
    format!("utilization (peak live over peak reserved)\n{}", table.render())
}

/// Advises on a plan with a progress bar on stderr, after a warning where the plan is too short for the
/// driver-time budget.
pub fn advise_with_progress(plan: &ReplayPlan, options: &vrampool_replay::ReplayOptions) -> Result<Advice> {
    super::warn_of_short_duration(plan, options);
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
    let no_pytorch = if rows.iter().any(|r| r.strategy == "pytorch") {
        ""
    } else {
        "pytorch: no figures of its own in this trace (no segment events recorded)\n"
    };
    format!(
        "{name} ({events} events)\n{}\n{no_pytorch}advice: {} with `{}`: {}.\n",
        table.render(),
        advice.recommended.name(),
        advice.config,
        advice.reason
    )
}

#[cfg(test)]
mod tests {
    use vrampool_replay::ReplayOptions;
    use vrampool_trace::{Event, EventKind, Trace};

    use super::*;

    /// The table of a trace, with or without a PyTorch segment recorded before its allocations.
    fn table(segment: bool) -> String {
        let mut events = Vec::new();
        if segment {
            events.push(Event::new(0, EventKind::SegmentAlloc, 0x10_0000, 64 << 20, 0));
        }
        for i in 0..20u64 {
            let addr = 0x10_0000 + (i % 4) * (4 << 20);
            events.push(Event::new(2 * i as i64 + 1, EventKind::Alloc, addr, (1 + i % 3) << 20, 0));
            events.push(Event::new(2 * i as i64 + 2, EventKind::Free, addr, (1 + i % 3) << 20, 0));
        }
        let trace = Trace { name: "t".into(), events, ..Trace::default() };
        let plan = ReplayPlan::from_trace(&trace).unwrap();
        let advice = advise(&plan, &Strategy::ALL, &ReplayOptions::default(), &|_, _| {}).expect("the sweep runs");
        let mut rows: Vec<ComparisonRow> = advice.strategies.iter().map(|s| ComparisonRow::from(&s.best)).collect();
        rows.extend(ComparisonRow::pytorch(&trace));
        rows.push(ComparisonRow::expandable(&plan));
        render("t", &rows, &advice)
    }

    #[test]
    fn the_summary_has_a_row_per_trace_and_a_column_per_strategy() {
        let summary = summary(&[ComparisonRow::from(
            &vrampool_replay::replay(
                &ReplayPlan::from_trace(&Trace {
                    name: "t.pickle.gz".into(),
                    events: vec![Event::new(0, EventKind::Alloc, 0x1000, 4 << 20, 0)],
                    ..Trace::default()
                })
                .unwrap(),
                &vrampool::PoolSpec::default(),
                &ReplayOptions::default(),
            )
            .unwrap(),
        )]);
        let row = summary.lines().find(|l| l.starts_with("t ")).expect("a row for the trace");
        assert!(row.contains("1.000") && row.matches(" - ").count() + row.matches(" -").count() >= 5, "{summary}");
        assert!(summary.contains("expandable (modelled)"), "{summary}");
        assert!(summary.contains("adaptive (default)"), "{summary}");
    }

    #[test]
    fn pytorch_has_a_row_only_where_the_trace_recorded_its_segments() {
        let with = table(true);
        assert!(with.lines().any(|l| l.starts_with("pytorch ") && l.contains("64 MiB")), "{with}");
        assert!(!with.contains("no figures of its own"), "{with}");
        let without = table(false);
        assert!(!without.lines().any(|l| l.starts_with("pytorch ")), "{without}");
        assert!(without.contains("pytorch: no figures of its own in this trace (no segment events recorded)"));
        for table in [with, without] {
            let row = table.lines().find(|l| l.starts_with("expandable ")).expect("a modelled row in every table");
            // The 1 MiB requests in a small page of 2 MiB, the 2 and 3 MiB ones in a large page of 20.
            assert!(row.contains("(modelled)") && row.contains("22 MiB"), "{table}");
        }
    }
}
