//! How each strategy decides where a request goes, drawn from the configuration it was replayed with: a
//! chain of questions, each answered "yes" by a place to the right and "no" by the next question below.

use vrampool::{Cap, Fallback, PagePolicy, Paging, PoolSpec, PoolStats, Strategy, VirtualMemory, short_bytes};
use vrampool_replay::ReplayResult;

use super::svg::{Anchor, Svg};

/// A question and where a request goes when the answer is yes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The question.
    pub question: String,
    /// Where the request goes on "yes".
    pub yes: String,
}

/// One strategy's decisions, top to bottom.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecisionFlow {
    /// The strategy's name (also the colour's class).
    pub strategy: String,
    /// What arrives.
    pub start: String,
    /// The questions, in the order the pool asks them.
    pub decisions: Vec<Decision>,
    /// Where a request goes when every answer is no.
    pub otherwise: String,
    /// What happened on the trace, or what runs beside the decisions.
    pub notes: Vec<String>,
}

/// A count with thousands separators: `154,917`.
pub fn grouped(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A fraction as a percentage without needless decimals: `12.5%`, `80%`.
fn percent(fraction: f64) -> String {
    let text = format!("{:.1}", fraction * 100.0);
    format!("{}%", text.trim_end_matches(".0"))
}

fn cap(cap: Cap) -> String {
    match cap {
        Cap::Fraction(fraction) => format!("{} of the device", percent(fraction)),
        Cap::Bytes(bytes) => short_bytes(bytes),
    }
}

/// How a dynamic region grows, in words.
fn growth(spec: &PoolSpec) -> String {
    let dynamic = spec.dynamic();
    let how = match (dynamic.virtual_memory, dynamic.reclaim_idle) {
        (VirtualMemory::Auto, true) => "in place on virtual memory, moving idle chunks first",
        (VirtualMemory::Auto, false) => "in place on virtual memory",
        (VirtualMemory::Off, _) => "by a new segment",
    };
    format!("grow by ×{} {how}, then take the block", dynamic.growth_factor)
}

impl DecisionFlow {
    /// The flow of the strategy and configuration `result` was replayed with, with its counts on the trace.
    pub fn of(result: &ReplayResult) -> vrampool::Result<Self> {
        let spec = PoolSpec::parse(&result.config)?;
        let stats = &result.stats;
        let requests = stats.allocations + stats.ooms;
        let start = "a request of s bytes".to_string();
        let dynamic = spec.dynamic();
        Ok(match spec.strategy {
            Strategy::Fixed => {
                let fixed = &spec.fixed;
                let block = short_bytes(fixed.block_size);
                let reasons: Vec<String> =
                    stats.fallback_reasons.iter().map(|(why, n)| format!("{why} {}", grouped(*n))).collect();
                let mut notes = vec![format!(
                    "Here: {} of {} requests fell back{}.",
                    grouped(stats.fallbacks),
                    grouped(requests),
                    if reasons.is_empty() { String::new() } else { format!(" ({})", reasons.join(", ")) }
                )];
                if stats.ooms > 0 {
                    notes.push(format!("{} requests refused.", grouped(stats.ooms)));
                }
                DecisionFlow {
                    strategy: "fixed".into(),
                    start,
                    decisions: vec![Decision {
                        question: format!("s ≤ {block} and a block free?"),
                        yes: format!(
                            "a block from the slab of {} × {block} ({} reserved at start)",
                            grouped(fixed.block_count),
                            short_bytes(fixed.block_size.saturating_mul(fixed.block_count))
                        ),
                    }],
                    otherwise: match fixed.fallback {
                        Fallback::Backend => "fallback: a device segment of its own, freed on free".into(),
                        Fallback::Reject => "refused: the error names the block size that would fit".into(),
                    },
                    notes,
                }
            }
            Strategy::Dynamic if let Paging::Adaptive(pages) = dynamic.paging => {
                DecisionFlow::adaptive_pages("dynamic", start, pages, dynamic.cap, stats)
            }
            Strategy::Dynamic => DecisionFlow {
                strategy: "dynamic".into(),
                start,
                decisions: vec![
                    Decision {
                        question: "fits a free range of the region?".into(),
                        yes: "TLSF block: O(1) good fit; freed ranges merge".into(),
                    },
                    Decision {
                        question: format!("growing stays within the cap ({})?", cap(dynamic.cap)),
                        yes: growth(&spec),
                    },
                ],
                otherwise: "out of memory: the error says requested, live, reserved and cap".into(),
                notes: vec![format!(
                    "Starts at {}. Here: grew {} times, moved {} idle chunks and aliased {} still in use, {} out of \
                     memory.",
                    short_bytes(dynamic.initial_size),
                    grouped(stats.growths),
                    grouped(stats.chunks_moved),
                    grouped(stats.chunks_aliased),
                    grouped(stats.ooms)
                )],
            },
            Strategy::Hybrid => {
                let hybrid = &spec.hybrid;
                let classes = result.classes.len();
                let mut decisions = Vec::new();
                if hybrid.classes.is_empty() {
                    decisions.push(Decision {
                        question: format!("among the first {} requests (warm-up)?", grouped(hybrid.warmup_requests)),
                        yes: format!(
                            "dynamic region, size counted; then {classes} classes are learned to cover {} of requests",
                            percent(hybrid.coverage)
                        ),
                    });
                }
                let learned = if hybrid.classes.is_empty() {
                    format!("learned after {} requests", grouped(hybrid.warmup_requests))
                } else {
                    "given".into()
                };
                decisions.push(Decision {
                    question: format!(
                        "a class within {} of s (block ≤ s × {}), block free?",
                        percent(hybrid.max_rounding_waste),
                        1.0 + hybrid.max_rounding_waste
                    ),
                    yes: format!("class slab: {classes} classes {learned}"),
                });
                DecisionFlow {
                    strategy: "hybrid".into(),
                    start,
                    decisions,
                    otherwise: format!(
                        "dynamic region: TLSF, from {}, grows ×{} up to {}",
                        short_bytes(dynamic.initial_size),
                        dynamic.growth_factor,
                        cap(dynamic.cap)
                    ),
                    notes: vec![
                        format!(
                            "Watermark {}: when more than {} of class blocks are in use, the region grows ahead of \
                             need, off the allocation path ({} times here).",
                            hybrid.watermark,
                            percent(hybrid.watermark),
                            grouped(stats.pre_expansions)
                        ),
                        format!(
                            "Here: {} of {} requests went to the region, warm-up included.",
                            grouped(stats.fallbacks),
                            grouped(requests)
                        ),
                    ],
                }
            }
            Strategy::Adaptive => {
                DecisionFlow::adaptive_pages("adaptive", start, spec.adaptive.pages, spec.adaptive.cap, stats)
            }
        })
    }

    /// The flow of a range whose pages it sizes itself (`pages`), under `cap`: the adaptive pool's, and a
    /// dynamic pool's with `paging=adaptive`, named `strategy`; with its counts on the trace.
    fn adaptive_pages(strategy: &str, start: String, pages: PagePolicy, cap_of: Cap, stats: &PoolStats) -> Self {
        DecisionFlow {
            strategy: strategy.into(),
            start,
            decisions: vec![
                Decision {
                    question: "fits a free place of the range whose pages are all mapped?".into(),
                    yes: "placed there, best fit; blocks of every size share pages".into(),
                },
                Decision {
                    question: format!(
                        "idle pages to move there, within {} of the time in the driver ({} for a block lacking \
                         1/{} of the pool)?",
                        percent(pages.driver_per_mille as f64 / 1000.0),
                        percent(pages.driver_per_mille.saturating_mul(PagePolicy::OVERDRAFT_SHARES) as f64 / 1000.0),
                        PagePolicy::LARGE_NEED_PER_POOL
                    ),
                    yes: "placed where the fewest pages are missing; idle pages moved under it".into(),
                },
            ],
            otherwise: format!(
                "new pages of up to 1/{} of the pool mapped under it, up to {}",
                pages.pages_per_pool,
                cap(cap_of)
            ),
            notes: vec![format!(
                "Here: it mapped new pages {} times, moved {} idle chunks and aliased {} still in use, {} out of \
                 memory.",
                grouped(stats.growths),
                grouped(stats.chunks_moved),
                grouped(stats.chunks_aliased),
                grouped(stats.ooms)
            )],
        }
    }

    /// The flow as SVG.
    pub fn render(&self) -> String {
        let mut layout = Vec::new();
        let mut y = 34.0;
        let start = wrap(&self.start, chars(DECISION_WIDTH - 16.0));
        let start_height = box_height(start.len());
        layout.push((y, start_height));
        y += start_height + ARROW;
        let mut rows = Vec::new();
        for decision in &self.decisions {
            let question = wrap(&decision.question, chars(DECISION_WIDTH - 2.0 * POINT - 8.0));
            let yes = wrap(&decision.yes, chars(YES_WIDTH - 16.0));
            let height = box_height(question.len().max(yes.len()));
            rows.push((y, height, question, yes));
            y += height + ARROW;
        }
        let otherwise = wrap(&self.otherwise, chars(DECISION_WIDTH - 16.0));
        let otherwise_height = box_height(otherwise.len());
        let otherwise_y = y;
        y += otherwise_height + 14.0;
        let notes: Vec<Vec<String>> = self.notes.iter().map(|n| wrap(n, chars(WIDTH - 2.0 * MARGIN - 16.0))).collect();
        let notes_height = box_height(notes.iter().map(Vec::len).sum::<usize>());
        let height = if notes.is_empty() { y } else { y + notes_height + 8.0 };

        let label = format!("how the {} pool decides where a request goes", self.strategy);
        let mut svg = Svg::new(WIDTH, height, &format!("diagram s-{}", self.strategy), &label);
        svg.text((MARGIN, 18.0), Anchor::Start, "panel-title", &self.strategy);
        let center = MARGIN + DECISION_WIDTH / 2.0;
        svg.rounded_rect((MARGIN, layout[0].0), (DECISION_WIDTH, start_height), 14.0, "start", None);
        svg.text_lines((center, layout[0].0 + TEXT_TOP), LINE, Anchor::Middle, "node-text", &start);
        let mut from = layout[0].0 + start_height;
        for (i, (row_y, row_height, question, yes)) in rows.iter().enumerate() {
            down_arrow(&mut svg, center, from, *row_y, (i > 0).then_some("no"));
            let (top, bottom, mid) = (*row_y, row_y + row_height, row_y + row_height / 2.0);
            let (left, right) = (MARGIN, MARGIN + DECISION_WIDTH);
            svg.polygon(
                &[
                    (left, mid),
                    (left + POINT, top),
                    (right - POINT, top),
                    (right, mid),
                    (right - POINT, bottom),
                    (left + POINT, bottom),
                ],
                "question",
            );
            let text_y = mid - (question.len() as f64 - 1.0) * LINE / 2.0 + 4.0;
            svg.text_lines((center, text_y), LINE, Anchor::Middle, "node-text", question);
            let yes_x = WIDTH - MARGIN - YES_WIDTH;
            let yes_height = box_height(yes.len());
            let yes_top = mid - yes_height / 2.0;
            svg.line((right, mid), (yes_x - 6.0, mid), "flow");
            svg.polygon(&[(yes_x, mid), (yes_x - 7.0, mid - 4.0), (yes_x - 7.0, mid + 4.0)], "arrow-head");
            svg.text(((right + yes_x) / 2.0, mid - 5.0), Anchor::Middle, "flow-label", "yes");
            svg.rounded_rect((yes_x, yes_top), (YES_WIDTH, yes_height), 5.0, "place", None);
            svg.text_lines((yes_x + YES_WIDTH / 2.0, yes_top + TEXT_TOP), LINE, Anchor::Middle, "node-text", yes);
            from = bottom;
        }
        down_arrow(&mut svg, center, from, otherwise_y, (!rows.is_empty()).then_some("no"));
        svg.rounded_rect((MARGIN, otherwise_y), (DECISION_WIDTH, otherwise_height), 5.0, "otherwise", None);
        svg.text_lines((center, otherwise_y + TEXT_TOP), LINE, Anchor::Middle, "node-text", &otherwise);
        if !notes.is_empty() {
            let notes_y = otherwise_y + otherwise_height + 14.0;
            svg.rounded_rect((MARGIN, notes_y), (WIDTH - 2.0 * MARGIN, notes_height), 5.0, "note-box", None);
            let lines: Vec<String> = notes.into_iter().flatten().collect();
            svg.text_lines((MARGIN + 8.0, notes_y + TEXT_TOP), LINE, Anchor::Start, "note-text", &lines);
        }
        svg.finish()
    }
}

/// The diagram's size and parts.
const WIDTH: f64 = 420.0;
const MARGIN: f64 = 6.0;
const DECISION_WIDTH: f64 = 210.0;
const YES_WIDTH: f64 = 164.0;
const POINT: f64 = 12.0;
const LINE: f64 = 15.0;
const TEXT_TOP: f64 = 18.0;
const ARROW: f64 = 26.0;
/// The width allowed for an average character of the diagram's 12 px sans-serif text (DejaVu Sans, the
/// widest of the usual fonts, averages 5.7 px on this report's sentences; the rest is margin).
const CHAR_WIDTH: f64 = 6.4;

fn chars(width: f64) -> usize {
    (width / CHAR_WIDTH).floor().max(8.0) as usize
}

fn box_height(lines: usize) -> f64 {
    lines.max(1) as f64 * LINE + 10.0
}

fn down_arrow(svg: &mut Svg, x: f64, from: f64, to: f64, label: Option<&str>) {
    svg.line((x, from), (x, to - 6.0), "flow");
    svg.polygon(&[(x, to), (x - 4.0, to - 7.0), (x + 4.0, to - 7.0)], "arrow-head");
    if let Some(label) = label {
        svg.text((x + 6.0, (from + to) / 2.0 + 4.0), Anchor::Start, "flow-label", label);
    }
}

/// `text` cut into lines of at most `width` characters at spaces (a longer word keeps a line of its own).
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report_html::replay_fixture::replay_result;
    use vrampool::{ClassSpec, PoolStats};

    fn result(config: &str) -> ReplayResult {
        let mut result = replay_result(config);
        let mut stats =
            PoolStats { allocations: 1000, fallbacks: 42, growths: 7, pre_expansions: 3, ..PoolStats::default() };
        stats.fallback_reasons.insert("oversize".into(), 40);
        stats.fallback_reasons.insert("exhausted".into(), 2);
        result.stats = stats;
        result.classes = vec![
            ClassSpec { block_size: 4096, block_count: 100 },
            ClassSpec { block_size: 1 << 20, block_count: 10 },
            ClassSpec { block_size: 6 << 20, block_count: 3 },
        ];
        result
    }

    fn text_of(svg: &str) -> String {
        // The text of every <text> element, joined by spaces, so that wrapped sentences read whole.
        svg.split("<text")
            .skip(1)
            .filter_map(|t| t.split_once('>'))
            .filter_map(|(_, rest)| rest.split_once("</text>"))
            .map(|(t, _)| t)
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn words_wrap_at_spaces() {
        assert_eq!(wrap("a bb ccc dddd", 6), vec!["a bb", "ccc", "dddd"]);
        assert_eq!(wrap("averyveryverylongword x", 5), vec!["averyveryverylongword", "x"]);
        assert_eq!(wrap("", 5), vec![""]);
        assert_eq!(grouped(154_917), "154,917");
        assert_eq!(grouped(12), "12");
    }

    #[test]
    fn the_fixed_diagram_shows_its_block_size_and_count() {
        let flow = DecisionFlow::of(&result("strategy=fixed,block_size=6096KiB,block_count=196")).unwrap();
        let text = text_of(&flow.render());
        assert!(text.contains("s ≤ 6096 KiB and a block free?"), "{text}");
        assert!(text.contains("slab of 196 × 6096 KiB"), "{text}");
        assert!(text.contains("(1.1 GiB reserved at start)"), "{text}");
        assert!(text.contains("fallback: a device segment"), "{text}");
        assert!(text.contains("42 of 1,000 requests fell back (exhausted 2, oversize 40)"), "{text}");
        let reject = DecisionFlow::of(&result("strategy=fixed,block_size=2MiB,fallback=reject")).unwrap();
        assert!(text_of(&reject.render()).contains("s ≤ 2 MiB"));
        assert!(reject.otherwise.starts_with("refused"));
    }

    #[test]
    fn the_dynamic_diagram_shows_its_growth_and_cap() {
        let flow =
            DecisionFlow::of(&result("strategy=dynamic,growth_factor=1.05,cap=64GiB,initial_size=1GiB")).unwrap();
        let text = text_of(&flow.render());
        assert!(text.contains("grow by ×1.05 in place on virtual memory, moving idle chunks first"), "{text}");
        assert!(text.contains("within the cap (64 GiB)?"), "{text}");
        assert!(text.contains("Starts at 1 GiB. Here: grew 7 times"), "{text}");
        let off = DecisionFlow::of(&result("strategy=dynamic,growth_factor=1.3,virtual_memory=off,cap=0.5")).unwrap();
        let text = text_of(&off.render());
        assert!(text.contains("grow by ×1.3 by a new segment"), "{text}");
        assert!(text.contains("within the cap (50% of the device)?"), "{text}");
    }

    /// Pages the pool sizes itself are drawn as such, for the default and for a dynamic pool that has them,
    /// with the page keys given.
    #[test]
    fn adaptive_pages_are_drawn_with_their_page_keys() {
        let default = text_of(&DecisionFlow::of(&result("strategy=adaptive")).unwrap().render());
        assert!(
            default.contains("within 1% of the time in the driver (3% for a block lacking 1/32 of the pool)?"),
            "{default}"
        );
        assert!(default.contains("new pages of up to 1/256 of the pool"), "{default}");
        let dynamic = DecisionFlow::of(&result(
            "strategy=dynamic,initial_size=0,growth_factor=1.01,paging=adaptive,pages_per_pool=64,driver_per_mille=20",
        ))
        .unwrap();
        assert_eq!(dynamic.strategy, "dynamic");
        let text = text_of(&dynamic.render());
        assert!(text.contains("within 2% of the time in the driver (6% for"), "{text}");
        assert!(
            text.contains("new pages of up to 1/64 of the pool mapped under it, up to 80% of the device"),
            "{text}"
        );
        assert!(!text.contains("grow by"), "no growth factor: {text}");
    }

    #[test]
    fn the_hybrid_diagram_shows_waste_warmup_classes_and_watermark() {
        let flow = DecisionFlow::of(&result(
            "strategy=hybrid,initial_size=512MiB,growth_factor=1.2,cap=0.7,warmup=1024,coverage=0.8,max_waste=0.25,\
             watermark=0.7",
        ))
        .unwrap();
        let text = text_of(&flow.render());
        assert!(text.contains("among the first 1,024 requests (warm-up)?"), "{text}");
        assert!(text.contains("3 classes are learned to cover 80% of requests"), "{text}");
        assert!(text.contains("a class within 25% of s (block ≤ s × 1.25), block free?"), "{text}");
        assert!(text.contains("class slab: 3 classes learned after 1,024 requests"), "{text}");
        assert!(text.contains("Watermark 0.7: when more than 70% of class blocks are in use"), "{text}");
        assert!(text.contains("(3 times here)"), "{text}");
        assert!(text.contains("42 of 1,000 requests went to the region"), "{text}");
        assert!(text.contains("from 512 MiB, grows ×1.2 up to 70% of the device"), "{text}");
        let given = DecisionFlow::of(&result("strategy=hybrid,classes=4KiBx100+1MiBx10")).unwrap();
        assert_eq!(given.decisions.len(), 1, "no warm-up with given classes");
        assert!(given.decisions[0].yes.contains("classes given"), "{:?}", given.decisions);
    }

    #[test]
    fn a_config_that_does_not_parse_is_an_error() {
        let mut bad = result("strategy=fixed");
        bad.config = "strategy=magic".into();
        assert!(DecisionFlow::of(&bad).is_err());
    }
}
