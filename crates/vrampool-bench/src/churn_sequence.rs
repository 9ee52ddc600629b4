//! The churn pattern's sizes and victims, drawn once so that drawing them is not timed.

use crate::pattern::log_uniform;

/// Live blocks in the churn pattern.
pub const CHURN_LIVE: usize = 1000;
/// The smallest churn size.
pub const CHURN_MIN: u64 = 256;
/// The largest churn size.
pub const CHURN_MAX: u64 = 8 << 20;
/// Steps drawn before the sequence repeats.
const STEPS: usize = 1 << 14;
/// The seed of the sequences of the churn patterns.
const PATTERN_SEED: u64 = 0x5eed;

/// A deterministic churn: the sizes of the first live blocks, then per step a victim and a new size.
#[derive(Clone, Debug)]
pub struct ChurnSequence {
    /// Sizes of the blocks allocated before the first step.
    pub initial: Vec<u64>,
    /// Per step: which live block to free, and the size to allocate in its place.
    pub steps: Vec<(usize, u64)>,
}

/// A small generator (splitmix64), so the sequence is the same everywhere.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn log_uniform(&mut self, min: u64, max: u64) -> u64 {
        log_uniform(self.unit(), min, max)
    }
}

impl ChurnSequence {
    /// The sequence for `live` blocks of log-uniform sizes in `[min, max]`, from `seed`.
    pub fn new(live: usize, min: u64, max: u64, seed: u64) -> Self {
        let mut rng = SplitMix(seed);
        let initial = (0..live).map(|_| rng.log_uniform(min, max)).collect();
        let steps = (0..STEPS).map(|_| ((rng.next() % live as u64) as usize, rng.log_uniform(min, max))).collect();
        ChurnSequence { initial, steps }
    }

    /// The sequence of a churn pattern ([`crate::Pattern::Churn`]) of `live` blocks of `[min, max]` bytes, the same
    /// on every run.
    pub fn of_pattern(live: usize, min: u64, max: u64) -> Self {
        Self::new(live, min, max, PATTERN_SEED)
    }

    /// The pattern of DESIGN's measures ([`crate::Pattern::STANDARD_CHURN`]): 1000 live blocks, 256 B to 8 MiB.
    pub fn standard() -> Self {
        Self::of_pattern(CHURN_LIVE, CHURN_MIN, CHURN_MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_log_uniform_in_range() {
        let s = ChurnSequence::standard();
        assert_eq!(s.initial.len(), 1000);
        assert!(s.steps.iter().all(|&(i, size)| i < 1000 && (CHURN_MIN..=CHURN_MAX).contains(&size)));
        // Log-uniform: about half the sizes fall below the geometric mean (45 KiB).
        let below = s.steps.iter().filter(|&&(_, size)| size < 46_341).count() as f64 / s.steps.len() as f64;
        assert!((below - 0.5).abs() < 0.03, "{below}");
        assert_eq!(ChurnSequence::standard().steps, s.steps, "deterministic");
    }
}
