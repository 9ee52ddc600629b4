//! The latency bench's results: a markdown table for people and JSON for tools.

use serde::{Deserialize, Serialize};
use vrampool::PoolStats;

use crate::error::CudaError;
use vrampool_bench::Pattern;

/// Device work a vrampool pool did: counts from its stats, or their growth over the timed rounds of a cell.
/// A driver call costs microseconds, so a few per round show in the median where the pool's own work would
/// not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolWork {
    /// Calls to the backend's memory functions (allocate, free, reserve, map, unmap, move).
    pub backend_calls: u64,
    /// Times the pool asked the device for more memory.
    pub growths: u64,
    /// Physical chunks moved to where memory was needed (virtual memory).
    pub chunks_moved: u64,
    /// Chunks still in use mapped where they were needed as well.
    #[serde(default)]
    pub chunks_aliased: u64,
    /// Whole-device synchronizations.
    pub synchronizations: u64,
    /// Host waits for one event of the pool's stream.
    #[serde(default)]
    pub event_waits: u64,
}

impl PoolWork {
    /// The counts in a pool's stats.
    pub fn of(stats: &PoolStats) -> Self {
        PoolWork {
            backend_calls: stats.backend_calls,
            growths: stats.growths,
            chunks_moved: stats.chunks_moved,
            chunks_aliased: stats.chunks_aliased,
            synchronizations: stats.synchronizations,
            event_waits: stats.event_waits,
        }
    }

    /// What was done between `earlier` and `self`.
    pub fn since(self, earlier: PoolWork) -> PoolWork {
        PoolWork {
            backend_calls: self.backend_calls.saturating_sub(earlier.backend_calls),
            growths: self.growths.saturating_sub(earlier.growths),
            chunks_moved: self.chunks_moved.saturating_sub(earlier.chunks_moved),
            chunks_aliased: self.chunks_aliased.saturating_sub(earlier.chunks_aliased),
            synchronizations: self.synchronizations.saturating_sub(earlier.synchronizations),
            event_waits: self.event_waits.saturating_sub(earlier.event_waits),
        }
    }
}

/// One (method, pattern) cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencyCell {
    /// The method's name.
    pub method: String,
    /// The pattern's name.
    pub pattern: String,
    /// The pattern.
    pub pattern_spec: Pattern,
    /// Median nanoseconds per operation over the rounds (an operation is an allocate+free pair, or one
    /// churn step: a free and an allocation).
    pub median_ns: Option<f64>,
    /// The 10th percentile of the rounds.
    pub p10_ns: Option<f64>,
    /// The 90th percentile of the rounds.
    pub p90_ns: Option<f64>,
    /// Mean nanoseconds per operation over all timed operations: what rare slow operations (a driver call
    /// inside a pool) cost in all, which the median of rounds leaves out.
    #[serde(default)]
    pub mean_ns: Option<f64>,
    /// Rounds timed.
    pub rounds: usize,
    /// Operations per round.
    pub ops_per_round: usize,
    /// What a vrampool pool did on the device during the timed rounds (warm-up excluded); absent for the
    /// driver's own allocators.
    #[serde(default)]
    pub pool_work_timed: Option<PoolWork>,
    /// Why the cell has no figure.
    pub error: Option<String>,
}

/// The value at quantile `q` of sorted `values` (nearest rank).
fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((sorted.len() - 1) as f64 * q).round() as usize;
    Some(sorted[rank])
}

impl LatencyCell {
    /// A cell from per-round figures (nanoseconds per operation) and operations per round, or an error.
    pub(crate) fn new(method: &str, pattern: &Pattern, outcome: Result<(Vec<f64>, usize), CudaError>) -> Self {
        let mut cell = LatencyCell {
            method: method.to_string(),
            pattern: pattern.label(),
            pattern_spec: *pattern,
            median_ns: None,
            p10_ns: None,
            p90_ns: None,
            mean_ns: None,
            rounds: 0,
            ops_per_round: 0,
            pool_work_timed: None,
            error: None,
        };
        match outcome {
            Ok((mut per_op, ops_per_round)) => {
                per_op.sort_by(f64::total_cmp);
                cell.median_ns = quantile(&per_op, 0.5);
                cell.p10_ns = quantile(&per_op, 0.1);
                cell.p90_ns = quantile(&per_op, 0.9);
                // Every round runs the same number of operations: the mean of the rounds is the mean of all.
                cell.mean_ns = (!per_op.is_empty()).then(|| per_op.iter().sum::<f64>() / per_op.len() as f64);
                cell.rounds = per_op.len();
                cell.ops_per_round = ops_per_round;
            }
            Err(err) => cell.error = Some(err.to_string()),
        }
        cell
    }
}

/// Everything one bench run measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencyReport {
    /// The device's name.
    pub device: String,
    /// The device ordinal.
    pub ordinal: usize,
    /// Device memory in bytes.
    pub total_memory: u64,
    /// The virtual-memory granularity, where the device has virtual memory.
    pub granularity: Option<u64>,
    /// Measuring time per cell, in milliseconds.
    pub budget_per_cell_ms: u64,
    /// Whether the methods' rounds of each pattern took turns (else each cell was timed to the end before
    /// the next; reports written before the rounds took turns read as such).
    #[serde(default)]
    pub rounds_took_turns: bool,
    /// The methods, in row order.
    pub methods: Vec<String>,
    /// The patterns, in column order.
    pub patterns: Vec<String>,
    /// Every cell, row by row.
    pub cells: Vec<LatencyCell>,
}

/// Nanoseconds for people: `712 ns`, `86.4 µs`, `1.20 ms`.
fn human_ns(ns: f64) -> String {
    if ns < 10_000.0 {
        format!("{ns:.0} ns")
    } else if ns < 1_000_000.0 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{:.2} ms", ns / 1e6)
    }
}

impl LatencyReport {
    /// The cell of a method and a pattern.
    pub fn cell(&self, method: &str, pattern: &str) -> Option<&LatencyCell> {
        self.cells.iter().find(|c| c.method == method && c.pattern == pattern)
    }

    /// A markdown table: one row per method, one column per pattern, the median per operation in each
    /// cell; below it, why failed cells failed, and the device work pools did while timed with the mean per
    /// operation of those cells.
    pub fn to_markdown(&self) -> String {
        let mut out = format!(
            "Allocation latency on {} (device {}, {} bytes{}), median per operation, {} ms measured per cell, {}\n\n",
            self.device,
            self.ordinal,
            self.total_memory,
            self.granularity.map(|g| format!(", granularity {g}")).unwrap_or_default(),
            self.budget_per_cell_ms,
            if self.rounds_took_turns { "the methods' rounds taking turns" } else { "one cell at a time" },
        );
        out.push_str("| method |");
        for pattern in &self.patterns {
            out.push_str(&format!(" {pattern} |"));
        }
        out.push_str("\n| --- |");
        out.push_str(&" ---: |".repeat(self.patterns.len()));
        out.push('\n');
        let mut failures = Vec::new();
        for method in &self.methods {
            out.push_str(&format!("| {method} |"));
            for pattern in &self.patterns {
                let text = match self.cell(method, pattern) {
                    Some(LatencyCell { median_ns: Some(ns), .. }) => human_ns(*ns),
                    Some(LatencyCell { error: Some(err), .. }) => {
                        failures.push(format!("- {method}, {pattern}: {err}"));
                        "failed".into()
                    }
                    _ => "-".into(),
                };
                out.push_str(&format!(" {text} |"));
            }
            out.push('\n');
        }
        if !failures.is_empty() {
            out.push('\n');
            out.push_str(&failures.join("\n"));
            out.push('\n');
        }
        let busy: Vec<String> = self
            .cells
            .iter()
            .filter_map(|cell| {
                let work = cell.pool_work_timed.filter(|w| *w != PoolWork::default())?;
                let mean = cell.mean_ns.map(|ns| format!("; mean {} per operation", human_ns(ns))).unwrap_or_default();
                Some(format!(
                    "- {}, {}: {} backend calls, {} growths, {} chunks moved, {} aliased, {} synchronizations, {} \
                     event waits{mean}",
                    cell.method,
                    cell.pattern,
                    work.backend_calls,
                    work.growths,
                    work.chunks_moved,
                    work.chunks_aliased,
                    work.synchronizations,
                    work.event_waits
                ))
            })
            .collect();
        if !busy.is_empty() {
            out.push_str("\nDevice work of the pools during the timed rounds:\n\n");
            out.push_str(&busy.join("\n"));
            out.push('\n');
        }
        out
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|err| format!("{{\"error\": \"{err}\"}}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_take_the_median_of_rounds() {
        let pattern = Pattern::Pair { size: 4096 };
        let cell = LatencyCell::new("m", &pattern, Ok((vec![5.0, 1.0, 3.0, 100.0, 2.0], 10)));
        assert_eq!((cell.median_ns, cell.p10_ns, cell.p90_ns), (Some(3.0), Some(1.0), Some(100.0)));
        assert_eq!(cell.mean_ns, Some(22.2), "one slow round moves the mean, not the median");
        assert_eq!((cell.rounds, cell.ops_per_round), (5, 10));
        let failed = LatencyCell::new("m", &pattern, Err(CudaError::NoDevice { ordinal: 1, count: 1 }));
        assert!(failed.median_ns.is_none() && failed.error.unwrap().contains("no CUDA device 1"));
    }

    #[test]
    fn pool_work_over_the_timed_rounds_is_the_difference_of_two_readings() {
        let before = PoolWork {
            backend_calls: 10,
            growths: 2,
            chunks_moved: 5,
            chunks_aliased: 1,
            synchronizations: 1,
            event_waits: 2,
        };
        let after = PoolWork {
            backend_calls: 13,
            growths: 2,
            chunks_moved: 9,
            chunks_aliased: 7,
            synchronizations: 1,
            event_waits: 5,
        };
        assert_eq!(
            after.since(before),
            PoolWork {
                backend_calls: 3,
                growths: 0,
                chunks_moved: 4,
                chunks_aliased: 6,
                synchronizations: 0,
                event_waits: 3
            }
        );
        let stats = PoolStats {
            backend_calls: 7,
            growths: 1,
            chunks_moved: 2,
            chunks_aliased: 5,
            synchronizations: 3,
            event_waits: 4,
            ..Default::default()
        };
        assert_eq!(
            PoolWork::of(&stats),
            PoolWork {
                backend_calls: 7,
                growths: 1,
                chunks_moved: 2,
                chunks_aliased: 5,
                synchronizations: 3,
                event_waits: 4
            }
        );
    }

    #[test]
    fn the_table_names_the_cells_whose_pool_called_the_device_while_timed() {
        let pattern = Pattern::Pair { size: 4096 };
        let mut busy = LatencyCell::new("hybrid / CudaVirtual", &pattern, Ok((vec![90.0], 10)));
        busy.pool_work_timed = Some(PoolWork {
            backend_calls: 12,
            growths: 1,
            chunks_moved: 4,
            chunks_aliased: 3,
            synchronizations: 0,
            event_waits: 2,
        });
        let mut idle = LatencyCell::new("fixed / CudaDevice", &pattern, Ok((vec![25.0], 10)));
        idle.pool_work_timed = Some(PoolWork::default());
        let report = LatencyReport {
            device: "d".into(),
            ordinal: 0,
            total_memory: 1,
            granularity: None,
            budget_per_cell_ms: 1,
            rounds_took_turns: true,
            methods: vec![busy.method.clone(), idle.method.clone()],
            patterns: vec![busy.pattern.clone()],
            cells: vec![busy, idle],
        };
        let table = report.to_markdown();
        assert!(
            table.contains(
                "- hybrid / CudaVirtual, pair 4 KiB: 12 backend calls, 1 growths, 4 chunks moved, 3 aliased, 0 \
                 synchronizations, 2 event waits; mean 90 ns per operation"
            ),
            "{table}"
        );
        assert!(!table.contains("- fixed / CudaDevice"), "{table}");
    }

    #[test]
    fn nanoseconds_read_well() {
        assert_eq!(human_ns(712.4), "712 ns");
        assert_eq!(human_ns(86_400.0), "86.4 µs");
        assert_eq!(human_ns(1_200_000.0), "1.20 ms");
    }
}
