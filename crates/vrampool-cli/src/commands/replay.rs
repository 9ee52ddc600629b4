//! `vrampool replay`: one strategy on one trace.

use std::fs::File;
use std::io::BufWriter;

use vrampool::PoolSpec;
use vrampool_replay::{ComparisonRow, ReplayPlan, replay, replay_logged};
use vrampool_trace::VrampoolCsvWriter;

use super::replay_options;
use crate::cli::ReplayArgs;
use crate::error::{Error, Result};
use crate::table::mib;
use crate::trace_input::read;

/// Replays and prints the figures.
pub fn run(args: &ReplayArgs) -> Result<()> {
    let strategy: vrampool::Strategy = args.strategy.parse()?;
    let mut spec = PoolSpec::parse(&args.config)?;
    if args.config.contains("strategy=") && spec.strategy != strategy {
        return Err(Error::Usage(format!(
            "--strategy {} and the config string's strategy={} disagree",
            strategy.name(),
            spec.strategy.name()
        )));
    }
    spec.strategy = strategy;
    let options = replay_options(&args.options);
    spec.validate(options.capacity)?;
    let trace = read(&args.trace, &args.options)?;
    let plan = ReplayPlan::from_trace(&trace);
    let result = match &args.events_out {
        None => replay(&plan, &spec, &options)?,
        Some(path) => {
            let write_error = |source| Error::Write { path: path.display().to_string(), source };
            let file = File::create(path).map_err(write_error)?;
            let mut writer = VrampoolCsvWriter::new(BufWriter::new(file))?;
            let result = replay_logged(&plan, &spec, &options, &mut |event| writer.write_event(&event))?;
            writer.finish()?;
            result
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&ComparisonRow::from(&result)).expect("plain data"));
        return Ok(());
    }
    println!(
        "trace:          {} ({} events, {} allocations and frees)",
        result.trace, result.events, result.operations
    );
    println!("config:         {}", result.config);
    println!("peak live:      {}", mib(result.peak_live_bytes));
    println!("peak reserved:  {}", mib(result.peak_reserved_bytes));
    println!("utilization:    {:.4}", result.utilization);
    println!("fallbacks:      {}", result.fallbacks);
    println!("ooms:           {}", result.ooms);
    println!(
        "device calls:   {} ({} growths, {} chunks moved)",
        result.backend_calls, result.stats.growths, result.stats.chunks_moved
    );
    println!("driver time:    {:.1} ms (cost model)", result.driver_time_us / 1000.0);
    println!("pool CPU time:  {:.1} ns per event", result.replay_ns_per_event);
    if !result.classes.is_empty() {
        let classes: Vec<String> = result
            .classes
            .iter()
            .map(|c| format!("{}x{}", vrampool::format_bytes(c.block_size), c.block_count))
            .collect();
        println!("classes:        {}", classes.join(" "));
    }
    if let Some(path) = &args.events_out {
        println!("event log:      {}", path.display());
    }
    Ok(())
}
