//! Byte counts written out, in every form vrampool writes them, over one table of binary units, and read
//! back from config strings.
//!
//! - [`format_bytes`]: exact, for config strings (`256MiB`, `104973056`); [`parse_bytes`] reads it back;
//! - [`human_bytes`]: for messages and bench tables (`1.50 GiB`, `256 MiB`, `512 B`);
//! - [`short_bytes`]: for labels (`4 KiB`, `6096 KiB`, `100.1 MiB`);
//! - [`whole_mib`]: for the columns of comparison tables (`5,607 MiB`).

use crate::units::{GIB, KIB, MIB};

/// The binary units byte counts are written in, largest first: `(name, bytes)`.
pub const BYTE_UNITS: [(&str, u64); 5] = [("TiB", 1 << 40), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB), ("B", 1)];

/// The units above a byte.
fn multiples() -> &'static [(&'static str, u64)] {
    &BYTE_UNITS[..4]
}

/// Parses a byte count: a number with an optional unit (`512`, `4KiB`, `1.5GiB`, `2GB`).
pub fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" | "k" => KIB,
        "MiB" | "M" => MIB,
        "GiB" | "G" => GIB,
        "TiB" | "T" => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return None,
    };
    if number.contains('.') {
        let value: f64 = number.parse().ok()?;
        let bytes = value * scale as f64;
        (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then_some(bytes.round() as u64)
    } else {
        number.parse::<u64>().ok()?.checked_mul(scale)
    }
}

/// Writes a byte count exactly, as config strings do: in the largest binary unit that divides it, with no
/// space (`256MiB`), or as bytes (`1000`).
pub fn format_bytes(bytes: u64) -> String {
    for &(name, unit) in multiples() {
        if bytes >= unit && bytes % unit == 0 {
            return format!("{}{name}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// Writes a byte count for people: `1.50 GiB`, `256 MiB`, `512 B`: in the largest unit it reaches, whole
/// where the unit divides it, else with two decimals.
pub fn human_bytes(bytes: u64) -> String {
    for &(name, unit) in multiples() {
        if bytes >= unit {
            let value = bytes as f64 / unit as f64;
            return if bytes % unit == 0 { format!("{} {name}", bytes / unit) } else { format!("{value:.2} {name}") };
        }
    }
    format!("{bytes} B")
}

/// Writes a byte count short, for a label: `256 B`, `4 KiB`, `1.5 MiB`, `6096 KiB`: the largest unit in
/// which it is a whole number below 10,000, or else the largest unit it reaches with at most one decimal.
pub fn short_bytes(bytes: u64) -> String {
    for (name, unit) in BYTE_UNITS {
        if bytes >= unit && bytes % unit == 0 && bytes / unit < 10_000 {
            return format!("{} {name}", bytes / unit);
        }
    }
    let (name, unit) = BYTE_UNITS.into_iter().find(|&(_, unit)| bytes >= unit).unwrap_or(BYTE_UNITS[4]);
    let text = format!("{:.1}", bytes as f64 / unit as f64);
    format!("{} {name}", text.trim_end_matches(".0"))
}

/// Writes a byte count in whole MiB, rounded, with thousands separators: `5,607 MiB`.
pub fn whole_mib(bytes: u64) -> String {
    let value = (bytes as f64 / MIB as f64).round() as u64;
    let digits = value.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{out} MiB")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_bytes("512"), Some(512));
        assert_eq!(parse_bytes("4KiB"), Some(4096));
        assert_eq!(parse_bytes("1.5GiB"), Some(3 * GIB / 2));
        assert_eq!(parse_bytes("2GB"), Some(2_000_000_000));
        assert_eq!(parse_bytes("12 MiB"), Some(12 * MIB));
        assert_eq!(parse_bytes("lots"), None);
        assert_eq!(parse_bytes("4XiB"), None);
        assert_eq!(parse_bytes("99999999999TiB"), None);
        assert_eq!(format_bytes(256 * MIB), "256MiB");
        assert_eq!(format_bytes(1000), "1000");
    }

    #[test]
    fn human() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(256 * MIB), "256 MiB");
        assert_eq!(human_bytes(3 * GIB / 2), "1.50 GiB");
    }

    #[test]
    fn short_sizes() {
        assert_eq!(short_bytes(256), "256 B");
        assert_eq!(short_bytes(4096), "4 KiB");
        assert_eq!(short_bytes(6096 << 10), "6096 KiB");
        assert_eq!(short_bytes(3 << 19), "1536 KiB");
        assert_eq!(short_bytes(104_973_056), "100.1 MiB");
        assert_eq!(short_bytes(0), "0 B");
    }

    #[test]
    fn whole_mib_with_separators() {
        assert_eq!(whole_mib(5_879_357_852), "5,607 MiB");
        assert_eq!(whole_mib(512 * MIB), "512 MiB");
    }
}
