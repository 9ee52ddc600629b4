//! Reading RMM `logging_resource_adaptor` logs.
//!
//! The header is `Thread,Time,Action,Pointer,Size,Stream`; each line is
//! `thread id,HH:MM:SS.ffffff,action,pointer,bytes,stream`. Action is `allocate`, `free` or
//! `allocate failure` (`deallocate` is read as `free`). RMM's releases write the pointer and the stream
//! either as `0x`-prefixed hex (`fmt::ptr`) or as bare hex (`%llx`): the pointer is always hex; the stream is
//! hex when it has the prefix or when the line's pointer is bare hex, decimal otherwise. A null pointer may
//! also read `(nil)`. Time is microseconds since midnight; a log that runs past midnight keeps counting
//! (a time more than 12 hours before the previous one starts the next day). A time written as seconds with
//! a fraction (`1634567890.123456`) is read as well.
//!
//! A free of a pointer the log never allocated, a double free, and a free whose size differs from the
//! allocation are errors naming the line (skipped and counted by a lenient read).

use crate::content::Content;
use crate::csv_record::{self, CsvRecord, Parsed, decimal_u64, hex_u64, show, strip_hex_prefix};
use crate::error::Result;
use crate::event::{Event, EventKind};
use crate::format::TraceFormat;
use crate::trace::Trace;

/// Microseconds in a day.
const DAY_US: i64 = 86_400_000_000;

/// Reads the RMM log that is the whole of `content`.
pub(crate) fn read(content: &mut Content<'_>, lenient: bool) -> Result<Trace> {
    let mut clock = Clock::default();
    csv_record::read_trace::<6>(content, lenient, TraceFormat::RmmCsv, |record| parse(record, &mut clock))
}

/// The event of one line; an error says what is wrong and, for an allocation whose pointer was read, that
/// pointer.
fn parse(record: &CsvRecord<'_, 6>, clock: &mut Clock) -> Parsed {
    let [_thread, time, action, pointer, size, stream] = record.fields;
    let kind = match action {
        b"allocate" => EventKind::Alloc,
        b"free" | b"deallocate" => EventKind::Free,
        b"allocate failure" => EventKind::AllocFailure,
        _ => return Err((format!("unknown action `{}`", show(action)), None)),
    };
    let addr = match pointer {
        b"(nil)" | b"nullptr" => 0,
        _ => hex_u64(pointer, "pointer").map_err(|reason| (reason, None))?,
    };
    let failed_alloc = |reason: String| (reason, (kind == EventKind::Alloc).then_some(addr));
    let size = decimal_u64(size, "size").map_err(failed_alloc)?;
    let bare_hex = strip_hex_prefix(pointer).is_none() && pointer.iter().all(u8::is_ascii_hexdigit);
    let stream = if bare_hex || strip_hex_prefix(stream).is_some() {
        hex_u64(stream, "stream")
    } else {
        decimal_u64(stream, "stream")
    }
    .map_err(failed_alloc)?;
    let time_us = clock.time_us(time).map_err(failed_alloc)?;
    Ok(Event { time_us, kind, addr, size, stream })
}

/// Turns times of day into a running count of microseconds.
#[derive(Default)]
struct Clock {
    /// The previous time of day, in microseconds.
    previous: Option<i64>,
    /// Days passed since the first line.
    days: i64,
}

impl Clock {
    /// The time of the field `field`, in microseconds since midnight of the log's first day.
    fn time_us(&mut self, field: &[u8]) -> Result<i64, String> {
        if !field.contains(&b':') {
            return seconds_us(field);
        }
        let of_day = time_of_day_us(field)?;
        if let Some(previous) = self.previous
            && of_day < previous - DAY_US / 2
        {
            self.days = self.days.saturating_add(1);
        }
        self.previous = Some(of_day);
        self.days
            .checked_mul(DAY_US)
            .and_then(|start| start.checked_add(of_day))
            .ok_or_else(|| format!("the log runs past {} days, more than 64-bit microseconds count", self.days))
    }
}

/// `HH:MM:SS.ffffff` in microseconds (the fraction may have 0 to 9 digits).
fn time_of_day_us(field: &[u8]) -> Result<i64, String> {
    let bad = || format!("time `{}` is not HH:MM:SS.ffffff", show(field));
    let mut parts = field.split(|&b| b == b':');
    let (Some(hours), Some(minutes), Some(seconds), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    let (whole, fraction) = match seconds.iter().position(|&b| b == b'.') {
        Some(dot) => (&seconds[..dot], &seconds[dot + 1..]),
        None => (seconds, &b""[..]),
    };
    let number = |digits: &[u8], max: i64| -> Result<i64, String> {
        if digits.is_empty() || digits.len() > 2 || !digits.iter().all(u8::is_ascii_digit) {
            return Err(bad());
        }
        let value = digits.iter().fold(0, |acc, &d| acc * 10 + i64::from(d - b'0'));
        if value > max { Err(bad()) } else { Ok(value) }
    };
    let (hours, minutes, whole) = (number(hours, 23)?, number(minutes, 59)?, number(whole, 60)?);
    let micros = fraction_us(fraction).ok_or_else(bad)?;
    Ok(((hours * 60 + minutes) * 60 + whole) * 1_000_000 + micros)
}

/// Seconds with an optional fraction (`1634567890.123456`) in microseconds.
fn seconds_us(field: &[u8]) -> Result<i64, String> {
    let bad = || format!("time `{}` is neither HH:MM:SS.ffffff nor seconds", show(field));
    let (whole, fraction) = match field.iter().position(|&b| b == b'.') {
        Some(dot) => (&field[..dot], &field[dot + 1..]),
        None => (field, &b""[..]),
    };
    let whole = decimal_u64(whole, "time").map_err(|_| bad())?;
    let micros = fraction_us(fraction).ok_or_else(bad)?;
    i64::try_from(whole)
        .ok()
        .and_then(|s| s.checked_mul(1_000_000))
        .and_then(|us| us.checked_add(micros))
        .ok_or_else(bad)
}

/// The microseconds of a decimal fraction of a second (digits after the point; up to 9, the rest of 6 is
/// truncated).
fn fraction_us(fraction: &[u8]) -> Option<i64> {
    if fraction.len() > 9 || !fraction.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut micros = 0;
    for position in 0..6 {
        micros = micros * 10 + fraction.get(position).map_or(0, |&d| i64::from(d - b'0'));
    }
    Some(micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_of_day_become_microseconds() {
        assert_eq!(time_of_day_us(b"00:00:00.000001"), Ok(1));
        assert_eq!(time_of_day_us(b"01:02:03.5"), Ok(3_723_500_000));
        assert_eq!(time_of_day_us(b"23:59:59.999999"), Ok(DAY_US - 1));
        assert!(time_of_day_us(b"24:00:00.0").is_err());
        assert!(time_of_day_us(b"12:00").is_err());
        assert!(time_of_day_us(b"12:00:0x.0").is_err());
        assert_eq!(seconds_us(b"1634567890.123456"), Ok(1_634_567_890_123_456));
    }

    #[test]
    fn the_clock_counts_past_midnight() {
        let mut clock = Clock::default();
        assert_eq!(clock.time_us(b"23:59:59.000000"), Ok(DAY_US - 1_000_000));
        // A slightly earlier time (threads logging out of order) stays on the same day.
        assert_eq!(clock.time_us(b"23:59:58.000000"), Ok(DAY_US - 2_000_000));
        assert_eq!(clock.time_us(b"00:00:01.000000"), Ok(DAY_US + 1_000_000));
    }

    #[test]
    fn the_clock_refuses_to_count_past_64_bit_microseconds() {
        let mut clock = Clock { previous: Some(DAY_US - 1), days: i64::MAX / DAY_US - 1 };
        assert!(clock.time_us(b"23:59:59.000000").is_ok());
        assert!(clock.time_us(b"00:00:01.000000").is_ok());
        let error = clock.time_us(b"23:59:59.000000").unwrap_err();
        assert!(error.contains("more than 64-bit microseconds count"), "{error}");
    }
}
