//! The histogram of a trace's request sizes on a log scale, with the hybrid pool's size classes (and the
//! requests each can hold) and the fixed pool's block size marked on it.

use vrampool::{ClassSpec, human_bytes, short_bytes};

use super::scale::LogScale;
use super::svg::{Anchor, Svg};

/// Bins per doubling of the size.
pub const BINS_PER_OCTAVE: u32 = 4;

/// Requests whose sizes fall in one bin: `lower <= size < upper` (sizes rounded up to 256 bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SizeBin {
    /// The bin's number: sizes from 2^(index / 4) up to 2^((index + 1) / 4).
    pub index: u32,
    /// Requests in it.
    pub requests: u64,
}

impl SizeBin {
    /// The smallest size in the bin.
    pub fn lower(&self) -> f64 {
        bin_edge(self.index)
    }

    /// The size where the next bin starts.
    pub fn upper(&self) -> f64 {
        bin_edge(self.index + 1)
    }
}

fn bin_edge(index: u32) -> f64 {
    2f64.powf(f64::from(index) / f64::from(BINS_PER_OCTAVE))
}

/// The bin a size of `bytes` (at least 1) falls in.
pub fn bin_of(bytes: u64) -> u32 {
    let mut index = ((bytes.max(1) as f64).log2() * f64::from(BINS_PER_OCTAVE)).floor() as u32;
    // Floating point may put a size a hair across an edge: settle it by the edges themselves.
    while index > 0 && bin_edge(index) > bytes as f64 {
        index -= 1;
    }
    while bin_edge(index + 1) <= bytes as f64 {
        index += 1;
    }
    index
}

/// A trace's requests counted by size bins, the empty bins between included.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SizeHistogram {
    /// The bins, from the smallest size's to the largest's.
    pub bins: Vec<SizeBin>,
    /// Requests in all.
    pub requests: u64,
}

/// What the histogram marks besides the bins.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SizeMarks<'a> {
    /// The hybrid pool's classes.
    pub classes: &'a [ClassSpec],
    /// The most a hybrid class's block may exceed a request it holds, as a fraction.
    pub max_waste: f64,
    /// The fixed pool's block size.
    pub fixed_block: Option<u64>,
}

const WIDTH: f64 = 1280.0;
const HEIGHT: f64 = 270.0;
const LEFT: f64 = 58.0;
const RIGHT: f64 = WIDTH - 16.0;
const TOP: f64 = 56.0;
const BOTTOM: f64 = HEIGHT - 36.0;

/// A request count written short for the log axis: `1`, `10`, `1k`, `100k`, `1M`.
fn count_label(count: f64) -> String {
    match count {
        c if c >= 1e6 => format!("{}M", c / 1e6),
        c if c >= 1e3 => format!("{}k", c / 1e3),
        c => format!("{c}"),
    }
}

impl SizeHistogram {
    /// The histogram of `(size, requests)` pairs (a [`vrampool_replay::SizeProfile`]'s counts); sizes of 0
    /// are left out.
    pub fn of(counts: &[(u64, u64)]) -> Self {
        let mut by_bin: Vec<(u32, u64)> =
            counts.iter().filter(|&&(size, n)| size > 0 && n > 0).map(|&(size, n)| (bin_of(size), n)).collect();
        by_bin.sort_unstable();
        let (Some(&(first, _)), Some(&(last, _))) = (by_bin.first(), by_bin.last()) else {
            return SizeHistogram::default();
        };
        let mut bins: Vec<SizeBin> = (first..=last).map(|index| SizeBin { index, requests: 0 }).collect();
        for (index, n) in by_bin {
            bins[(index - first) as usize].requests += n;
        }
        let requests = bins.iter().map(|b| b.requests).sum();
        SizeHistogram { bins, requests }
    }

    /// The chart as SVG.
    pub fn render(&self, marks: &SizeMarks<'_>) -> String {
        let label = format!(
            "request sizes: {} requests in {} bins per doubling, {} hybrid classes marked",
            self.requests,
            BINS_PER_OCTAVE,
            marks.classes.len()
        );
        let mut svg = Svg::new(WIDTH, HEIGHT, "histogram", &label);
        self.legend(&mut svg, marks);
        let marked = marks.classes.iter().map(|c| c.block_size).chain(marks.fixed_block);
        let sizes_lo = self.bins.first().map(|b| b.index).into_iter().chain(marked.clone().map(bin_of));
        let sizes_hi = self.bins.last().map(|b| b.index).into_iter().chain(marked.map(bin_of));
        let (Some(lo), Some(hi)) = (sizes_lo.min(), sizes_hi.max()) else {
            svg.text(((LEFT + RIGHT) / 2.0, (TOP + BOTTOM) / 2.0), Anchor::Middle, "empty", "no requests");
            return svg.finish();
        };
        let (lo, hi) = (lo.saturating_sub(1), hi + 2);
        let x = LogScale::new((bin_edge(lo), bin_edge(hi)), (LEFT, RIGHT));
        let most = self.bins.iter().map(|b| b.requests).max().unwrap_or(1).max(1);
        let decades = (most as f64).log10().ceil().max(1.0) as i32;
        let y = LogScale::new((0.5, 10f64.powi(decades)), (BOTTOM, TOP));

        for decade in 0..=decades {
            let count = 10f64.powi(decade);
            let py = y.map(count);
            svg.line((LEFT, py), (RIGHT, py), "grid");
            svg.text((LEFT - 6.0, py + 4.0), Anchor::End, "tick", &count_label(count));
        }
        svg.text((LEFT - 6.0, TOP - 10.0), Anchor::End, "axis-title", "requests");

        let octaves = f64::from(hi - lo) / f64::from(BINS_PER_OCTAVE);
        let octave_px = (RIGHT - LEFT) / octaves.max(1.0);
        let every = (1..=10).find(|&k| f64::from(k) * octave_px >= 56.0).unwrap_or(10);
        let first_power = lo.div_ceil(BINS_PER_OCTAVE);
        for power in (first_power..=hi / BINS_PER_OCTAVE).filter(|p| p % every == 0) {
            let px = x.map(2f64.powi(power as i32));
            svg.line((px, BOTTOM), (px, BOTTOM + 4.0), "axis");
            svg.text((px, BOTTOM + 16.0), Anchor::Middle, "tick", &short_bytes(1u64 << power.min(63)));
        }
        svg.text((RIGHT, HEIGHT - 4.0), Anchor::End, "axis-title", "request size (rounded up to 256 B)");

        for class in marks.classes {
            let block = class.block_size as f64;
            let smallest = block / (1.0 + marks.max_waste.max(0.0));
            let (x0, x1) = (x.map(smallest), x.map(block));
            svg.rect((x0, TOP), ((x1 - x0).max(1.0), BOTTOM - TOP), "class-band", None);
        }
        for bin in self.bins.iter().filter(|b| b.requests > 0) {
            let (x0, x1) = (x.map(bin.lower()), x.map(bin.upper()));
            let top = y.map(bin.requests as f64);
            let title = format!(
                "{} to {}: {} requests",
                human_bytes(bin.lower().ceil() as u64),
                human_bytes(bin.upper().ceil() as u64),
                bin.requests
            );
            svg.rect((x0 + 0.5, top), ((x1 - x0 - 1.0).max(1.0), BOTTOM - top), "bar", Some(&title));
        }
        for class in marks.classes {
            let px = x.map(class.block_size as f64);
            svg.line((px, TOP - 6.0), (px, BOTTOM), "class-mark");
            svg.polygon(&[(px - 4.0, TOP - 12.0), (px + 4.0, TOP - 12.0), (px, TOP - 5.0)], "class-head");
            let title = format!(
                "hybrid class {}: {} blocks, holds requests from {}",
                short_bytes(class.block_size),
                class.block_count,
                short_bytes((class.block_size as f64 / (1.0 + marks.max_waste.max(0.0))).ceil() as u64)
            );
            svg.hover((px - 4.0, TOP - 12.0), (8.0, BOTTOM - TOP + 12.0), &title);
        }
        if let Some(block) = marks.fixed_block {
            let px = x.map(block as f64);
            svg.line((px, TOP - 14.0), (px, BOTTOM), "fixed-mark");
            svg.text(
                (px - 4.0, TOP - 16.0),
                Anchor::End,
                "fixed-label",
                &format!("fixed block {}", short_bytes(block)),
            );
        }
        svg.line((LEFT, BOTTOM), (RIGHT, BOTTOM), "axis");
        svg.line((LEFT, TOP - 4.0), (LEFT, BOTTOM), "axis");
        svg.finish()
    }

    fn legend(&self, svg: &mut Svg, marks: &SizeMarks<'_>) {
        let y = 18.0;
        let mut at = LEFT;
        svg.rect((at, y - 10.0), (14.0, 10.0), "bar", None);
        svg.text((at + 20.0, y), Anchor::Start, "legend", "requests per size bin (log scale)");
        at += 250.0;
        svg.line((at + 7.0, y - 12.0), (at + 7.0, y + 2.0), "class-mark");
        svg.rect((at, y - 12.0), (6.0, 14.0), "class-band", None);
        let waste = format!("{:.1}", marks.max_waste * 100.0);
        let classes = format!(
            "hybrid classes ({}), shaded: the requests each holds (block at most {}% above the request)",
            marks.classes.len(),
            waste.trim_end_matches(".0")
        );
        svg.text((at + 16.0, y), Anchor::Start, "legend", &classes);
        if marks.fixed_block.is_some() {
            at += 640.0;
            svg.line((at, y - 4.0), (at + 18.0, y - 4.0), "fixed-mark");
            svg.text((at + 24.0, y), Anchor::Start, "legend", "fixed pool's block size");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_fall_in_quarter_octave_bins() {
        assert_eq!(bin_of(256), 32);
        assert_eq!(bin_of(1 << 20), 80);
        assert_eq!(bin_of((1 << 20) - 256), 79);
        assert_eq!(bin_of(1), 0);
        // The first edge above 256 is 2^8.25 = 304.4.
        assert_eq!(bin_of(304), 32);
        assert_eq!(bin_of(305), 33);
        assert_eq!(bin_of(512), 36);
        let bin = SizeBin { index: 32, requests: 1 };
        assert_eq!(bin.lower(), 256.0);
        assert!((bin.upper() - 304.44).abs() < 0.01, "{}", bin.upper());
    }

    #[test]
    fn counts_add_up_in_their_bins_with_gaps_kept() {
        let histogram = SizeHistogram::of(&[(0, 9), (256, 3), (300, 2), (512, 5), (1024, 0), (4096, 1)]);
        assert_eq!(histogram.requests, 11);
        assert_eq!(histogram.bins.first(), Some(&SizeBin { index: 32, requests: 5 }));
        assert_eq!(histogram.bins.len(), 48 - 32 + 1);
        assert_eq!(histogram.bins[4], SizeBin { index: 36, requests: 5 });
        assert_eq!(histogram.bins.last(), Some(&SizeBin { index: 48, requests: 1 }));
        assert_eq!(histogram.bins.iter().filter(|b| b.requests > 0).count(), 3);
    }

    #[test]
    fn the_chart_marks_classes_and_the_fixed_block() {
        let histogram = SizeHistogram::of(&[(256, 3), (4096, 1000), (1 << 20, 20)]);
        let classes =
            [ClassSpec { block_size: 4096, block_count: 64 }, ClassSpec { block_size: 1 << 20, block_count: 8 }];
        let svg = histogram.render(&SizeMarks { classes: &classes, max_waste: 0.125, fixed_block: Some(6096 << 10) });
        assert_eq!(svg.matches("class=\"class-mark\"").count(), 3, "two classes and the legend: {svg}");
        assert_eq!(svg.matches("class=\"bar\"").count(), 4, "three bins and the legend: {svg}");
        assert!(svg.contains("hybrid class 4 KiB: 64 blocks, holds requests from 3641 B"), "{svg}");
        assert!(svg.contains(">fixed block 6096 KiB</text>"), "{svg}");
        assert!(svg.contains("<title>4 KiB to 4.76 KiB: 1000 requests</title>"), "{svg}");
        assert!(svg.contains(">1k</text>") && svg.contains(">1 MiB</text>"), "{svg}");
        assert!(
            svg.contains("hybrid classes (2), shaded: the requests each holds (block at most 12.5% above"),
            "{svg}"
        );
    }

    #[test]
    fn an_empty_trace_says_so() {
        let svg = SizeHistogram::of(&[]).render(&SizeMarks::default());
        assert!(svg.contains(">no requests</text>"), "{svg}");
    }
}
