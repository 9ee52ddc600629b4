//! Learning the core's size classes from the requests seen during warm-up.

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use super::config::ClassSpec;
use super::waste_bound::WasteBound;

/// The classes chosen at the end of warm-up and the share of warm-up requests they cover.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LearnedClasses {
    /// The classes, by block size.
    pub classes: Vec<ClassSpec>,
    /// The share of warm-up requests the classes serve.
    pub coverage: f64,
    /// Warm-up requests seen.
    pub requests: u64,
}

/// What bounds the classes chosen at the end of warm-up.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ClassLimits {
    /// The share of requests to cover.
    pub(crate) coverage: f64,
    /// The most a block may exceed a request it serves.
    pub(crate) waste: WasteBound,
    /// The most classes.
    pub(crate) max_classes: usize,
    /// Capacity per block seen live at once.
    pub(crate) headroom: f64,
    /// The largest block a class may have.
    pub(crate) max_block: u64,
}

/// The request sizes of warm-up, counted, and the order of their allocations and frees.
#[derive(Debug, Default)]
pub(crate) struct ClassLearner {
    counts: FxHashMap<u64, u64>,
    requests: u64,
    /// Every warm-up allocation and free, as `(span, allocated)`, for the peak live count per class.
    events: Vec<(u64, bool)>,
    /// Warm-up blocks not yet freed: address to span.
    live: FxHashMap<u64, u64>,
}

impl ClassLearner {
    /// Records an allocation spanning `span` bytes at `addr`; returns the requests seen so far.
    pub(crate) fn allocated(&mut self, addr: u64, span: u64) -> u64 {
        *self.counts.entry(span).or_default() += 1;
        self.requests += 1;
        self.events.push((span, true));
        self.live.insert(addr, span);
        self.requests
    }

    /// Records a free of `addr` if it was a warm-up block.
    pub(crate) fn freed(&mut self, addr: u64) {
        if let Some(span) = self.live.remove(&addr) {
            self.events.push((span, false));
        }
    }

    /// The smallest set of classes (greedy set cover over the spans seen, each class serving spans up to
    /// `waste` smaller than its block) that covers `coverage` of the requests, at most `max_classes`,
    /// each sized `headroom` times the most of its blocks live at once.
    pub(crate) fn choose(&self, limits: &ClassLimits) -> LearnedClasses {
        let ClassLimits { coverage, waste, max_classes, headroom, max_block } = *limits;
        let total: u64 = self.counts.values().sum();
        // Only sizes up to the largest class block are candidates; coverage counts every request.
        let mut spans: Vec<(u64, u64)> =
            self.counts.iter().filter(|&(&s, _)| s <= max_block).map(|(&s, &n)| (s, n)).collect();
        spans.sort_unstable();
        let mut uncovered: Vec<u64> = spans.iter().map(|&(_, n)| n).collect();
        let mut blocks: Vec<u64> = Vec::new();
        let mut covered = 0u64;
        while (covered as f64) < coverage * total as f64 && blocks.len() < max_classes {
            // The window of spans a block of size spans[i] serves ends at i; prefix sums give each gain.
            let prefix: Vec<u64> = std::iter::once(0)
                .chain(uncovered.iter().scan(0u64, |sum, &n| {
                    *sum += n;
                    Some(*sum)
                }))
                .collect();
            let mut best: Option<(u64, usize, usize)> = None;
            for (i, &(block, _)) in spans.iter().enumerate() {
                // Spans below the window are those a block of this size would waste too much on.
                let lo = spans[..=i].partition_point(|&(s, _)| !waste.serves(block, s));
                let gain = prefix[i + 1] - prefix[lo];
                if gain > 0 && best.is_none_or(|(g, _, _)| gain > g) {
                    best = Some((gain, lo, i));
                }
            }
            let Some((gain, lo, i)) = best else { break };
            uncovered[lo..=i].iter_mut().for_each(|n| *n = 0);
            covered += gain;
            blocks.push(spans[i].0);
        }
        blocks.sort_unstable();
        let peaks = self.peak_live(&blocks, waste);
        let classes = blocks
            .iter()
            .zip(peaks)
            .map(|(&block_size, peak)| ClassSpec {
                block_size,
                block_count: ((peak.max(1) as f64) * headroom).ceil() as u64,
            })
            .collect();
        let coverage = if total == 0 { 0.0 } else { covered as f64 / total as f64 };
        LearnedClasses { classes, coverage, requests: self.requests }
    }

    /// The most blocks of each class live at once during warm-up, each request counted in the class that
    /// would serve it.
    fn peak_live(&self, blocks: &[u64], waste: WasteBound) -> Vec<u64> {
        let class_of = |span: u64| {
            let i = blocks.partition_point(|&b| b < span);
            (i < blocks.len() && waste.serves(blocks[i], span)).then_some(i)
        };
        let mut live = vec![0u64; blocks.len()];
        let mut peak = vec![0u64; blocks.len()];
        for &(span, allocated) in &self.events {
            if let Some(i) = class_of(span) {
                if allocated {
                    live[i] += 1;
                    peak[i] = peak[i].max(live[i]);
                } else {
                    live[i] -= 1;
                }
            }
        }
        peak
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(coverage: f64, max_classes: usize, headroom: f64) -> ClassLimits {
        ClassLimits {
            coverage,
            waste: WasteBound { fraction: 0.125, floor: 0 },
            max_classes,
            headroom,
            max_block: u64::MAX,
        }
    }

    #[test]
    fn blocks_above_the_largest_class_are_left_to_the_region() {
        let mut learner = ClassLearner::default();
        for i in 0..100u64 {
            learner.allocated(i, if i < 70 { 8 << 20 } else { 4096 });
        }
        let learned = learner.choose(&ClassLimits { max_block: 1 << 20, ..limits(0.9, 64, 1.0) });
        assert_eq!(learned.classes.iter().map(|c| c.block_size).collect::<Vec<_>>(), vec![4096]);
        assert!((learned.coverage - 0.3).abs() < 1e-9);
    }

    /// A known mix: 60% of requests at 4 KiB, 25% at 1 MiB, 10% spread over 1.00 to 1.10 MiB, 5% odd.
    #[test]
    fn a_known_mix_gives_the_expected_classes_and_coverage() {
        let mut learner = ClassLearner::default();
        let mut addr = 0u64;
        let mut alloc = |learner: &mut ClassLearner, span: u64| {
            addr += 1 << 30;
            learner.allocated(addr, span);
            addr
        };
        for _ in 0..600 {
            let a = alloc(&mut learner, 4096);
            learner.freed(a);
        }
        let mut held = Vec::new();
        for _ in 0..250 {
            held.push(alloc(&mut learner, 1 << 20));
        }
        for i in 0..100 {
            alloc(&mut learner, (1 << 20) + 256 * (i % 400 + 1));
        }
        for i in 0..50 {
            alloc(&mut learner, 256 * (100 + 37 * i));
        }
        let learned = learner.choose(&limits(0.9, 64, 1.0));
        let sizes: Vec<u64> = learned.classes.iter().map(|c| c.block_size).collect();
        // 4 KiB alone covers 60%; the largest of the 1 MiB spread serves 1 MiB and the spread: 95%.
        assert_eq!(sizes, vec![4096, (1 << 20) + 256 * 100]);
        assert!((learned.coverage - 0.95).abs() < 1e-9, "{}", learned.coverage);
        // 4 KiB blocks never overlapped; 250 + 100 of the 1 MiB class were live at once.
        assert_eq!(learned.classes[0].block_count, 1);
        assert_eq!(learned.classes[1].block_count, 350);
        assert_eq!(learned.requests, 1000);
    }

    #[test]
    fn coverage_and_class_limit_stop_the_search() {
        let mut learner = ClassLearner::default();
        for i in 0..100u64 {
            // Sizes far apart: each needs a class of its own.
            learner.allocated(i, 256 << (i % 10));
        }
        assert_eq!(learner.choose(&limits(0.5, 64, 1.0)).classes.len(), 5);
        assert_eq!(learner.choose(&limits(1.0, 3, 1.0)).classes.len(), 3);
        let doubled = learner.choose(&limits(0.5, 64, 2.0));
        assert!(doubled.classes.iter().all(|c| c.block_count == 20), "{doubled:?}");
    }

    #[test]
    fn a_waste_floor_lets_one_class_serve_every_small_size() {
        let mut learner = ClassLearner::default();
        for i in 0..64u64 {
            // 256 B to 16 KiB, one span each; then 1 MiB, twice as often as any small span.
            learner.allocated(i, 256 * (i + 1));
            learner.allocated(1000 + i, 1 << 20);
        }
        let fraction_only = learner.choose(&limits(1.0, 64, 1.0));
        assert!(fraction_only.classes.len() > 20, "{fraction_only:?}");
        let floored = learner
            .choose(&ClassLimits { waste: WasteBound { fraction: 0.125, floor: 16 << 10 }, ..limits(1.0, 64, 1.0) });
        let sizes: Vec<u64> = floored.classes.iter().map(|c| c.block_size).collect();
        assert_eq!(sizes, vec![16 << 10, 1 << 20]);
        assert!((floored.coverage - 1.0).abs() < 1e-9);
    }
}
