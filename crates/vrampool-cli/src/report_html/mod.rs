//! The HTML report: one self-contained page per run of `vrampool report` (inline SVG and CSS; no script,
//! font or image from anywhere else).
//!
//! The charts are SVG written here rather than drawn with `plotters`. `plotters`' SVG backend would do
//! (its text needs no system font and is escaped), but the page needs hand-written SVG for the decision
//! diagrams anyway,
//! and written directly every element carries a class of the page's one stylesheet (one colour per
//! allocator, shared by the table, the charts and the diagrams, and the page's font) instead of an inline
//! style, histogram bars and class marks carry hover titles, and the pictures scale with the page through
//! their `viewBox`.

mod byte_units;
mod comparison_table;
mod escape;
mod event_axis;
mod memory_chart;
mod page;
mod pytorch_timeline;
#[cfg(test)]
mod replay_fixture;
mod scale;
mod size_histogram;
mod strategy_diagram;
mod svg;

use vrampool_replay::{Advice, ComparisonRow, ReplayPlan};
use vrampool_trace::Trace;

/// What the report shows for one trace.
#[derive(Debug)]
pub struct TraceReport {
    /// The trace as read.
    pub trace: Trace,
    /// The trace's replay plan.
    pub plan: ReplayPlan,
    /// The sweep's results and recommendation.
    pub advice: Advice,
    /// PyTorch's recorded figures; `None` where the trace records none ([`ComparisonRow::pytorch`]).
    pub pytorch: Option<ComparisonRow>,
    /// PyTorch's expandable segments on the trace's requests, as modelled ([`ComparisonRow::expandable`]).
    pub expandable: ComparisonRow,
}

/// The report page of `reports`, one section each, replayed on a simulated GPU `gpu_lag_ms` milliseconds
/// behind the program (0: an idle GPU).
pub fn render(reports: &[TraceReport], gpu_lag_ms: f64) -> String {
    page::page(reports, gpu_lag_ms)
}
