//! The same patterns on offset-allocator, the O(1) reference the pools are measured beside.

use offset_allocator::{Allocation, Allocator};

use crate::churn_sequence::ChurnSequence;
use crate::median::median_ns_per_op;
use crate::pattern::Pattern;

/// offset-allocator works in 32-bit units; sizes are counted in 256-byte units, as the pools round them.
const UNIT: u64 = 256;

/// offset-allocator over 4 GiB of 256-byte units (room for the churn's live set many times over).
pub struct OffsetReference {
    allocator: Allocator,
}

impl std::fmt::Debug for OffsetReference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffsetReference").finish_non_exhaustive()
    }
}

impl Default for OffsetReference {
    fn default() -> Self {
        OffsetReference { allocator: Allocator::with_max_allocs(u32::MAX / 16, 1 << 16) }
    }
}

impl OffsetReference {
    fn units(size: u64) -> u32 {
        size.div_ceil(UNIT) as u32
    }

    /// The median nanoseconds per operation of `pattern`, over `batches` batches of `ops` operations.
    pub fn run(&mut self, pattern: Pattern, batches: usize, ops: u64) -> f64 {
        let allocator = &mut self.allocator;
        match pattern {
            Pattern::Pair { size } => {
                let units = Self::units(size);
                median_ns_per_op(batches, ops, || {
                    for _ in 0..ops {
                        let a = allocator.allocate(units).expect("room for a pair");
                        allocator.free(std::hint::black_box(a));
                    }
                })
            }
            Pattern::Churn { live, min_size, max_size } => {
                let sequence = ChurnSequence::of_pattern(live, min_size, max_size);
                let mut live: Vec<Allocation> =
                    sequence.initial.iter().map(|&s| allocator.allocate(Self::units(s)).expect("room")).collect();
                let mut step = 0;
                let ns = median_ns_per_op(batches, ops, || {
                    for _ in 0..ops {
                        let (victim, size) = sequence.steps[step];
                        step = (step + 1) % sequence.steps.len();
                        allocator.free(live[victim]);
                        live[victim] = allocator.allocate(Self::units(size)).expect("room for the churn");
                    }
                });
                for a in live {
                    allocator.free(a);
                }
                ns
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_runs_every_pattern() {
        let mut reference = OffsetReference::default();
        for pattern in Pattern::REPORTED {
            assert!(reference.run(pattern, 3, 100) > 0.0);
        }
        assert_eq!(reference.allocator.storage_report().total_free_space, u32::MAX / 16);
    }
}
