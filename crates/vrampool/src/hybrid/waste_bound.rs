//! How much larger than a request a class block may be.

/// The rounding waste a class block may add to the request it serves: a fraction of the request, or a
/// floor in bytes where that is larger (small requests: a few KiB of waste on each costs little memory,
/// and lets a few classes serve every small size).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct WasteBound {
    /// The most a block may exceed its request, as a fraction of the request.
    pub(crate) fraction: f64,
    /// Bytes a block may always exceed its request by.
    pub(crate) floor: u64,
}

impl WasteBound {
    /// Whether a block of `block` bytes may serve a request spanning `span` bytes: it holds it, and exceeds
    /// it by at most the fraction of `span` or the floor.
    #[inline]
    pub(crate) fn serves(self, block: u64, span: u64) -> bool {
        block >= span && (block - span <= self.floor || block as f64 <= span as f64 * (1.0 + self.fraction))
    }

    /// The smallest span a block of `block` bytes serves (a block serves every span from it up to `block`).
    pub(crate) fn smallest_served(self, block: u64) -> u64 {
        // `serves(block, span)` only turns from false to true as `span` grows towards `block`.
        let (mut lo, mut hi) = (0, block);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.serves(block, mid) { hi = mid } else { lo = mid + 1 }
        }
        lo
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fraction_or_the_floor_bounds_the_waste() {
        let fraction_only = WasteBound { fraction: 0.125, floor: 0 };
        assert!(fraction_only.serves(1152, 1024));
        assert!(!fraction_only.serves(1280, 1024));
        assert!(!fraction_only.serves(768, 1024), "a block never serves a larger request");
        let with_floor = WasteBound { fraction: 0.03, floor: 16 << 10 };
        assert!(with_floor.serves(16 << 10, 256), "16 KiB serves every request up to it");
        assert!(with_floor.serves(1 << 20, (1 << 20) - (16 << 10)), "the floor holds above small sizes too");
        assert!(!with_floor.serves(1 << 20, (1 << 20) - (32 << 10)), "3% of 992 KiB is under 32 KiB");
        assert!(with_floor.serves(64 << 20, 63 << 20), "1.6% is under 3%");
        assert!(!with_floor.serves(256, 512));
    }

    #[test]
    fn the_smallest_span_served_is_where_serving_starts() {
        for bound in [WasteBound { fraction: 0.125, floor: 0 }, WasteBound { fraction: 0.03, floor: 16 << 10 }] {
            for block in [256, 1024, 1152, 16 << 10, 20 << 10, 1 << 20, (4 << 20) + 768, 64 << 20] {
                let smallest = bound.smallest_served(block);
                assert!(bound.serves(block, smallest), "{bound:?} {block}");
                assert!(smallest == 0 || !bound.serves(block, smallest - 1), "{bound:?} {block}");
            }
        }
        assert_eq!(WasteBound { fraction: 0.125, floor: 0 }.smallest_served(1152), 1024);
        assert_eq!(WasteBound { fraction: 0.03, floor: 16 << 10 }.smallest_served(16 << 10), 0);
    }
}
