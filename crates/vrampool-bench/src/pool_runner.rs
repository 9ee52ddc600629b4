//! The patterns on a vrampool pool.

use vrampool::{Allocation, DEFAULT_ALIGNMENT, Pool, StreamId};

use crate::churn_sequence::ChurnSequence;
use crate::median::median_ns_per_op;
use crate::pattern::Pattern;

/// Allocates and frees `size` bytes `count` times.
#[inline]
pub fn run_pair<P: Pool + ?Sized>(pool: &P, size: u64, count: u64) {
    for _ in 0..count {
        let a = pool.allocate(size, DEFAULT_ALIGNMENT, StreamId::DEFAULT).expect("the pool holds the pair");
        pool.free(a.addr).expect("a live block frees");
    }
}

/// A churn in progress on a pool: the live blocks and where the sequence is.
#[derive(Debug)]
pub struct PoolChurn<'p, P: Pool + ?Sized> {
    pool: &'p P,
    live: Vec<Allocation>,
    sequence: ChurnSequence,
    step: usize,
}

impl<'p, P: Pool + ?Sized> PoolChurn<'p, P> {
    /// Allocates the initial live blocks.
    pub fn new(pool: &'p P, sequence: ChurnSequence) -> Self {
        let live = sequence
            .initial
            .iter()
            .map(|&size| pool.allocate(size, DEFAULT_ALIGNMENT, StreamId::DEFAULT).expect("the pool holds the churn"))
            .collect();
        PoolChurn { pool, live, sequence, step: 0 }
    }

    /// Runs `count` steps: each frees one live block and allocates one.
    #[inline]
    pub fn run(&mut self, count: u64) {
        let steps = self.sequence.steps.len();
        for _ in 0..count {
            let (victim, size) = self.sequence.steps[self.step];
            self.step = (self.step + 1) % steps;
            self.pool.free(self.live[victim].addr).expect("a live block frees");
            self.live[victim] =
                self.pool.allocate(size, DEFAULT_ALIGNMENT, StreamId::DEFAULT).expect("the pool holds the churn");
        }
    }
}

impl<P: Pool + ?Sized> Drop for PoolChurn<'_, P> {
    fn drop(&mut self) {
        for a in self.live.drain(..) {
            let _ = self.pool.free(a.addr);
        }
    }
}

/// The median nanoseconds per operation of `pattern` on `pool`, over `batches` batches of `ops` operations.
pub fn run_pool<P: Pool + ?Sized>(pool: &P, pattern: Pattern, batches: usize, ops: u64) -> f64 {
    match pattern {
        Pattern::Pair { size } => median_ns_per_op(batches, ops, || run_pair(pool, size, ops)),
        Pattern::Churn { live, min_size, max_size } => {
            let mut churn = PoolChurn::new(pool, ChurnSequence::of_pattern(live, min_size, max_size));
            median_ns_per_op(batches, ops, || churn.run(ops))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use vrampool::{DynamicConfig, DynamicPool, SimDevice};

    #[test]
    fn patterns_leave_the_pool_empty() {
        let pool = DynamicPool::new(Arc::new(SimDevice::default()), DynamicConfig::default()).unwrap();
        for pattern in Pattern::REPORTED {
            assert!(run_pool(&pool, pattern, 3, 100) > 0.0);
        }
        let stats = pool.stats();
        assert_eq!(stats.allocated_bytes.current, 0);
        assert!(stats.allocations >= 3 * 4 * 100 + 1000);
    }
}
