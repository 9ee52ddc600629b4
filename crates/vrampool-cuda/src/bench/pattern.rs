//! The allocation patterns the latency bench runs.

use rand::Rng;
use serde::{Deserialize, Serialize};
use vrampool::{KIB, MIB, MIN_BLOCK, human_bytes};

/// A sequence of allocations and frees.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Allocate `size` bytes and free them at once, repeated; one operation is the pair.
    Pair {
        /// Bytes per allocation.
        size: u64,
    },
    /// `live` blocks stay allocated; each operation frees one at random and allocates one of a size drawn
    /// log-uniformly from `[min_size, max_size]`.
    Churn {
        /// Blocks live at all times.
        live: usize,
        /// The smallest size drawn.
        min_size: u64,
        /// The largest size drawn.
        max_size: u64,
    },
}

/// The patterns of the design: pairs at 4 KiB, 1 MiB and 64 MiB, and churn over 1000 live blocks of
/// 256 B to 8 MiB.
pub fn default_patterns() -> Vec<Pattern> {
    vec![
        Pattern::Pair { size: 4 * KIB },
        Pattern::Pair { size: MIB },
        Pattern::Pair { size: 64 * MIB },
        Pattern::Churn { live: 1000, min_size: MIN_BLOCK, max_size: 8 * MIB },
    ]
}

impl Pattern {
    /// A short name for tables (`pair 4 KiB`, `churn 1000 x 256 B..8 MiB`).
    pub fn name(&self) -> String {
        match self {
            Pattern::Pair { size } => format!("pair {}", human_bytes(*size)),
            Pattern::Churn { live, min_size, max_size } => {
                format!("churn {live} x {}..{}", human_bytes(*min_size), human_bytes(*max_size))
            }
        }
    }

    /// The largest request the pattern makes.
    pub fn max_size(&self) -> u64 {
        match self {
            Pattern::Pair { size } => *size,
            Pattern::Churn { max_size, .. } => *max_size,
        }
    }

    /// The most blocks live at once.
    pub fn max_live(&self) -> usize {
        match self {
            Pattern::Pair { .. } => 1,
            Pattern::Churn { live, .. } => *live,
        }
    }

    /// A size drawn log-uniformly from `[min, max]`.
    pub(crate) fn log_uniform(rng: &mut impl Rng, min: u64, max: u64) -> u64 {
        let (low, high) = ((min.max(1)) as f64, (max.max(min).max(1)) as f64);
        let size = (low.ln() + rng.random::<f64>() * (high.ln() - low.ln())).exp();
        (size.round() as u64).clamp(min.max(1), max.max(min).max(1))
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    use super::*;

    #[test]
    fn log_uniform_sizes_stay_in_range_and_spread_over_the_decades() {
        let mut rng = SmallRng::seed_from_u64(7);
        let sizes: Vec<u64> = (0..20_000).map(|_| Pattern::log_uniform(&mut rng, 256, 8 * MIB)).collect();
        assert!(sizes.iter().all(|&s| (256..=8 * MIB).contains(&s)));
        // Log-uniform: about as many sizes below the geometric middle (~45 KiB) as above it.
        let below = sizes.iter().filter(|&&s| s < 46_341).count();
        assert!((9_000..11_000).contains(&below), "{below}");
        assert!(sizes.iter().any(|&s| s < 512) && sizes.iter().any(|&s| s > 4 * MIB));
    }

    #[test]
    fn names_and_bounds() {
        let patterns = default_patterns();
        assert_eq!(patterns[0].name(), "pair 4 KiB");
        assert_eq!(patterns[3].name(), "churn 1000 x 256 B..8 MiB");
        assert_eq!((patterns[3].max_size(), patterns[3].max_live()), (8 * MIB, 1000));
        assert_eq!((patterns[2].max_size(), patterns[2].max_live()), (64 * MIB, 1));
    }
}
