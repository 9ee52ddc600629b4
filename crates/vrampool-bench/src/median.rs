//! Timing: the median over batches of nanoseconds per operation.

use std::time::Instant;

/// Runs `batch` (which does `ops_per_batch` operations) `batches` times after one warm-up batch; returns
/// the median nanoseconds per operation.
pub fn median_ns_per_op(batches: usize, ops_per_batch: u64, mut batch: impl FnMut()) -> f64 {
    batch();
    let mut samples: Vec<f64> = (0..batches.max(1))
        .map(|_| {
            let start = Instant::now();
            batch();
            start.elapsed().as_nanos() as f64 / ops_per_batch as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}
