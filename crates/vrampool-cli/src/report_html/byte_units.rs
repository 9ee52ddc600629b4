//! Byte counts as an axis shows them: one binary unit per axis (B, KiB, MiB, GiB, TiB), and sizes written
//! short.

/// A binary unit of bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteUnit {
    /// Its name: `B`, `KiB`, `MiB`, `GiB`, `TiB`.
    pub name: &'static str,
    /// Bytes in one unit.
    pub bytes: u64,
}

const UNITS: [ByteUnit; 5] = [
    ByteUnit { name: "TiB", bytes: 1 << 40 },
    ByteUnit { name: "GiB", bytes: 1 << 30 },
    ByteUnit { name: "MiB", bytes: 1 << 20 },
    ByteUnit { name: "KiB", bytes: 1 << 10 },
    ByteUnit { name: "B", bytes: 1 },
];

impl ByteUnit {
    /// The unit for an axis reaching `max` bytes: the largest of which `max` holds at least two, so that
    /// tick labels stay whole or one-decimal numbers.
    pub fn for_axis(max: u64) -> ByteUnit {
        UNITS.into_iter().find(|unit| max >= 2 * unit.bytes).unwrap_or(UNITS[4])
    }

    /// `bytes` in this unit, as a tick label (no unit name): `1500`, `2.5`.
    pub fn tick_label(self, bytes: f64) -> String {
        let value = bytes / self.bytes as f64;
        let text = format!("{value:.2}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A size written short for a label: `256 B`, `4 KiB`, `1.5 MiB`, `6096 KiB`: the largest unit in which it
/// is a whole number below 10,000, or else the largest unit it reaches with at most one decimal.
pub fn short_size(bytes: u64) -> String {
    for unit in UNITS {
        if bytes >= unit.bytes && bytes % unit.bytes == 0 && bytes / unit.bytes < 10_000 {
            return format!("{} {}", bytes / unit.bytes, unit.name);
        }
    }
    let unit = UNITS.into_iter().find(|unit| bytes >= unit.bytes).unwrap_or(UNITS[4]);
    let text = format!("{:.1}", bytes as f64 / unit.bytes as f64);
    format!("{} {}", text.trim_end_matches(".0"), unit.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_units_leave_at_least_two_units() {
        assert_eq!(ByteUnit::for_axis(1685 << 20).name, "MiB");
        assert_eq!(ByteUnit::for_axis(2 << 30).name, "GiB");
        assert_eq!(ByteUnit::for_axis(95_000 << 20).name, "GiB");
        assert_eq!(ByteUnit::for_axis(1000).name, "B");
        assert_eq!(ByteUnit::for_axis(0).name, "B");
        let mib = ByteUnit::for_axis(1 << 30);
        assert_eq!(mib.tick_label(1500.0 * (1 << 20) as f64), "1500");
        assert_eq!(ByteUnit::for_axis(8 << 30).tick_label(2.5 * (1u64 << 30) as f64), "2.5");
        assert_eq!(mib.tick_label(0.0), "0");
    }

    #[test]
    fn short_sizes() {
        assert_eq!(short_size(256), "256 B");
        assert_eq!(short_size(4096), "4 KiB");
        assert_eq!(short_size(6096 << 10), "6096 KiB");
        assert_eq!(short_size(3 << 19), "1536 KiB");
        assert_eq!(short_size(104_973_056), "100.1 MiB");
        assert_eq!(short_size(0), "0 B");
    }
}
