//! The page: a header with the traces and their recommendations, one section per trace (advice and
//! comparison, memory over time, request sizes, how each strategy decides), the measures defined; one
//! inline stylesheet, no script, nothing fetched.

use vrampool::{PoolSpec, Strategy, human_bytes, short_bytes};
use vrampool_replay::{ComparisonRow, ReplayPlan, ReplayResult, SizeProfile};

use super::TraceReport;
use super::comparison_table::{advice_box, comparison_table};
use super::escape::{config_html, escape};
use super::event_axis::{EventAxis, EventTimes};
use super::memory_chart::{MemoryPanel, MemoryPoint};
use super::pytorch_timeline::PytorchTimeline;
use super::size_histogram::{SizeHistogram, SizeMarks};
use super::strategy_diagram::{DecisionFlow, grouped};

/// Points of PyTorch's memory drawn per trace (a replay's timeline has as many).
pub const PYTORCH_POINTS: usize = 1000;

/// The whole page, for replays on a simulated GPU `gpu_lag_ms` milliseconds behind the program (0: idle).
pub fn page(reports: &[TraceReport], gpu_lag_ms: f64) -> String {
    let mut html = String::from(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>vrampool report</title>\n<style>\n",
    );
    html.push_str(STYLE);
    html.push_str("</style>\n</head>\n<body>\n<main>\n<header>\n<h1>vrampool report</h1>\n");
    html.push_str(
        "<p class=\"lead\">Each trace replayed through vrampool's default, the adaptive pool, and its three tunable \
         strategies on the simulated device, each tunable strategy's parameters swept and its best configuration \
         kept, beside PyTorch's own caching allocator as it recorded the trace.</p>\n",
    );
    html.push_str(&if gpu_lag_ms > 0.0 {
        format!(
            "<p class=\"simulated-gpu\">The simulated GPU runs {gpu_lag_ms} ms behind the program: a page freed can \
             move only once that much trace time has passed since its free.</p>\n"
        )
    } else {
        "<p class=\"simulated-gpu\">The simulated GPU is idle: a page freed can move at once (<code>--gpu-lag-ms</code> \
         simulates one that runs behind the program, as a training GPU does).</p>\n"
            .to_string()
    });
    if reports.is_empty() {
        html.push_str("<p>No traces.</p>\n");
    } else {
        html.push_str("<ul class=\"contents\">\n");
        for (index, report) in reports.iter().enumerate() {
            let best = report.advice.recommended_result();
            html.push_str(&format!(
                "<li><a href=\"#trace-{index}\">{}</a>: <span class=\"s-{strategy}\"><span class=\"swatch\"></span>\
                 <strong>{strategy}</strong></span>, utilization {:.3} (PyTorch {})</li>\n",
                escape(&report.trace.name),
                best.utilization,
                pytorch_utilization(report),
                strategy = escape(best.strategy.name()),
            ));
        }
        html.push_str("</ul>\n");
    }
    html.push_str("</header>\n");
    for (index, report) in reports.iter().enumerate() {
        html.push_str(&trace_section(index, report));
    }
    html.push_str(DEFINITIONS);
    html.push_str("</main>\n</body>\n</html>\n");
    html
}

/// The section of one trace.
fn trace_section(index: usize, report: &TraceReport) -> String {
    let trace = &report.trace;
    let plan = &report.plan;
    let profile = SizeProfile::of(plan);
    let mut html = format!("<section class=\"trace\" id=\"trace-{index}\">\n<h2>{}</h2>\n", escape(&trace.name));
    let mut meta = format!(
        "{} events, {} requests over {:.1} s",
        grouped(trace.events.len() as u64),
        grouped(profile.requests),
        plan.duration_us as f64 / 1e6
    );
    if let Some(format) = trace.format {
        meta.push_str(&format!(", {format}, device {}", trace.device));
    }
    if !trace.initial_live.is_empty() {
        meta.push_str(&format!(
            "; {} blocks ({}) live from the start (freed in the trace, allocated before it)",
            grouped(trace.initial_live.len() as u64),
            human_bytes(trace.initial_live_bytes())
        ));
    }
    if trace.skipped > 0 {
        meta.push_str(&format!("; {} bad events skipped", grouped(trace.skipped as u64)));
    }
    html.push_str(&format!("<p class=\"meta\">{}.</p>\n", escape(&meta)));
    html.push_str(&advice_box(&report.advice));
    let others: Vec<&ComparisonRow> = report.pytorch.iter().chain([&report.expandable]).collect();
    html.push_str(&comparison_table(&report.advice, &others));

    html.push_str("<h3>Memory over time</h3>\n");
    let replay_step = plan.operations.len().div_ceil(PYTORCH_POINTS).max(1);
    let pytorch_step = trace.events.len().div_ceil(PYTORCH_POINTS).max(1);
    let pytorch_note = if report.pytorch.is_some() {
        format!("PyTorch's own figures from its recorded events every {} events", grouped(pytorch_step as u64))
    } else {
        "no figures of PyTorch's (the trace records no segment events)".to_string()
    };
    html.push_str(&format!(
        "<p class=\"note\">Live bytes (requested by blocks not yet freed) and reserved bytes (held from the device) \
         along the trace's events: a replay sampled every {} allocations and frees, {pytorch_note}. Each panel has its \
         own scale; the dashed lines are the run's peaks, as in the table (a peak shorter than the sampling step \
         shows only there).</p>\n",
        grouped(replay_step as u64),
    ));
    html.push_str("<div class=\"panels\">\n");
    for panel in memory_panels(report, plan) {
        html.push_str(&format!("<figure class=\"card\">\n{}</figure>\n", panel.render()));
    }
    html.push_str("</div>\n");

    html.push_str("<h3>Request sizes</h3>\n");
    let hybrid = best_of(report, Strategy::Hybrid);
    let hybrid_spec = hybrid.and_then(|r| PoolSpec::parse(&r.config).ok());
    let fixed_spec = best_of(report, Strategy::Fixed).and_then(|r| PoolSpec::parse(&r.config).ok());
    let classes = hybrid.map_or(&[][..], |r| r.classes.as_slice());
    let marks = SizeMarks {
        classes,
        max_waste: hybrid_spec.as_ref().map_or(0.0, |s| s.hybrid.max_rounding_waste),
        fixed_block: fixed_spec.as_ref().map(|s| s.fixed.block_size),
    };
    html.push_str(&format!(
        "<figure class=\"card wide\">\n{}</figure>\n",
        SizeHistogram::of(&profile.counts).render(&marks)
    ));
    if !classes.is_empty() {
        let list: Vec<String> =
            classes.iter().map(|c| format!("{} × {}", short_bytes(c.block_size), grouped(c.block_count))).collect();
        html.push_str(&format!(
            "<p class=\"note classes\">The hybrid's {} classes (block size × blocks): {}.</p>\n",
            classes.len(),
            escape(&list.join(", "))
        ));
    }

    html.push_str("<h3>How each strategy decides where a request goes</h3>\n<div class=\"diagrams\">\n");
    for strategy in &report.advice.strategies {
        let result = &strategy.best;
        let drawing = match DecisionFlow::of(result) {
            Ok(flow) => flow.render(),
            Err(err) => format!("<p class=\"error\">{}</p>\n", escape(&format!("config `{}`: {err}", result.config))),
        };
        html.push_str(&format!(
            "<figure class=\"card\">\n{drawing}<figcaption><code>{}</code></figcaption>\n</figure>\n",
            config_html(&result.config)
        ));
    }
    html.push_str("</div>\n</section>\n");
    html
}

/// The best replay of `strategy`, where it was swept.
fn best_of(report: &TraceReport, strategy: Strategy) -> Option<&ReplayResult> {
    report.advice.strategies.iter().map(|s| &s.best).find(|r| r.strategy == strategy)
}

/// One memory panel per strategy, then PyTorch's.
fn memory_panels(report: &TraceReport, plan: &ReplayPlan) -> Vec<MemoryPanel> {
    let events = report.trace.events.len() as u64;
    let times = EventTimes::of(&report.trace);
    let axis = EventAxis::new(&times, plan);
    let mut panels: Vec<MemoryPanel> = report
        .advice
        .strategies
        .iter()
        .map(|s| MemoryPanel {
            allocator: s.best.strategy.name().into(),
            note: format!("utilization {:.3}", s.best.utilization),
            points: s
                .best
                .timeline
                .iter()
                .map(|p| MemoryPoint {
                    event: axis.events_after(p.operation),
                    live_bytes: p.live_bytes,
                    reserved_bytes: p.reserved_bytes,
                })
                .collect(),
            peak_live_bytes: s.best.peak_live_bytes,
            peak_reserved_bytes: s.best.peak_reserved_bytes,
            events,
        })
        .collect();
    if report.pytorch.is_none() {
        return panels;
    }
    let pytorch = PytorchTimeline::of(&report.trace, PYTORCH_POINTS);
    panels.push(MemoryPanel {
        allocator: "pytorch".into(),
        note: format!("recorded, utilization {}", pytorch_utilization(report)),
        points: pytorch
            .samples
            .iter()
            .map(|s| MemoryPoint { event: s.event as f64, live_bytes: s.live_bytes, reserved_bytes: s.reserved_bytes })
            .collect(),
        peak_live_bytes: pytorch.peak_live_bytes,
        peak_reserved_bytes: pytorch.peak_reserved_bytes,
        events,
    });
    panels
}

/// PyTorch's recorded utilization on the trace of `report`, or `-` where it has none.
fn pytorch_utilization(report: &TraceReport) -> String {
    report.pytorch.as_ref().and_then(|p| p.utilization).map_or_else(|| "-".into(), |u| format!("{u:.3}"))
}

/// What the measures mean.
const DEFINITIONS: &str = "<footer>\n<h3>Measures</h3>\n<dl>\n\
<dt>live bytes</dt><dd>the sizes requested by allocations not yet freed (for PyTorch: freed at <code>free_completed</code>).</dd>\n\
<dt>reserved bytes</dt><dd>what the allocator holds from the device (virtual memory: mapped physical bytes; for PyTorch: its \
<code>segment_alloc</code> and <code>segment_map</code> minus <code>segment_free</code> and <code>segment_unmap</code>).</dd>\n\
<dt>utilization</dt><dd>peak live bytes over peak reserved bytes; 1.0 is the physical limit.</dd>\n\
<dt>fallbacks</dt><dd>requests a strategy served outside its main structure (the fixed pool's own segments, the hybrid's \
dynamic region).</dd>\n\
<dt>device calls, driver ms</dt><dd>calls to the device's memory functions, and their time by the simulated device's cost \
model (PyTorch's recorded segment calls priced by the same model).</dd>\n\
<dt>ns/event</dt><dd>the pool's own CPU time per trace event, measured in the replay.</dd>\n\
</dl>\n</footer>\n";

/// The stylesheet: one colour per allocator (`--c` under `.s-NAME`), used by the table, the charts and the
/// diagrams.
const STYLE: &str = r#":root { color-scheme: light; --ink: #1f2328; --muted: #59636e; --line: #d1d9e0; --bg: #f3f5f7;
  --fixed: #d9590b; --dynamic: #1b8a5a; --hybrid: #6a51a3; --adaptive: #b8336a; --pytorch: #2b6cb0; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink);
  font: 15px/1.5 system-ui, "Segoe UI", Roboto, "Helvetica Neue", "DejaVu Sans", Arial, sans-serif; }
main { max-width: 1360px; margin: 0 auto; padding: 24px 20px 48px; }
h1 { font-size: 28px; margin: 0 0 4px; }
h2 { font-size: 22px; margin: 0 0 2px; }
h3 { font-size: 16px; margin: 28px 0 6px; }
a { color: var(--pytorch); }
.lead { color: var(--muted); margin: 0 0 8px; max-width: 900px; }
.contents { margin: 0; padding-left: 20px; }
section.trace { background: #fff; border: 1px solid var(--line); border-radius: 10px; padding: 20px 24px 24px;
  margin: 24px 0; }
.meta, .note { color: var(--muted); margin: 0 0 12px; }
.note { font-size: 13.5px; }
.s-fixed { --c: var(--fixed); } .s-dynamic { --c: var(--dynamic); } .s-hybrid { --c: var(--hybrid); }
.s-adaptive { --c: var(--adaptive); }
.s-pytorch { --c: var(--pytorch); }
.s-expandable { --c: var(--pytorch); }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; background: var(--c); margin-right: 7px; }
code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 0.9em; background: #eef1f4;
  padding: 1px 5px; border-radius: 4px; }
.advice { border-left: 5px solid var(--c); background: #f6f8fa; padding: 10px 16px; border-radius: 6px; margin: 0 0 16px; }
.advice-head { font-size: 17px; }
.advice-head strong { color: var(--c); }
.advice p { margin: 6px 0 0; }
.advice .fine { color: var(--muted); font-size: 13px; }
table.comparison { border-collapse: collapse; width: 100%; font-size: 13.5px; font-variant-numeric: tabular-nums; }
table.comparison th, table.comparison td { padding: 6px 10px; border-bottom: 1px solid var(--line); white-space: nowrap; }
table.comparison th { text-align: right; color: var(--muted); font-weight: 600; border-bottom: 2px solid var(--line); }
table.comparison th:first-child, table.comparison th:last-child { text-align: left; }
table.comparison td.number { text-align: right; }
table.comparison td.name { font-weight: 600; }
table.comparison td.config { white-space: normal; min-width: 220px; }
table.comparison tr.recommended { background: #fff8e1; }
.badge { font-size: 11px; font-weight: 600; background: var(--c); color: #fff; border-radius: 9px; padding: 1px 7px;
  margin-left: 6px; }
.panels { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 12px 16px; }
.diagrams { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 12px; align-items: start; }
figure { margin: 0; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 8px; background: #fff; }
figcaption { font-size: 12.5px; color: var(--muted); margin-top: 4px; overflow-wrap: anywhere; }
.error { color: #b42318; }
footer dl { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; font-size: 14px; }
footer dt { font-weight: 600; } footer dd { margin: 0; color: var(--muted); }
svg { display: block; max-width: 100%; height: auto; margin: 0 auto; }
svg text { font-size: 12px; fill: var(--ink); }
svg .tick, svg .axis-title { fill: var(--muted); font-size: 11px; }
svg .panel-title { font-weight: 700; font-size: 14px; fill: var(--c); }
svg .panel-note { fill: var(--muted); }
svg .legend { fill: var(--muted); font-size: 11.5px; }
.grid { stroke: #e8ecf0; stroke-width: 1; }
.axis { stroke: #8c959f; stroke-width: 1; }
.live-area { fill: #d7dee6; stroke: #7b8794; stroke-width: 1; stroke-linejoin: round; }
.reserved { fill: none; stroke: var(--c); stroke-width: 1.6; stroke-linejoin: round; }
.peak { stroke-dasharray: 5 4; stroke-width: 1.2; }
.reserved-peak { stroke: var(--c); }
.live-peak { stroke: #3d444d; }
svg .peak-label { font-size: 11.5px; font-weight: 600; paint-order: stroke; stroke: #fff; stroke-width: 3px;
  stroke-linejoin: round; }
svg .reserved-label { fill: var(--c); }
svg .live-label { fill: #3d444d; }
.bar { fill: #8da2bb; }
.bar:hover { fill: #4f6b8f; }
.class-band { fill: var(--hybrid); opacity: 0.13; }
.class-mark { stroke: var(--hybrid); stroke-width: 1.2; }
.class-head { fill: var(--hybrid); }
.fixed-mark { stroke: var(--fixed); stroke-width: 1.6; stroke-dasharray: 6 3; }
svg .fixed-label { fill: var(--fixed); font-size: 11.5px; font-weight: 600; paint-order: stroke; stroke: #fff;
  stroke-width: 3px; }
.hover { fill: transparent; }
.start { fill: #eef1f4; stroke: #8c959f; }
.question { fill: #fff; stroke: var(--c); stroke-width: 1.5; }
.place { fill: color-mix(in srgb, var(--c) 12%, white); stroke: var(--c); }
.otherwise { fill: #f6f8fa; stroke: #8c959f; }
.note-box { fill: #fffbeb; stroke: #d4a72c; stroke-dasharray: 4 3; }
svg .note-text { fill: #3d444d; }
.flow { stroke: #59636e; stroke-width: 1.3; }
.arrow-head { fill: #59636e; }
svg .flow-label { font-size: 11px; fill: var(--muted); font-style: italic; }
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use vrampool_replay::{ReplayOptions, advise};
    use vrampool_trace::{Event, EventKind, Trace};

    /// A trace named with markup, of allocations of a few sizes on PyTorch's segments, and its report.
    fn report() -> TraceReport {
        let mut events = vec![Event::new(0, EventKind::SegmentAlloc, 0x10_0000, 64 << 20, 0)];
        for round in 0..40u64 {
            for (i, size) in [4096u64, 4096, 1 << 20, 3 << 20, 200 << 10].into_iter().enumerate() {
                let addr = 0x10_0000 + (i as u64) * (8 << 20);
                let t = (round * 20 + i as u64 * 2) as i64;
                events.push(Event::new(t, EventKind::Alloc, addr, size, 0));
                events.push(Event::new(t + 1, EventKind::Free, addr, size, 0));
            }
        }
        let trace = Trace { name: "a <b>&\"trace\"".into(), events, ..Trace::default() };
        let plan = ReplayPlan::from_trace(&trace).unwrap();
        let advice = advise(&plan, &Strategy::ALL, &ReplayOptions::default(), &|_, _| {}).expect("the sweep runs");
        let pytorch = ComparisonRow::pytorch(&trace);
        let expandable = ComparisonRow::expandable(&plan);
        TraceReport { trace, plan, advice, pytorch, expandable }
    }

    /// A trace without segment events (a CSV log) has no figures of PyTorch's: no PyTorch row, panel or
    /// utilization, and the page says so.
    #[test]
    fn a_trace_without_pytorch_figures_shows_none() {
        let mut report = report();
        report.trace.events.retain(|e| e.kind != EventKind::SegmentAlloc);
        report.pytorch = ComparisonRow::pytorch(&report.trace);
        assert!(report.pytorch.is_none());
        let html = page(std::slice::from_ref(&report), 0.0);
        assert_eq!(html.matches("<svg").count(), 9, "four memory panels, the histogram, four diagrams");
        assert!(html.contains("no figures of PyTorch's (the trace records no segment events)"));
        assert!(html.contains("(PyTorch -)"), "no utilization of PyTorch's in the contents");
        assert!(!html.contains("<tr class=\"s-pytorch"), "no PyTorch row in the table");
    }

    #[test]
    fn the_page_is_self_contained_and_has_every_part() {
        let report = report();
        let html = page(std::slice::from_ref(&report), 0.0);
        assert!(html.contains("The simulated GPU is idle"));
        assert!(page(std::slice::from_ref(&report), 5.0).contains("The simulated GPU runs 5 ms behind the program"));
        assert!(html.starts_with("<!doctype html>"), "{}", &html[..100]);
        assert!(!html.contains("http"), "no reference to anything on the network");
        assert!(!html.to_lowercase().contains("<script"), "no script");
        assert!(!html.contains("<img") && !html.contains("@import") && !html.contains("url("), "no external file");
        assert_eq!(html.matches("<svg").count(), 10, "five memory panels, the histogram, four diagrams");
        assert_eq!(html.matches("</svg>").count(), 10);
        assert!(html.contains("<h2>a &lt;b&gt;&amp;&quot;trace&quot;</h2>"), "the name is escaped");
        assert!(!html.contains("a <b>"), "no raw markup from the trace's name");
        assert!(html.contains("<table class=\"comparison\">"));
        assert!(html.contains(&format!("Recommended: <strong>{}</strong>", report.advice.recommended.name())));
        for allocator in ["fixed", "dynamic", "hybrid", "adaptive", "pytorch"] {
            assert!(html.contains(&format!("class=\"memory s-{allocator}\"")), "{allocator}'s memory panel");
        }
        for strategy in ["fixed", "dynamic", "hybrid", "adaptive"] {
            assert!(html.contains(&format!("class=\"diagram s-{strategy}\"")), "{strategy}'s diagram");
        }
        // PyTorch's panel reads its peaks from the trace: its one segment of 64 MiB.
        assert!(html.contains(">peak reserved 64 MiB</text>"), "PyTorch's reserved peak");
        let hybrid = best_of(&report, Strategy::Hybrid).expect("the hybrid was swept");
        assert_eq!(html.matches("class=\"class-mark\"").count(), hybrid.classes.len() + 1, "each class and the legend");
    }

    #[test]
    fn a_page_without_traces_says_so() {
        let html = page(&[], 0.0);
        assert!(html.contains("<p>No traces.</p>"));
        assert!(!html.contains("<svg"));
    }

    /// Sizes of 2^63 and 2^64 - 1 bytes, segments of 2^64 - 1 bytes, times from -2^63 to 2^63 - 1: the page
    /// renders with figures that did not wrap.
    #[test]
    fn a_trace_at_the_edges_of_its_numbers_renders() {
        let max = u64::MAX;
        let events = vec![
            Event::new(i64::MIN, EventKind::SegmentAlloc, 0, max, 0),
            Event::new(i64::MIN + 1, EventKind::Alloc, max, max, max),
            Event::new(-5, EventKind::Alloc, 0x1000, 1, 0),
            Event::new(0, EventKind::SegmentMap, 0x10, max, 0),
            Event::new(1, EventKind::Alloc, 0x2000, 1 << 63, 0),
            Event::new(2, EventKind::Free, 0x2000, 1 << 63, 0),
            Event::new(3, EventKind::SegmentUnmap, 0x10, max, 0),
            Event::new(4, EventKind::Oom, max, max, 0),
            Event::new(i64::MAX - 1, EventKind::Free, max, max, max),
            Event::new(i64::MAX, EventKind::SegmentFree, 0, max, 0),
            Event::new(i64::MAX, EventKind::Free, 0x1000, 1, 0),
        ];
        let trace = Trace { name: "edges".into(), events, ..Trace::default() };
        let plan = ReplayPlan::from_trace(&trace).unwrap();
        let advice = advise(&plan, &Strategy::ALL, &ReplayOptions::default(), &|_, _| {}).expect("the sweep runs");
        let pytorch = ComparisonRow::pytorch(&trace);
        let expandable = ComparisonRow::expandable(&plan);
        let html = page(&[TraceReport { trace, plan, advice, pytorch, expandable }], 0.0);
        assert!(html.contains("over 9223372036854.8 s"), "the trace's whole duration");
        assert!(!html.contains("NaN") && !html.contains("-9223372036854"), "no figure that did not compute or wrapped");
    }
}
