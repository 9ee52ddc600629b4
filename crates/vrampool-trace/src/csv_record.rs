//! The records of a CSV log: its lines after the header, split into fields, and the number syntaxes the
//! logs use.

use crate::block_ledger::UnknownFree;
use crate::error::{Error, Location};
use crate::event::Event;
use crate::format::TraceFormat;
use crate::trace::Trace;
use crate::trace_builder::TraceBuilder;

/// A data line of a CSV log, split at commas, with spaces around each field trimmed.
pub(crate) struct CsvRecord<'a, const N: usize> {
    /// The 1-based line number.
    pub(crate) line: u64,
    /// The fields.
    pub(crate) fields: [&'a [u8]; N],
}

/// What a CSV reader makes of one record: its event, or what is wrong with it and, for an allocation whose
/// address was read, that address.
pub(crate) type Parsed = Result<Event, (String, Option<u64>)>;

/// Reads the CSV log `content` of the trace named `name` in `format`, each record of `N` fields made an event
/// by `parse`; `line_bytes` is about the length of a line, to size the trace up front.
pub(crate) fn read_trace<const N: usize>(
    name: &str,
    content: &[u8],
    lenient: bool,
    format: TraceFormat,
    line_bytes: usize,
    mut parse: impl FnMut(&CsvRecord<'_, N>) -> Parsed,
) -> crate::error::Result<Trace> {
    let mut builder = TraceBuilder::new(name, lenient, UnknownFree::Reject, content.len() / line_bytes);
    for record in records::<N>(content) {
        let (line, parsed) = match record {
            Ok(record) => (record.line, parse(&record)),
            Err((line, reason)) => (line, Err((reason, None))),
        };
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

/// The data lines of a CSV log after its header line (blank lines are skipped): each a record of `N` fields,
/// or the line number and what is wrong with it.
pub(crate) fn records<const N: usize>(content: &[u8]) -> impl Iterator<Item = Result<CsvRecord<'_, N>, (u64, String)>> {
    let content = content.strip_prefix(b"\xef\xbb\xbf").unwrap_or(content);
    content
        .split(|&b| b == b'\n')
        .enumerate()
        .map(|(index, line)| (index as u64 + 1, line.trim_ascii()))
        .filter(|(_, line)| !line.is_empty())
        .skip(1)
        .map(|(line, text)| {
            let mut fields = [&b""[..]; N];
            let mut count = 0;
            for field in text.split(|&b| b == b',') {
                if count < N {
                    fields[count] = field.trim_ascii();
                }
                count += 1;
            }
            if count == N {
                Ok(CsvRecord { line, fields })
            } else {
                Err((
                    line,
                    format!("expected {N} comma-separated fields, found {count}: `{}`", String::from_utf8_lossy(text)),
                ))
            }
        })
}

/// The field as text, for messages.
pub(crate) fn show(field: &[u8]) -> String {
    String::from_utf8_lossy(field).into_owned()
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
