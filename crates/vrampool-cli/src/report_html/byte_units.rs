//! Byte counts as an axis shows them: one binary unit per axis (B, KiB, MiB, GiB, TiB), and tick labels in
//! it. (Sizes written on their own: [`vrampool::short_bytes`].)

use vrampool::BYTE_UNITS;

/// A binary unit of bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteUnit {
    /// Its name: `B`, `KiB`, `MiB`, `GiB`, `TiB`.
    pub name: &'static str,
    /// Bytes in one unit.
    pub bytes: u64,
}

impl ByteUnit {
    /// The unit for an axis reaching `max` bytes: the largest of which `max` holds at least two, so that
    /// tick labels stay whole or one-decimal numbers.
    pub fn for_axis(max: u64) -> ByteUnit {
        let (name, bytes) =
            BYTE_UNITS.into_iter().find(|&(_, bytes)| max >= 2 * bytes).unwrap_or(BYTE_UNITS[BYTE_UNITS.len() - 1]);
        ByteUnit { name, bytes }
    }

    /// `bytes` in this unit, as a tick label (no unit name): `1500`, `2.5`.
    pub fn tick_label(self, bytes: f64) -> String {
        let value = bytes / self.bytes as f64;
        let text = format!("{value:.2}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
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
}
