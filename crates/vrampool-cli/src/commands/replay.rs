//! `vrampool replay`: one strategy on one trace.

use std::fs::File;
use std::io::Write;

use serde::Serialize;
use vrampool::{BackendKind, PoolSpec, whole_mib};
use vrampool_cuda::{DeviceRequest, open_backend};
use vrampool_replay::{ComparisonRow, ReplayOptions, ReplayPlan, ReplayResult, ReplayTarget, replay, replay_on};
use vrampool_trace::{Event, VrampoolCsvWriter};

use super::replay_options;
use crate::cli::ReplayArgs;
use crate::error::{Error, Result};
use crate::trace_input::read;

/// Replays and prints the figures.
pub fn run(args: &ReplayArgs, out: &mut dyn Write) -> Result<()> {
    let spec = spec_of(args.strategy.as_deref(), &args.config)?;
    let options = replay_options(&args.options);
    if options.gpu_lag_us > 0 && args.on != "sim" {
        return Err(Error::Usage(format!(
            "--gpu-lag-ms simulates a GPU that runs behind the program; it applies to --on sim, not --on {}",
            args.on
        )));
    }
    spec.validate(options.capacity)?;
    let trace = read(&args.trace, &args.options)?;
    let plan = ReplayPlan::from_trace(&trace)?;
    if args.on == "sim" {
        super::warn_of_short_duration(&plan, &options);
    }
    let result = match &args.events_out {
        None => run_on(&args.on, args.gpu, &plan, &spec, &options, &mut |_| Ok(()))?,
        Some(path) => {
            let write_error = |source| Error::Write { path: path.display().to_string(), source };
            let file = File::create(path).map_err(write_error)?;
            // The writer buffers, and its finish reports what writing the buffer's last bytes met.
            let mut writer = VrampoolCsvWriter::new(file)?;
            let result = run_on(&args.on, args.gpu, &plan, &spec, &options, &mut |event| writer.write_event(&event))?;
            writer.finish().map_err(|error| match error {
                vrampool_trace::Error::Write(source) => write_error(source),
                other => other.into(),
            })?;
            result
        }
    };
    let check = if args.check_against_sim && args.on != "sim" {
        Some(SimulationCheck::new(&result, &replay(&plan, &spec, &options)?))
    } else {
        None
    };
    if args.json {
        let output = ReplayOutput {
            row: ComparisonRow::from(&result),
            device: args.on.clone(),
            duration_us: result.duration_us,
            chunks_moved: result.stats.chunks_moved,
            chunks_aliased: result.stats.chunks_aliased,
            synchronizations: result.stats.synchronizations,
            event_waits: result.stats.event_waits,
            host_blocked_us: result.host_blocked_us,
            device_time_us: result.stats.device_time_ns as f64 / 1000.0,
            check: check.clone(),
        };
        outln!(out, "{}", serde_json::to_string_pretty(&output).expect("plain data"))?;
    } else {
        print_text(args, &result, out)?;
        if let Some(check) = &check {
            outln!(
                out,
                "on the GPU:     pool {} / driver {} peak reserved, simulation {} ({:+.3}% / {:+.3}%)",
                whole_mib(check.gpu_pool_peak_reserved_bytes),
                check.gpu_driver_peak_used_bytes.map_or_else(|| "-".into(), whole_mib),
                whole_mib(check.sim_peak_reserved_bytes),
                check.pool_difference * 100.0,
                check.driver_difference.unwrap_or(f64::NAN) * 100.0
            )?;
        }
    }
    match check {
        Some(check) if !check.agrees() => Err(Error::Device(format!(
            "{}: the GPU's peak reserved bytes differ from the simulation's by more than 1% \
             (pool {:+.3}%, driver {:+.3}%)",
            result.trace,
            check.pool_difference * 100.0,
            check.driver_difference.unwrap_or(f64::NAN) * 100.0
        ))),
        _ => Ok(()),
    }
}

/// A replay's figures, the device it ran on, and its agreement with the simulation.
#[derive(Debug, Serialize)]
struct ReplayOutput {
    #[serde(flatten)]
    row: ComparisonRow,
    device: String,
    /// Microseconds from the trace's first event to its last.
    duration_us: i64,
    /// Idle pages moved to where memory was needed.
    chunks_moved: u64,
    /// Idle pages still in use by queued work mapped where memory was needed as well.
    chunks_aliased: u64,
    /// Waits for the whole device before moving idle pages.
    synchronizations: u64,
    /// Waits for one event before moving idle pages.
    event_waits: u64,
    /// The simulated GPU's modelled time the program was blocked in those waits (0 on a real GPU).
    host_blocked_us: f64,
    /// The host's time in the pool's device work while replaying (maps, moves, aliases, event calls and
    /// waits), as the pool measured it: on a real GPU the driver's calls; on the simulated device only its
    /// bookkeeping (`driver_time_us` is the modelled driver time there).
    device_time_us: f64,
    check: Option<SimulationCheck>,
}

/// How a replay on a GPU compares with the same replay on the simulated device.
#[derive(Clone, Debug, Serialize)]
struct SimulationCheck {
    sim_peak_reserved_bytes: u64,
    gpu_pool_peak_reserved_bytes: u64,
    gpu_driver_peak_used_bytes: Option<u64>,
    pool_difference: f64,
    driver_difference: Option<f64>,
    same_allocations: bool,
}

impl SimulationCheck {
    fn new(gpu: &ReplayResult, sim: &ReplayResult) -> Self {
        let relative =
            |value: u64| (value as f64 - sim.peak_reserved_bytes as f64) / sim.peak_reserved_bytes.max(1) as f64;
        SimulationCheck {
            sim_peak_reserved_bytes: sim.peak_reserved_bytes,
            gpu_pool_peak_reserved_bytes: gpu.peak_reserved_bytes,
            gpu_driver_peak_used_bytes: gpu.device_peak_used_bytes,
            pool_difference: relative(gpu.peak_reserved_bytes),
            driver_difference: gpu.device_peak_used_bytes.map(relative),
            same_allocations: gpu.stats.allocations == sim.stats.allocations
                && gpu.stats.frees == sim.stats.frees
                && gpu.peak_live_bytes == sim.peak_live_bytes
                && gpu.ooms == sim.ooms,
        }
    }

    fn agrees(&self) -> bool {
        self.same_allocations
            && self.pool_difference.abs() <= 0.01
            && self.driver_difference.is_none_or(|d| d.abs() <= 0.01)
    }
}

/// Replays on the device `on` names.
fn run_on(
    on: &str,
    gpu: usize,
    plan: &ReplayPlan,
    spec: &PoolSpec,
    options: &ReplayOptions,
    log: &mut dyn FnMut(Event) -> vrampool_trace::Result<()>,
) -> Result<ReplayResult> {
    let kind = match on {
        "sim" => return Ok(vrampool_replay::replay_logged(plan, spec, options, log)?),
        "cuda" => BackendKind::Cuda,
        "cuda-vm" => BackendKind::CudaVirtual,
        other => return Err(Error::Usage(format!("--on {other}: expected sim, cuda or cuda-vm"))),
    };
    let request = DeviceRequest::new(kind, gpu, spec.page_size);
    let opened = open_backend(request).map_err(|err| Error::Device(format!("GPU {gpu}: {err}")))?;
    let memory = opened.cuda.expect("a CUDA kind opens a CUDA device");
    let used = || memory.memory_info().ok().map(|(free, total)| total - free);
    let target = ReplayTarget { backend: opened.backend, simulated: None, used_bytes: Some(&used) };
    Ok(replay_on(plan, spec, options, target, log)?)
}

/// The pool `--strategy` (the default pool where `None`) and `--config` describe: the config string read
/// as written after the strategy, so that its keys are checked against that strategy.
fn spec_of(strategy: Option<&str>, config: &str) -> Result<PoolSpec> {
    let Some(strategy) = strategy else { return Ok(PoolSpec::parse(config)?) };
    let strategy: vrampool::Strategy = strategy.parse()?;
    let names_one = config.split(',').filter_map(|item| item.split_once('=')).any(|(key, _)| key.trim() == "strategy");
    if !names_one {
        return Ok(PoolSpec::parse(&format!("strategy={},{config}", strategy.name()))?);
    }
    let spec = PoolSpec::parse(config)?;
    if spec.strategy != strategy {
        return Err(Error::Usage(format!(
            "--strategy {} and the config string's strategy={} disagree",
            strategy.name(),
            spec.strategy.name()
        )));
    }
    Ok(spec)
}

fn print_text(args: &ReplayArgs, result: &ReplayResult, out: &mut dyn Write) -> Result<()> {
    outln!(
        out,
        "trace:          {} ({} events, {} allocations and frees)",
        result.trace,
        result.events,
        result.operations
    )?;
    outln!(out, "config:         {}", result.config)?;
    if args.options.gpu_lag_ms > 0.0 {
        outln!(out, "simulated GPU:  {} ms behind the program", args.options.gpu_lag_ms)?;
    }
    outln!(out, "peak live:      {}", whole_mib(result.peak_live_bytes))?;
    outln!(out, "peak reserved:  {}", whole_mib(result.peak_reserved_bytes))?;
    outln!(out, "utilization:    {:.4}", result.utilization)?;
    outln!(out, "fallbacks:      {}", result.fallbacks)?;
    outln!(out, "ooms:           {}", result.ooms)?;
    let aliased = match result.stats.chunks_aliased {
        0 => String::new(),
        n => format!(", {n} aliased while in use"),
    };
    outln!(
        out,
        "device calls:   {} ({} growths, {} chunks moved{aliased})",
        result.backend_calls,
        result.stats.growths,
        result.stats.chunks_moved
    )?;
    let waits = result.stats.synchronizations + result.stats.event_waits;
    if waits > 0 {
        outln!(
            out,
            "device waits:   {waits} ({} for the whole GPU, {} for one event: the program waited for the GPU to be \
             done with idle pages)",
            result.stats.synchronizations,
            result.stats.event_waits
        )?;
    }
    outln!(
        out,
        "driver time:    {:.1} ms (cost model), {:.2}% of the trace's {:.1} s",
        result.driver_time_us / 1000.0,
        result.driver_time_us / result.duration_us.max(1) as f64 * 100.0,
        result.duration_us as f64 / 1e6
    )?;
    if args.options.gpu_lag_ms > 0.0 {
        outln!(
            out,
            "blocked on GPU: {:.1} ms (what the GPU had left of the work each wait waited for)",
            result.host_blocked_us / 1000.0
        )?;
    }
    outln!(out, "pool CPU time:  {:.1} ns per event", result.replay_ns_per_event)?;
    if !result.classes.is_empty() {
        let classes: Vec<String> = result
            .classes
            .iter()
            .map(|c| format!("{}x{}", vrampool::format_bytes(c.block_size), c.block_count))
            .collect();
        outln!(out, "classes:        {}", classes.join(" "))?;
    }
    if let Some(path) = &args.events_out {
        outln!(out, "event log:      {}", path.display())?;
    }
    Ok(())
}
