//! Which traces a command reads, and reading them.

use std::path::{Path, PathBuf};

use vrampool_trace::{ReadOptions, Trace, read_trace};

use crate::cli::TraceOptions;
use crate::error::{Error, Result};

/// The traces bundled in the repository, looked for in `./traces` and then beside the sources.
pub fn bundled_traces() -> Result<Vec<PathBuf>> {
    let candidates = [PathBuf::from("traces"), Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces")];
    for dir in candidates {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut traces: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(".pickle.gz")))
            .collect();
        if !traces.is_empty() {
            traces.sort();
            return Ok(traces);
        }
    }
    Err(Error::Usage("no trace given and no bundled traces found in ./traces".into()))
}

/// The traces named, or the bundled ones.
pub fn traces_or_bundled(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    if paths.is_empty() { bundled_traces() } else { Ok(paths.to_vec()) }
}

/// Reads one trace and tells stderr what was skipped or taken as live from the start.
pub fn read(path: &Path, options: &TraceOptions) -> Result<Trace> {
    let read_options = ReadOptions { device: options.device, lenient: options.lenient, ..ReadOptions::default() };
    let trace = read_trace(path, &read_options)?;
    if trace.skipped > 0 {
        eprintln!("{}: skipped {} bad events (--lenient)", trace.name, trace.skipped);
        for reason in &trace.skipped_reasons {
            eprintln!("  {reason}");
        }
    }
    if !trace.initial_live.is_empty() {
        eprintln!(
            "{}: {} blocks freed but never allocated in the trace (its ring buffer dropped their allocation) \
             are taken as live from the start",
            trace.name,
            trace.initial_live.len()
        );
    }
    Ok(trace)
}
