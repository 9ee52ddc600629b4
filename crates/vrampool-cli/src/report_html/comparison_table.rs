//! The comparison of one trace as HTML (the rows and columns of `vrampool compare`) and the advice.

use vrampool_replay::{Advice, ComparisonRow};

use super::escape::{config_html, escape};
use crate::comparison_columns::{COLUMNS, config_cell, figure_cells};

/// The table: each strategy's best configuration, then `others` (PyTorch's recorded figures where the trace
/// has them, its expandable segments as modelled); the recommended row is marked.
pub fn comparison_table(advice: &Advice, others: &[&ComparisonRow]) -> String {
    let rows: Vec<ComparisonRow> = advice
        .strategies
        .iter()
        .map(|s| ComparisonRow::from(&s.best))
        .chain(others.iter().map(|&row| row.clone()))
        .collect();
    let mut html = String::from("<table class=\"comparison\">\n<thead><tr>");
    for column in COLUMNS {
        html.push_str(&format!("<th>{}</th>", escape(column)));
    }
    html.push_str("</tr></thead>\n<tbody>\n");
    for row in &rows {
        let recommended = row.strategy == advice.recommended.name();
        let cells = figure_cells(row);
        html.push_str(&format!(
            "<tr class=\"s-{}{}\"><td class=\"name\"><span class=\"swatch\"></span>{}{}</td>",
            escape(&row.strategy),
            if recommended { " recommended" } else { "" },
            escape(&row.strategy),
            if recommended { " <span class=\"badge\">recommended</span>" } else { "" }
        ));
        for cell in cells {
            html.push_str(&format!("<td class=\"number\">{}</td>", escape(&cell)));
        }
        html.push_str(&format!("<td class=\"config\"><code>{}</code></td></tr>\n", config_html(&config_cell(row))));
    }
    html.push_str("</tbody>\n</table>\n");
    html
}

/// The advice: the strategy recommended, its config string and the reason, with how configurations were
/// ranked.
pub fn advice_box(advice: &Advice) -> String {
    format!(
        "<div class=\"advice s-{strategy}\">\n<div class=\"advice-head\">Recommended: <strong>{strategy}</strong></div>\n\
         <div class=\"advice-config\"><code>{config}</code></div>\n<p>{reason}.</p>\n{versus}\
         <p class=\"fine\">{ranking}.</p>\n</div>\n",
        strategy = escape(advice.recommended.name()),
        config = config_html(&advice.config),
        reason = escape(&advice.reason),
        versus = if advice.versus_default.is_empty() {
            String::new()
        } else {
            format!("<p class=\"versus\">Against the default: {}.</p>\n", escape(&advice.versus_default))
        },
        ranking = escape(&capitalized(&advice.objective.ranking())),
    )
}

/// `text` with its first letter a capital.
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| first.to_uppercase().chain(chars).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report_html::replay_fixture::replay_result;
    use vrampool::Strategy;
    use vrampool_replay::{Objective, ReplayResult, StrategyAdvice};

    fn result(strategy: Strategy, reserved: u64) -> ReplayResult {
        let mut result = replay_result(&format!("strategy={}", strategy.name()));
        result.peak_live_bytes = 548 << 20;
        result.peak_reserved_bytes = reserved;
        result.utilization = (548 << 20) as f64 / reserved as f64;
        result.fallbacks = 3;
        result.ooms = 0;
        result.backend_calls = 17;
        result.driver_time_us = 5400.0;
        result.replay_ns_per_event = 51.66;
        result
    }

    fn advice() -> Advice {
        Advice {
            trace: "t".into(),
            objective: Objective { driver_budget_us: 593_000.0 },
            strategies: vec![
                StrategyAdvice { best: result(Strategy::Fixed, 1685 << 20), tried: 4 },
                StrategyAdvice { best: result(Strategy::Dynamic, 566 << 20), tried: 4 },
                StrategyAdvice { best: result(Strategy::Hybrid, 576 << 20), tried: 4 },
            ],
            recommended: Strategy::Dynamic,
            config: "strategy=dynamic".into(),
            reason: "sizes vary <a lot> & more".into(),
            versus_default: "tuned, the dynamic pool reserves <less>".into(),
        }
    }

    #[test]
    fn rows_follow_compare_and_mark_the_recommendation() {
        let pytorch = ComparisonRow {
            trace: "t".into(),
            strategy: "pytorch".into(),
            config: None,
            events: 10,
            peak_live_bytes: 548 << 20,
            peak_reserved_bytes: 636 << 20,
            utilization: Some(0.862),
            fallbacks: None,
            ooms: Some(0),
            backend_calls: Some(38),
            driver_time_us: Some(2200.0),
            replay_ns_per_event: None,
        };
        let expandable = ComparisonRow { strategy: "expandable".into(), ..pytorch.clone() };
        let html = comparison_table(&advice(), &[&pytorch, &expandable]);
        assert_eq!(html.matches("<th>").count(), 10);
        assert_eq!(html.matches("<tr class=").count(), 5);
        assert!(html.contains("<code>(modelled)</code>"), "{html}");
        assert!(html.contains("<tr class=\"s-dynamic recommended\">"), "{html}");
        assert_eq!(html.matches("recommended").count(), 2, "the row's class and its badge: {html}");
        assert!(html.contains("<td class=\"number\">1,685 MiB</td>"), "{html}");
        assert!(html.contains("<td class=\"number\">0.968</td>"), "{html}");
        assert!(html.contains("<td class=\"number\">5.4</td><td class=\"number\">51.7</td>"), "{html}");
        assert!(html.contains("<td class=\"number\">0.862</td><td class=\"number\">-</td>"), "{html}");
        assert!(html.contains("<code>(recorded)</code>"), "{html}");
        assert!(html.contains("<code>strategy=dynamic</code>"), "{html}");
    }

    #[test]
    fn the_advice_says_what_why_and_how_it_ranked() {
        let html = advice_box(&advice());
        assert!(html.contains("Recommended: <strong>dynamic</strong>"), "{html}");
        assert!(html.contains("<code>strategy=dynamic</code>"), "{html}");
        assert!(html.contains("<p>sizes vary &lt;a lot&gt; &amp; more.</p>"), "{html}");
        assert!(html.contains("within 593.0 ms of driver time"), "{html}");
        let ranking = advice().objective.ranking();
        assert!(html.contains(&format!("<p class=\"fine\">C{}.</p>", escape(&ranking[1..]))), "{html}");
    }
}
