//! The request sizes of a trace: how many of each, how spread, and how many live at once.

use rustc_hash::FxHashMap;

use crate::replay_plan::{Operation, ReplayPlan};

/// Sizes rounded up to this, as the pools round them.
const UNIT: u64 = 256;

/// The distribution of a plan's request sizes (rounded up to 256 bytes).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SizeProfile {
    /// `(size, requests)` by increasing size.
    pub counts: Vec<(u64, u64)>,
    /// Requests in all.
    pub requests: u64,
}

/// `size` rounded up to [`UNIT`]; `u64::MAX` for a size within a unit of 2^64, which no pool serves.
fn span(size: u64) -> u64 {
    size.checked_next_multiple_of(UNIT).unwrap_or(u64::MAX)
}

impl SizeProfile {
    /// The profile of `plan`'s allocations.
    pub fn of(plan: &ReplayPlan) -> Self {
        let mut counts: FxHashMap<u64, u64> = FxHashMap::default();
        for size in plan.allocation_sizes() {
            *counts.entry(span(size)).or_default() += 1;
        }
        let mut counts: Vec<(u64, u64)> = counts.into_iter().collect();
        counts.sort_unstable();
        let requests = counts.iter().map(|&(_, n)| n).sum();
        SizeProfile { counts, requests }
    }

    /// The size below which `fraction` of the requests fall (0.5 is the median).
    pub fn percentile(&self, fraction: f64) -> u64 {
        let target = (self.requests as f64 * fraction).ceil().max(1.0) as u64;
        let mut seen = 0;
        for &(size, n) in &self.counts {
            seen += n;
            if seen >= target {
                return size;
            }
        }
        self.counts.last().map_or(0, |&(size, _)| size)
    }

    /// How many distinct sizes, the most frequent first, hold `fraction` of the requests.
    pub fn sizes_covering(&self, fraction: f64) -> usize {
        let mut by_count: Vec<u64> = self.counts.iter().map(|&(_, n)| n).collect();
        by_count.sort_unstable_by(|a, b| b.cmp(a));
        let target = self.requests as f64 * fraction;
        let mut seen = 0u64;
        for (i, n) in by_count.into_iter().enumerate() {
            seen += n;
            if seen as f64 >= target {
                return i + 1;
            }
        }
        self.counts.len()
    }

    /// The most requests of at most `block` bytes live at once in `plan`.
    pub fn peak_live_up_to(plan: &ReplayPlan, block: u64) -> u64 {
        let mut small = vec![false; plan.slots as usize];
        let (mut live, mut peak) = (0u64, 0u64);
        for op in plan.initial.iter().chain(&plan.operations) {
            match *op {
                Operation::Alloc { slot, size, .. } if span(size) <= block => {
                    small[slot as usize] = true;
                    live += 1;
                    peak = peak.max(live);
                }
                Operation::Free { slot } if small[slot as usize] => {
                    small[slot as usize] = false;
                    live -= 1;
                }
                _ => {}
            }
        }
        peak
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(ops: Vec<Operation>) -> ReplayPlan {
        let slots = ops.iter().filter(|op| matches!(op, Operation::Alloc { .. })).count() as u32;
        ReplayPlan { operations: ops, slots, ..ReplayPlan::default() }
    }

    #[test]
    fn percentiles_coverage_and_live_counts() {
        let alloc = |slot, size| Operation::Alloc { slot, size, stream: 0 };
        let p = plan(vec![
            alloc(0, 100),
            alloc(1, 256),
            alloc(2, 4096),
            Operation::Free { slot: 0 },
            alloc(3, 200),
            alloc(4, 1 << 20),
            Operation::Free { slot: 1 },
        ]);
        let profile = SizeProfile::of(&p);
        assert_eq!(profile.counts, vec![(256, 3), (4096, 1), (1 << 20, 1)]);
        assert_eq!(profile.percentile(0.5), 256);
        assert_eq!(profile.percentile(1.0), 1 << 20);
        assert_eq!(profile.sizes_covering(0.6), 1);
        assert_eq!(profile.sizes_covering(1.0), 3);
        assert_eq!(SizeProfile::peak_live_up_to(&p, 256), 2);
        assert_eq!(SizeProfile::peak_live_up_to(&p, 4096), 3);
        assert_eq!(SizeProfile::peak_live_up_to(&p, 1 << 20), 4);
    }

    #[test]
    fn sizes_at_the_top_of_the_range_round_to_the_top_not_to_zero() {
        assert_eq!((span(0), span(1), span(256), span(257)), (0, 256, 256, 512));
        assert_eq!(span(1 << 63), 1 << 63);
        assert_eq!(span(u64::MAX - 255), u64::MAX - 255);
        assert_eq!((span(u64::MAX - 254), span(u64::MAX)), (u64::MAX, u64::MAX));
        let alloc = |slot, size| Operation::Alloc { slot, size, stream: 0 };
        let p = plan(vec![alloc(0, u64::MAX), alloc(1, 1 << 63), alloc(2, 0)]);
        let profile = SizeProfile::of(&p);
        assert_eq!(profile.counts, vec![(0, 1), (1 << 63, 1), (u64::MAX, 1)]);
        assert_eq!(profile.percentile(1.0), u64::MAX);
        assert_eq!(SizeProfile::peak_live_up_to(&p, u64::MAX), 3);
        assert_eq!(SizeProfile::peak_live_up_to(&p, 256), 1);
    }
}
