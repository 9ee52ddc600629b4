//! Reading traces from files, readers and bytes: decompression, format detection, device choice.
//!
//! Content is read in pieces, never whole: a reader holds the events it keeps and a window of the content.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use crate::content::{Content, DEFAULT_MAX_CONTENT_BYTES};
use crate::error::{Error, Result};
use crate::format::TraceFormat;
use crate::pytorch_snapshot::Snapshot;
use crate::trace::Trace;
use crate::{rmm_csv, vrampool_csv};

/// The content bytes looked at to tell a trace's format.
const SNIFF_BYTES: usize = 64 << 10;

/// How to read a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    /// The device whose trace to read (its index in a snapshot's `device_traces`; CSV logs have device 0
    /// only). Default `None`: the one device that has events, or device 0 when none has.
    pub device: Option<usize>,
    /// Skip bad events (counted in [`Trace::skipped`]) instead of failing on the first. Default `false`.
    pub lenient: bool,
    /// The most content bytes to read (decompressed bytes, for a gzipped file): more is an error,
    /// [`Error::ContentTooLarge`]. Default [`DEFAULT_MAX_CONTENT_BYTES`] (1 GiB).
    pub max_content_bytes: u64,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions { device: None, lenient: false, max_content_bytes: DEFAULT_MAX_CONTENT_BYTES }
    }
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

    /// Reads at most `bytes` bytes of content.
    pub fn max_content_bytes(mut self, bytes: u64) -> Self {
        self.max_content_bytes = bytes;
        self
    }
}

/// Reads the trace in the file at `path`, of the device [`ReadOptions::device`] picks.
///
/// The format is chosen from the content, not the file name; gzip is recognised by its magic bytes. The
/// trace is named after the file name without its directory.
pub fn read_trace(path: impl AsRef<Path>, options: &ReadOptions) -> Result<Trace> {
    let mut file = TraceFile::open(path.as_ref())?;
    trace_of(file.content(options)?, options)
}

/// Reads the traces of every device in the file at `path` (of [`ReadOptions::device`] only, when it is set),
/// in device order.
pub fn read_traces(path: impl AsRef<Path>, options: &ReadOptions) -> Result<Vec<Trace>> {
    let mut file = TraceFile::open(path.as_ref())?;
    traces_of(file.content(options)?, options)
}

/// Reads a trace from `reader` (plain or gzipped), naming it `name` in the trace and in errors.
pub fn read_trace_from(name: &str, reader: impl Read, options: &ReadOptions) -> Result<Trace> {
    trace_of(Content::open(name, reader, options.max_content_bytes)?, options)
}

/// Reads a trace from the bytes of a trace file (plain or gzipped), naming it `name`.
pub fn parse_trace(name: &str, bytes: &[u8], options: &ReadOptions) -> Result<Trace> {
    trace_of(bytes_content(name, bytes, options)?, options)
}

/// Reads the traces of every device from the bytes of a trace file (of [`ReadOptions::device`] only, when
/// it is set), in device order.
pub fn parse_traces(name: &str, bytes: &[u8], options: &ReadOptions) -> Result<Vec<Trace>> {
    traces_of(bytes_content(name, bytes, options)?, options)
}

/// The trace of the device [`ReadOptions::device`] picks in `content`.
fn trace_of(mut content: Content<'_>, options: &ReadOptions) -> Result<Trace> {
    let name = content.name();
    match detect(&mut content)? {
        TraceFormat::PytorchSnapshot => {
            let snapshot = Snapshot::decode(&mut content)?;
            let device = match options.device {
                Some(device) => device,
                None => only_device_with_events(name, &snapshot)?,
            };
            snapshot.trace(device, options.lenient)
        }
        format => {
            check_csv_device(name, options.device)?;
            read_csv(&mut content, format, options.lenient)
        }
    }
}

/// The traces of every device in `content` (of [`ReadOptions::device`] only, when it is set).
fn traces_of(mut content: Content<'_>, options: &ReadOptions) -> Result<Vec<Trace>> {
    match detect(&mut content)? {
        TraceFormat::PytorchSnapshot => {
            let snapshot = Snapshot::decode(&mut content)?;
            match options.device {
                Some(device) => Ok(vec![snapshot.trace(device, options.lenient)?]),
                None => (0..snapshot.device_count()).map(|device| snapshot.trace(device, options.lenient)).collect(),
            }
        }
        format => {
            check_csv_device(content.name(), options.device)?;
            Ok(vec![read_csv(&mut content, format, options.lenient)?])
        }
    }
}

/// The content of the trace file whose bytes are `bytes`.
fn bytes_content<'a>(name: &'a str, bytes: &'a [u8], options: &ReadOptions) -> Result<Content<'a>> {
    let tail = match bytes {
        [.., a, b, c, d] => [*a, *b, *c, *d],
        _ => [0; 4],
    };
    Content::open_sized(name, bytes, options.max_content_bytes, bytes.len() as u64, bytes, tail)
}

/// A trace file, opened, with its first and last bytes (which tell the size of a gzipped file's content).
struct TraceFile {
    /// The file name without its directory.
    name: String,
    file: File,
    /// The file's size; 0 for what is no regular file.
    len: u64,
    head: [u8; 2],
    tail: [u8; 4],
}

impl TraceFile {
    fn open(path: &Path) -> Result<Self> {
        let io_error = |source| Error::Io { path: path.to_owned(), source };
        let mut file = File::open(path).map_err(io_error)?;
        let name =
            path.file_name().map_or_else(|| path.display().to_string(), |name| name.to_string_lossy().into_owned());
        let len = file.metadata().map_err(io_error)?;
        let len = if len.is_file() { len.len() } else { 0 };
        let (mut head, mut tail) = ([0; 2], [0; 4]);
        if len >= 6 {
            file.read_exact(&mut head).map_err(io_error)?;
            file.seek(SeekFrom::End(-4)).map_err(io_error)?;
            file.read_exact(&mut tail).map_err(io_error)?;
            file.rewind().map_err(io_error)?;
        }
        Ok(TraceFile { name, file, len, head, tail })
    }

    /// The file's content, read from its start.
    fn content(&mut self, options: &ReadOptions) -> Result<Content<'_>> {
        Content::open_sized(&self.name, &mut self.file, options.max_content_bytes, self.len, &self.head, self.tail)
    }
}

/// The format of `content`, told from its first bytes ([`TraceFormat::detect`] where they are the whole
/// content; where there is more, the header line of a CSV log or the first opcode of a pickle).
fn detect(content: &mut Content<'_>) -> Result<TraceFormat> {
    let name = content.name();
    let head = content.peek(SNIFF_BYTES)?;
    let detected = if head.len() < SNIFF_BYTES { TraceFormat::detect(head) } else { TraceFormat::detect_start(head) };
    detected.ok_or_else(|| Error::UnknownFormat { name: name.to_owned(), found: preview(head) })
}

/// The first bytes of `bytes`, escaped, for messages.
fn preview(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "nothing (the content is empty)".to_owned();
    }
    let shown: String = bytes.iter().take(24).flat_map(|&b| std::ascii::escape_default(b)).map(char::from).collect();
    format!("b\"{shown}\"{}", if bytes.len() > 24 { "..." } else { "" })
}

fn read_csv(content: &mut Content<'_>, format: TraceFormat, lenient: bool) -> Result<Trace> {
    match format {
        TraceFormat::RmmCsv => rmm_csv::read(content, lenient),
        _ => vrampool_csv::read(content, lenient),
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
