//! Byte units, the alignment every pool honours, and the rounding and binning arithmetic on them.

/// One kibibyte.
pub const KIB: u64 = 1 << 10;
/// One mebibyte.
pub const MIB: u64 = 1 << 20;
/// One gibibyte.
pub const GIB: u64 = 1 << 30;

/// The smallest unit a pool hands out: every block starts at a multiple of it and spans a multiple of it.
/// 256 bytes, what `cudaMalloc` guarantees.
pub const MIN_BLOCK: u64 = 256;

/// The largest block a fixed pool or a size class has: 2^56 bytes less 256 (64 PiB), as a block's record
/// keeps the bytes requested of it in 56 bits.
pub const MAX_BLOCK_SIZE: u64 = (1 << 56) - MIN_BLOCK;

/// The alignment of an allocation when the caller names none: 256 bytes.
pub const DEFAULT_ALIGNMENT: u64 = 256;

/// The log-linear bin of a count of `units`: exact below `2^SUB_BITS`, then `2^SUB_BITS` equal bins per
/// power of two (each spans at most `1/2^SUB_BITS` of its sizes). Used for the range allocator's free lists
/// and the hybrid's class table.
///
/// Without a branch: on random sizes a branch between the exact and the log-linear bins goes either way in
/// no pattern a predictor learns (docs/BENCHMARKS.md). Counts below `2^SUB_BITS` take the shift of their
/// power of two `SUB_BITS`, so both ranges share one formula.
#[inline]
pub(crate) fn log_linear_bin<const SUB_BITS: u32>(units: u64) -> usize {
    let shift = (63 - (units | 1).leading_zeros()).max(SUB_BITS) - SUB_BITS;
    ((shift as usize) << SUB_BITS) + (units >> shift) as usize
}

/// The smallest count of units in bin `bin` of [`log_linear_bin`].
pub(crate) fn log_linear_bin_floor<const SUB_BITS: u32>(bin: usize) -> u64 {
    if bin < 1 << SUB_BITS {
        return bin as u64;
    }
    let log = (bin >> SUB_BITS) as u32 + SUB_BITS - 1;
    let sub = (bin & ((1 << SUB_BITS) - 1)) as u64;
    (1u64 << log) | (sub << (log - SUB_BITS))
}

/// `value` rounded up to a multiple of `align` (a power of two), or `None` on overflow.
pub(crate) fn align_up(value: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    Some(value.checked_add(align - 1)? & !(align - 1))
}

/// `value` rounded up to a multiple of `unit` (any positive number), or `None` on overflow.
pub(crate) fn round_up_to(value: u64, unit: u64) -> Option<u64> {
    debug_assert!(unit > 0);
    value.div_ceil(unit).checked_mul(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding() {
        assert_eq!(align_up(0, 256), Some(0));
        assert_eq!(align_up(1, 256), Some(256));
        assert_eq!(align_up(256, 256), Some(256));
        assert_eq!(align_up(u64::MAX, 256), None);
        assert_eq!(round_up_to(5, 3), Some(6));
        assert_eq!(round_up_to(u64::MAX, 2), None);
    }

    /// The bin with a branch between the exact and the log-linear bins: what the branch-free form computes.
    fn log_linear_bin_reference<const SUB_BITS: u32>(units: u64) -> usize {
        if units < 1 << SUB_BITS {
            return units as usize;
        }
        let log = 63 - units.leading_zeros();
        let sub = (units >> (log - SUB_BITS)) as usize & ((1 << SUB_BITS) - 1);
        ((log - SUB_BITS + 1) as usize) << SUB_BITS | sub
    }

    fn check_bins<const SUB_BITS: u32>() {
        let mut counts: Vec<u64> = (0..1 << 16).collect();
        for log in 16..64 {
            for offset in [0, 1, 2, 3] {
                counts.push((1u64 << log) + offset);
                counts.push((1u64 << log) - 1 - offset);
                counts.push((1u64 << log) | ((1u64 << log) - 1) >> 3);
            }
        }
        counts.push(u64::MAX);
        for units in counts {
            let bin = log_linear_bin::<SUB_BITS>(units);
            assert_eq!(bin, log_linear_bin_reference::<SUB_BITS>(units), "{units} units, {SUB_BITS} sub-bits");
            assert!(log_linear_bin_floor::<SUB_BITS>(bin) <= units, "{units} units below its bin's floor");
        }
    }

    #[test]
    fn log_linear_bins_match_the_branching_form() {
        check_bins::<4>();
        check_bins::<5>();
    }
}
