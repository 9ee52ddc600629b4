//! The columns of a comparison of strategies on one trace, shared by `vrampool compare`'s text table and
//! the HTML report.

use vrampool::whole_mib;
use vrampool_replay::ComparisonRow;

use crate::table::or_dash;

/// The columns of a comparison, as `vrampool compare` and the HTML report name them.
pub const COLUMNS: [&str; 10] = [
    "strategy",
    "peak live",
    "peak reserved",
    "utilization",
    "fallbacks",
    "ooms",
    "device calls",
    "driver ms",
    "ns/event",
    "config",
];

/// The figures of one row: every column between the strategy and the config.
pub fn figure_cells(row: &ComparisonRow) -> [String; 8] {
    [
        whole_mib(row.peak_live_bytes),
        whole_mib(row.peak_reserved_bytes),
        or_dash(row.utilization.map(|u| format!("{u:.3}"))),
        or_dash(row.fallbacks),
        or_dash(row.ooms),
        or_dash(row.backend_calls),
        or_dash(row.driver_time_us.map(|us| format!("{:.1}", us / 1000.0))),
        or_dash(row.replay_ns_per_event.map(|ns| format!("{ns:.1}"))),
    ]
}

/// The config column of one row: its config string, `(modelled)` for PyTorch's expandable segments as
/// modelled, or `(recorded)` for PyTorch's recorded figures.
pub fn config_cell(row: &ComparisonRow) -> String {
    match &row.config {
        Some(config) => config.clone(),
        None if row.strategy == "expandable" => "(modelled)".into(),
        None => "(recorded)".into(),
    }
}
