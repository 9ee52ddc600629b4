//! The records of a CSV log: its lines after the header, split into fields, and the number syntaxes the
//! logs use.

use crate::block_ledger::UnknownFree;
use crate::content::{Content, Line};
use crate::error::{Error, Location};
use crate::event::Event;
use crate::format::TraceFormat;
use crate::memory_budget;
use crate::trace::Trace;
use crate::trace_builder::TraceBuilder;

/// The longest line a CSV log may have, newline excluded: its lines hold five or six short fields. A longer
/// line is a bad record.
pub(crate) const MAX_LINE_BYTES: usize = 4096;

/// The most characters of a field or a line that an error message shows.
const EXCERPT_CHARS: usize = 48;

/// A data line of a CSV log, split at commas, with spaces around each field trimmed.
pub(crate) struct CsvRecord<'a, const N: usize> {
    /// The fields.
    pub(crate) fields: [&'a [u8]; N],
}

/// What a CSV reader makes of one record: its event, or what is wrong with it and, for an allocation whose
/// address was read, that address.
pub(crate) type Parsed = Result<Event, (String, Option<u64>)>;

/// Reads the CSV log that is the whole of `content` in `format`: after its header line (the first line that
/// is not blank), each record of `N` fields made an event by `parse`. Blank lines are skipped.
pub(crate) fn read_trace<const N: usize>(
    content: &mut Content<'_>,
    lenient: bool,
    format: TraceFormat,
    mut parse: impl FnMut(&CsvRecord<'_, N>) -> Parsed,
) -> crate::error::Result<Trace> {
    let name = content.name();
    let mut builder = TraceBuilder::new(name, lenient, UnknownFree::Reject, 0);
    if content.peek(3)? == b"\xef\xbb\xbf" {
        content.skip(3)?;
    }
    let mut header_seen = false;
    let mut line = 0u64;
    loop {
        if line % memory_budget::CHECK_EVERY == 0 {
            memory_budget::check(name, builder.held_bytes(), content.file_bytes())?;
        }
        line += 1;
        let text = match content.line(MAX_LINE_BYTES)? {
            Line::End => break,
            Line::Ended(text) | Line::Last(text) => text.trim_ascii(),
            Line::TooLong => {
                content.skip_line()?;
                if std::mem::replace(&mut header_seen, true) {
                    let reason =
                        format!("the line is longer than {MAX_LINE_BYTES} bytes, the most a CSV log's line may have");
                    builder
                        .reject(Error::BadRecord { name: name.to_owned(), at: Location::Line(line), reason }, None)?;
                }
                continue;
            }
        };
        if text.is_empty() || !std::mem::replace(&mut header_seen, true) {
            continue;
        }
        let parsed = record::<N>(text).map_err(|reason| (reason, None)).and_then(|record| parse(&record));
        let at = Location::Line(line);
        match parsed {
            Ok(event) => builder.push(at, event)?,
            Err((reason, failed_alloc_addr)) => {
                builder.reject(Error::BadRecord { name: name.to_owned(), at, reason }, failed_alloc_addr)?
            }
        }
    }
    Ok(builder.finish(format, 0))
}

/// The data line `text` (trimmed) as a record of `N` fields, or what is wrong with it.
fn record<const N: usize>(text: &[u8]) -> Result<CsvRecord<'_, N>, String> {
    let mut fields = [&b""[..]; N];
    let mut count = 0;
    for field in text.split(|&b| b == b',') {
        if count < N {
            fields[count] = field.trim_ascii();
        }
        count += 1;
    }
    if count == N {
        Ok(CsvRecord { fields })
    } else {
        Err(format!("expected {N} comma-separated fields, found {count}: `{}`", show(text)))
    }
}

/// The field (or line) as text, for messages: its first characters only, where it is long.
pub(crate) fn show(field: &[u8]) -> String {
    let text = String::from_utf8_lossy(field);
    match text.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.into_owned(),
    }
}

/// A decimal `u64`.
pub(crate) fn decimal_u64(field: &[u8], what: &str) -> Result<u64, String> {
    if field.is_empty() || !field.iter().all(u8::is_ascii_digit) {
        return Err(format!("{what} `{}` is not a decimal number", show(field)));
    }
    std::str::from_utf8(field)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| format!("{what} `{}` does not fit 64 bits", show(field)))
}

/// A decimal `i64`, with an optional sign.
pub(crate) fn decimal_i64(field: &[u8], what: &str) -> Result<i64, String> {
    let digits = field.strip_prefix(b"-").or_else(|| field.strip_prefix(b"+")).unwrap_or(field);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(format!("{what} `{}` is not a decimal number", show(field)));
    }
    std::str::from_utf8(field)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| format!("{what} `{}` does not fit 64 bits", show(field)))
}

/// A hexadecimal `u64`, with or without a `0x` prefix.
pub(crate) fn hex_u64(field: &[u8], what: &str) -> Result<u64, String> {
    let digits = strip_hex_prefix(field).unwrap_or(field);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(format!("{what} `{}` is not a hexadecimal number", show(field)));
    }
    std::str::from_utf8(digits)
        .ok()
        .and_then(|text| u64::from_str_radix(text, 16).ok())
        .ok_or_else(|| format!("{what} `{}` does not fit 64 bits", show(field)))
}

/// A `u64` written as `0x`-prefixed hexadecimal or as decimal.
pub(crate) fn hex_or_decimal_u64(field: &[u8], what: &str) -> Result<u64, String> {
    if strip_hex_prefix(field).is_some() { hex_u64(field, what) } else { decimal_u64(field, what) }
}

/// The digits after a `0x` or `0X` prefix, if there is one.
pub(crate) fn strip_hex_prefix(field: &[u8]) -> Option<&[u8]> {
    field.strip_prefix(b"0x").or_else(|| field.strip_prefix(b"0X"))
}
