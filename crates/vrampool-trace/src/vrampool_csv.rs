//! The vrampool CSV event log: the format the pool's own event log is written in, and reading it back.
//!
//! The header is `time_us,action,addr,size,stream`; each line is one event: time in microseconds (decimal,
//! may be negative), the action (`alloc` or `free`, and the other [`EventKind`] names for the kinds beyond
//! allocations: `free_requested`, `segment_alloc`, `segment_free`, `segment_map`, `segment_unmap`, `oom`,
//! `alloc_failure`), the address (`0x`-prefixed hex, or decimal), the size in bytes (decimal) and the stream
//! label (decimal, or `0x`-prefixed hex). The writer writes addresses in hex and streams in decimal.
//!
//! A free of an address the log never allocated, a double free, and a free whose size differs from the
//! allocation are errors naming the line (skipped and counted by a lenient read).

use std::io::{self, BufWriter, Write};

use crate::content::Content;
use crate::csv_record::{self, CsvRecord, Parsed, decimal_i64, decimal_u64, hex_or_decimal_u64, show};
use crate::error::{Error, Result};
use crate::event::{Event, EventKind};
use crate::format::{TraceFormat, VRAMPOOL_CSV_HEADER};
use crate::trace::Trace;

/// Reads the vrampool CSV log that is the whole of `content`.
pub(crate) fn read(content: &mut Content<'_>, lenient: bool) -> Result<Trace> {
    csv_record::read_trace::<5>(content, lenient, TraceFormat::VrampoolCsv, parse)
}

/// The event of one line; an error says what is wrong and, for an allocation whose address was read, that
/// address.
fn parse(record: &CsvRecord<'_, 5>) -> Parsed {
    let [time, action, addr, size, stream] = record.fields;
    let kind = std::str::from_utf8(action)
        .ok()
        .and_then(EventKind::from_name)
        .ok_or_else(|| (format!("unknown action `{}`", show(action)), None))?;
    let addr = hex_or_decimal_u64(addr, "addr").map_err(|reason| (reason, None))?;
    let failed_alloc = |reason: String| (reason, (kind == EventKind::Alloc).then_some(addr));
    let time_us = decimal_i64(time, "time_us").map_err(failed_alloc)?;
    let size = decimal_u64(size, "size").map_err(failed_alloc)?;
    let stream = hex_or_decimal_u64(stream, "stream").map_err(failed_alloc)?;
    Ok(Event { time_us, kind, addr, size, stream })
}

/// Writes events as a vrampool CSV event log to any [`io::Write`] (buffered inside).
///
/// ```
/// use vrampool_trace::{Event, EventKind, ReadOptions, VrampoolCsvWriter, parse_trace};
///
/// let mut writer = VrampoolCsvWriter::new(Vec::new())?;
/// writer.write_event(&Event::new(0, EventKind::Alloc, 0x7f00_0000_0000, 4096, 0))?;
/// writer.write_event(&Event::new(12, EventKind::Free, 0x7f00_0000_0000, 4096, 0))?;
/// let bytes = writer.finish()?;
/// assert_eq!(
///     String::from_utf8(bytes.clone()).unwrap(),
///     "time_us,action,addr,size,stream\n0,alloc,0x7f0000000000,4096,0\n12,free,0x7f0000000000,4096,0\n"
/// );
/// let trace = parse_trace("log.csv", &bytes, &ReadOptions::default())?;
/// assert_eq!(trace.events.len(), 2);
/// # Ok::<(), vrampool_trace::Error>(())
/// ```
pub struct VrampoolCsvWriter<W: Write> {
    out: BufWriter<W>,
}

impl<W: Write> VrampoolCsvWriter<W> {
    /// A writer into `out`; writes the header line.
    pub fn new(out: W) -> Result<Self> {
        let mut out = BufWriter::new(out);
        writeln!(out, "{VRAMPOOL_CSV_HEADER}").map_err(Error::Write)?;
        Ok(VrampoolCsvWriter { out })
    }

    /// Writes one event as one line.
    pub fn write_event(&mut self, event: &Event) -> Result<()> {
        writeln!(self.out, "{},{},{:#x},{},{}", event.time_us, event.kind.name(), event.addr, event.size, event.stream)
            .map_err(Error::Write)
    }

    /// Writes every event of `trace`. Blocks the trace has live from the start are written first, as
    /// allocations at the time of its first event, so that the log reads back as a consistent trace.
    pub fn write_trace(&mut self, trace: &Trace) -> Result<()> {
        let start = trace.events.first().map_or(0, |event| event.time_us);
        for block in &trace.initial_live {
            self.write_event(&Event::new(start, EventKind::Alloc, block.addr, block.size, block.stream))?;
        }
        trace.events.iter().try_for_each(|event| self.write_event(event))
    }

    /// Flushes what is buffered to the underlying writer.
    pub fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(Error::Write)
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(self) -> Result<W> {
        self.out.into_inner().map_err(|error| Error::Write(io::Error::new(error.error().kind(), error.to_string())))
    }
}
