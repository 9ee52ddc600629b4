//! Which traces a command reads, and reading them.

use std::io::Write;
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

/// Reads one trace and tells stderr what was skipped, left out or taken as live from the start.
pub fn read(path: &Path, options: &TraceOptions) -> Result<Trace> {
    let mut read_options = ReadOptions { device: options.device, lenient: options.lenient, ..ReadOptions::default() };
    if let Some(bytes) = options.max_trace_bytes {
        read_options.max_content_bytes = bytes;
    }
    let trace = read_trace(path, &read_options)?;
    for note in notes(&trace) {
        // Where standard error is gone, the notes go unsaid.
        let _ = writeln!(std::io::stderr(), "{note}");
    }
    Ok(trace)
}

/// What a reader of the command should know of how `trace` was read: events skipped as bad, entries of
/// unknown actions left out, blocks taken as live from the start.
fn notes(trace: &Trace) -> Vec<String> {
    let mut notes = Vec::new();
    if trace.skipped > 0 {
        notes.push(format!("{}: skipped {} bad events (--lenient)", trace.name, trace.skipped));
        notes.extend(trace.skipped_reasons.iter().map(|reason| format!("  {reason}")));
    }
    if trace.unknown_actions > 0 {
        notes.push(format!(
            "{}: left out {} entries whose action this reader does not know",
            trace.name, trace.unknown_actions
        ));
    }
    if !trace.initial_live.is_empty() {
        notes.push(format!(
            "{}: {} blocks freed but never allocated in the trace (its ring buffer dropped their allocation) \
             are taken as live from the start",
            trace.name,
            trace.initial_live.len()
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use vrampool_trace::LiveBlock;

    use super::*;

    #[test]
    fn skipped_events_unknown_actions_and_blocks_live_from_the_start_are_told() {
        let quiet = Trace { name: "t".into(), ignored: 5, ..Trace::default() };
        assert!(notes(&quiet).is_empty(), "{:?}", notes(&quiet));
        let trace = Trace {
            name: "t".into(),
            skipped: 2,
            skipped_reasons: vec!["t: line 3: bad".into()],
            unknown_actions: 4,
            initial_live: vec![LiveBlock { addr: 1, size: 2, stream: 0 }],
            ..Trace::default()
        };
        assert_eq!(
            notes(&trace),
            [
                "t: skipped 2 bad events (--lenient)",
                "  t: line 3: bad",
                "t: left out 4 entries whose action this reader does not know",
                "t: 1 blocks freed but never allocated in the trace (its ring buffer dropped their allocation) are \
                 taken as live from the start",
            ]
        );
    }
}
