//! The HTML report: one self-contained page (inline SVG, no network) per run of `vrampool report`.

use vrampool_replay::{Advice, ComparisonRow};
use vrampool_trace::Trace;

/// What the report shows for one trace.
#[derive(Debug)]
pub struct TraceReport {
    /// The trace as read.
    pub trace: Trace,
    /// The sweep's results and recommendation.
    pub advice: Advice,
    /// PyTorch's recorded figures.
    pub pytorch: ComparisonRow,
}

/// The report page.
pub fn render(reports: &[TraceReport]) -> String {
    let mut body = String::new();
    for report in reports {
        let pytorch = report.pytorch.utilization.map_or_else(|| "-".into(), |u| format!("{u:.3}"));
        body.push_str(&format!(
            "<h2>{}</h2>\n<p>{}</p>\n<p>PyTorch recorded utilization: {pytorch}</p>\n",
            escape(&report.trace.name),
            escape(&report.advice.reason)
        ));
    }
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>vrampool report</title></head><body>\n{body}</body></html>\n"
    )
}

/// Text made safe for HTML.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}
