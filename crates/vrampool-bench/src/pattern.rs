//! The allocation patterns vrampool's speed is measured on, on the CPU and on the GPU, and the log-uniform
//! sizes the churn draws.

use serde::{Deserialize, Serialize};

use vrampool::{KIB, MIB, human_bytes};

use crate::churn_sequence::{CHURN_LIVE, CHURN_MAX, CHURN_MIN};

/// A sequence of allocations and frees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Allocate `size` bytes and free them at once, repeated; one operation is the pair.
    Pair {
        /// Bytes per allocation.
        size: u64,
    },
    /// `live` blocks stay allocated; each operation frees one at random and allocates one of a size drawn
    /// log-uniformly from `[min_size, max_size]` ([`log_uniform`]).
    Churn {
        /// Blocks live at all times.
        live: usize,
        /// The smallest size drawn.
        min_size: u64,
        /// The largest size drawn.
        max_size: u64,
    },
}

impl Pattern {
    /// The churn of DESIGN's measures: 1000 live blocks, 256 B to 8 MiB.
    pub const STANDARD_CHURN: Pattern = Pattern::Churn { live: CHURN_LIVE, min_size: CHURN_MIN, max_size: CHURN_MAX };

    /// The patterns `vrampool bench` reports: pairs at 4 KiB and 1 MiB, and the standard churn.
    pub const REPORTED: [Pattern; 3] =
        [Pattern::Pair { size: 4 * KIB }, Pattern::Pair { size: MIB }, Self::STANDARD_CHURN];

    /// The pattern's name in `vrampool bench` and the criterion benches: `pair-4k`, `pair-1m`, `churn` (any
    /// churn).
    pub fn name(&self) -> String {
        match *self {
            Pattern::Pair { size } if size % MIB == 0 => format!("pair-{}m", size / MIB),
            Pattern::Pair { size } if size % KIB == 0 => format!("pair-{}k", size / KIB),
            Pattern::Pair { size } => format!("pair-{size}"),
            Pattern::Churn { .. } => "churn".into(),
        }
    }

    /// A label for tables that shows the parameters: `pair 4 KiB`, `churn 1000 x 256 B..8 MiB`.
    pub fn label(&self) -> String {
        match *self {
            Pattern::Pair { size } => format!("pair {}", human_bytes(size)),
            Pattern::Churn { live, min_size, max_size } => {
                format!("churn {live} x {}..{}", human_bytes(min_size), human_bytes(max_size))
            }
        }
    }

    /// The largest request the pattern makes.
    pub fn max_size(&self) -> u64 {
        match *self {
            Pattern::Pair { size } => size,
            Pattern::Churn { max_size, .. } => max_size,
        }
    }

    /// The most blocks live at once.
    pub fn max_live(&self) -> usize {
        match *self {
            Pattern::Pair { .. } => 1,
            Pattern::Churn { live, .. } => live,
        }
    }
}

/// The size at `unit` (a uniform draw in `[0, 1)`) of a log-uniform distribution over `[min, max]`:
/// `exp(ln min + unit × (ln max − ln min))`, rounded down and kept in `[min, max]`. A `min` of 0 counts as
/// 1, and a `max` below `min` as `min`.
pub fn log_uniform(unit: f64, min: u64, max: u64) -> u64 {
    let (min, max) = (min.max(1), max.max(min).max(1));
    let (low, high) = ((min as f64).ln(), (max as f64).ln());
    ((low + (high - low) * unit).exp() as u64).clamp(min, max)
}

#[cfg(test)]
mod tests {
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    #[test]
    fn names() {
        let names: Vec<String> = Pattern::REPORTED.iter().map(|p| p.name()).collect();
        assert_eq!(names, ["pair-4k", "pair-1m", "churn"]);
    }

    #[test]
    fn labels_and_bounds() {
        assert_eq!(Pattern::Pair { size: 4 * KIB }.label(), "pair 4 KiB");
        assert_eq!(Pattern::STANDARD_CHURN.label(), "churn 1000 x 256 B..8 MiB");
        assert_eq!((Pattern::STANDARD_CHURN.max_size(), Pattern::STANDARD_CHURN.max_live()), (8 * MIB, 1000));
        assert_eq!(
            (Pattern::Pair { size: 64 * MIB }.max_size(), Pattern::Pair { size: 64 * MIB }.max_live()),
            (64 * MIB, 1)
        );
    }

    #[test]
    fn log_uniform_sizes_stay_in_range_and_spread_over_the_decades() {
        let mut rng = SmallRng::seed_from_u64(7);
        let sizes: Vec<u64> = (0..20_000).map(|_| log_uniform(rng.random(), 256, 8 * MIB)).collect();
        assert!(sizes.iter().all(|&s| (256..=8 * MIB).contains(&s)));
        // Log-uniform: about as many sizes below the geometric middle (~45 KiB) as above it.
        let below = sizes.iter().filter(|&&s| s < 46_341).count();
        assert!((9_000..11_000).contains(&below), "{below}");
        assert!(sizes.iter().any(|&s| s < 512) && sizes.iter().any(|&s| s > 4 * MIB));
    }

    #[test]
    fn degenerate_bounds_give_the_one_size_they_allow() {
        assert_eq!(log_uniform(0.5, 0, 0), 1);
        assert_eq!(log_uniform(0.5, 4096, 256), 4096);
        assert_eq!(log_uniform(0.0, 256, 8 * MIB), 256);
    }
}
