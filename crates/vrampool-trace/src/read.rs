//! Reading traces from files, readers and bytes: decompression, format detection, device choice.

use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};
use crate::format::TraceFormat;
use crate::gzip;
use crate::pytorch_snapshot::Snapshot;
use crate::trace::Trace;
use crate::{rmm_csv, vrampool_csv};

/// How to read a trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// The device whose trace to read (its index in a snapshot's `device_traces`; CSV logs have device 0
    /// only). Default `None`: the one device that has events, or device 0 when none has.
    pub device: Option<usize>,
    /// Skip bad events (counted in [`Trace::skipped`]) instead of failing on the first. Default `false`.
    pub lenient: bool,
}

impl ReadOptions {
    /// Reads the trace of `device`.
    pub fn device(mut self, device: usize) -> Self {
        self.device = Some(device);
        self
    }

    /// Skips bad events instead of failing (`true`), or fails on the first (`false`).
    pub fn lenient(mut self, lenient: bool) -> Self {
        self.lenient = lenient;
        self
    }
}

/// Reads the trace in the file at `path`, of the device [`ReadOptions::device`] picks.
///
/// The format is chosen from the content, not the file name; gzip is recognised by its magic bytes. The
/// trace is named after the file name without its directory.
pub fn read_trace(path: impl AsRef<Path>, options: &ReadOptions) -> Result<Trace> {
    let (name, bytes) = read_file(path.as_ref())?;
    parse_trace(&name, &bytes, options)
}

/// Reads the traces of every device in the file at `path` (of [`ReadOptions::device`] only, when it is set),
/// in device order.
pub fn read_traces(path: impl AsRef<Path>, options: &ReadOptions) -> Result<Vec<Trace>> {
    let (name, bytes) = read_file(path.as_ref())?;
    parse_traces(&name, &bytes, options)
}

/// Reads a trace from `reader`, naming it `name` in the trace and in errors.
pub fn read_trace_from(name: &str, mut reader: impl Read, options: &ReadOptions) -> Result<Trace> {
    let mut bytes = Vec::new();
    reader.read_to_end(&mut bytes).map_err(|source| Error::Io { path: name.into(), source })?;
    parse_trace(name, &bytes, options)
}

/// Reads a trace from the bytes of a trace file (plain or gzipped), naming it `name`.
pub fn parse_trace(name: &str, bytes: &[u8], options: &ReadOptions) -> Result<Trace> {
    let content = Content::new(name, bytes)?;
    match content.format {
        TraceFormat::PytorchSnapshot => {
            let snapshot = Snapshot::decode(name, &content.bytes)?;
            let device = match options.device {
                Some(device) => device,
                None => only_device_with_events(name, &snapshot)?,
            };
            snapshot.trace(device, options.lenient)
        }
        format => {
            check_csv_device(name, options.device)?;
            read_csv(name, format, &content.bytes, options.lenient)
        }
    }
}

/// Reads the traces of every device from the bytes of a trace file (of [`ReadOptions::device`] only, when
/// it is set), in device order.
pub fn parse_traces(name: &str, bytes: &[u8], options: &ReadOptions) -> Result<Vec<Trace>> {
    let content = Content::new(name, bytes)?;
    match content.format {
        TraceFormat::PytorchSnapshot => {
            let snapshot = Snapshot::decode(name, &content.bytes)?;
            match options.device {
                Some(device) => Ok(vec![snapshot.trace(device, options.lenient)?]),
                None => (0..snapshot.device_count()).map(|device| snapshot.trace(device, options.lenient)).collect(),
            }
        }
        format => {
            check_csv_device(name, options.device)?;
            Ok(vec![read_csv(name, format, &content.bytes, options.lenient)?])
        }
    }
}

/// The file's name (without directory) and bytes.
fn read_file(path: &Path) -> Result<(String, Vec<u8>)> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io { path: path.to_owned(), source })?;
    let name = path.file_name().map_or_else(|| path.display().to_string(), |name| name.to_string_lossy().into_owned());
    Ok((name, bytes))
}

/// Decompressed content and its format.
struct Content<'a> {
    bytes: std::borrow::Cow<'a, [u8]>,
    format: TraceFormat,
}

impl<'a> Content<'a> {
    fn new(name: &str, bytes: &'a [u8]) -> Result<Self> {
        let bytes = if gzip::is_gzip(bytes) {
            std::borrow::Cow::Owned(gzip::decompress(name, bytes)?)
        } else {
            std::borrow::Cow::Borrowed(bytes)
        };
        match TraceFormat::detect(&bytes) {
            Some(format) => Ok(Content { bytes, format }),
            None => Err(Error::UnknownFormat { name: name.to_owned(), found: preview(&bytes) }),
        }
    }
}

/// The first bytes of `bytes`, escaped, for messages.
fn preview(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "nothing (the content is empty)".to_owned();
    }
    let shown: String = bytes.iter().take(24).flat_map(|&b| std::ascii::escape_default(b)).map(char::from).collect();
    format!("b\"{shown}\"{}", if bytes.len() > 24 { "..." } else { "" })
}

fn read_csv(name: &str, format: TraceFormat, content: &[u8], lenient: bool) -> Result<Trace> {
    match format {
        TraceFormat::RmmCsv => rmm_csv::read(name, content, lenient),
        _ => vrampool_csv::read(name, content, lenient),
    }
}

/// CSV logs have one device, 0.
fn check_csv_device(name: &str, device: Option<usize>) -> Result<()> {
    match device {
        Some(device) if device != 0 => Err(Error::NoSuchDevice { name: name.to_owned(), device, devices: 1 }),
        _ => Ok(()),
    }
}

/// The one device of the snapshot that has events (device 0 when none has).
fn only_device_with_events(name: &str, snapshot: &Snapshot<'_>) -> Result<usize> {
    let with_events: Vec<usize> =
        (0..snapshot.device_count()).filter(|&device| snapshot.entry_count(device) > 0).collect();
    match with_events.as_slice() {
        [] => Ok(0),
        [device] => Ok(*device),
        _ => Err(Error::AmbiguousDevice { name: name.to_owned(), devices: with_events }),
    }
}
