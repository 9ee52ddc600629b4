//! `vrampool advise`: sweep each strategy on a trace and recommend one.

use std::io::Write;

use serde::Serialize;
use vrampool::whole_mib;
use vrampool_replay::{ComparisonRow, Objective, ReplayPlan};

use super::compare::advise_with_progress;
use super::replay_options;
use crate::cli::AdviseArgs;
use crate::error::Result;
use crate::table::{Table, or_dash};
use crate::trace_input::read;

/// The advice as JSON.
#[derive(Debug, Serialize)]
struct AdviceOutput {
    trace: String,
    recommended: String,
    config: String,
    reason: String,
    /// How much better than the default the recommended config does.
    versus_default: String,
    objective: Objective,
    strategies: Vec<ComparisonRow>,
    /// PyTorch's recorded figures; null where the trace records none.
    pytorch: Option<ComparisonRow>,
    /// PyTorch's expandable segments on the trace's requests, as modelled.
    expandable: ComparisonRow,
}

/// Runs the sweep and prints the recommendation.
pub fn run(args: &AdviseArgs, out: &mut dyn Write) -> Result<()> {
    let trace = read(&args.trace, &args.options)?;
    let plan = ReplayPlan::from_trace(&trace)?;
    let advice = advise_with_progress(&plan, &replay_options(&args.options))?;
    let pytorch = ComparisonRow::pytorch(&trace);
    let expandable = ComparisonRow::expandable(&plan);
    let best = advice.recommended_result();
    if args.json {
        let output = AdviceOutput {
            trace: trace.name.clone(),
            recommended: advice.recommended.name().into(),
            config: advice.config.clone(),
            reason: advice.reason.clone(),
            versus_default: advice.versus_default.clone(),
            objective: advice.objective,
            strategies: advice.strategies.iter().map(|s| ComparisonRow::from(&s.best)).collect(),
            pytorch,
            expandable,
        };
        outln!(out, "{}", serde_json::to_string_pretty(&output).expect("plain data"))?;
        return Ok(());
    }
    let mut table = Table::new(&["strategy", "tried", "peak reserved", "utilization", "driver ms", "best config"]);
    for s in &advice.strategies {
        table.row(vec![
            s.best.strategy.name().into(),
            s.tried.to_string(),
            whole_mib(s.best.peak_reserved_bytes),
            format!("{:.3}", s.best.utilization),
            format!("{:.1}", s.best.driver_time_us / 1000.0),
            s.best.config.clone(),
        ]);
    }
    outln!(out, "{} ({} events){}", trace.name, trace.events.len(), super::lag_note(&args.options))?;
    outln!(out, "{}", table.render())?;
    outln!(out)?;
    outln!(out, "recommended: {}", advice.recommended.name())?;
    outln!(out, "config:      {}", advice.config)?;
    outln!(
        out,
        "predicted:   peak reserved {} (PyTorch recorded {}, expandable segments modelled {}), utilization {:.3} (PyTorch {}), driver {:.1} ms (PyTorch {} ms)",
        whole_mib(best.peak_reserved_bytes),
        or_dash(pytorch.as_ref().map(|p| whole_mib(p.peak_reserved_bytes))),
        whole_mib(expandable.peak_reserved_bytes),
        best.utilization,
        or_dash(pytorch.as_ref().and_then(|p| p.utilization).map(|u| format!("{u:.3}"))),
        best.driver_time_us / 1000.0,
        or_dash(pytorch.as_ref().and_then(|p| p.driver_time_us).map(|us| format!("{:.1}", us / 1000.0))),
    )?;
    outln!(out, "why:         {}.", advice.reason)?;
    outln!(out, "vs default:  {}.", advice.versus_default)?;
    outln!(out, "({})", advice.objective.ranking())?;
    Ok(())
}
