//! The configurations `advise` tries for each strategy on a trace.

use vrampool::{
    AdaptiveConfig, Cap, DynamicConfig, Fallback, FixedConfig, HybridConfig, MIB, PagePolicy, PoolSpec, Strategy,
};

use crate::replay_plan::ReplayPlan;
use crate::size_profile::SizeProfile;

/// Growth factors tried for the dynamic pool.
const GROWTH_FACTORS: [f64; 6] = [1.01, 1.05, 1.1, 1.25, 1.5, 2.0];
/// Growth factors tried for the hybrid's region.
const REGION_GROWTH_FACTORS: [f64; 3] = [1.01, 1.05, 1.1];
/// Rounding-waste bounds tried for the hybrid's classes.
const MAX_WASTES: [f64; 2] = [0.03, 0.125];
/// Initial sizes tried: one page, the default.
const INITIAL_SIZES: [u64; 2] = [2 * MIB, 256 * MIB];
/// Physical page sizes tried on virtual memory: the H200's granularity, and larger pages that need fewer
/// driver calls.
const PAGE_SIZES: [u64; 3] = [2 * MIB, 8 * MIB, 32 * MIB];
/// Pages per pool tried for pages the dynamic pool sizes itself ([`PagePolicy::pages_per_pool`]): from
/// larger pages (fewer driver calls) to smaller ones (less memory idle in them).
const PAGES_PER_POOL: [u64; 4] = [64, 128, 256, 512];
/// Shares of the time, in thousandths, tried for moving idle pages ([`PagePolicy::driver_per_mille`]).
const DRIVER_PER_MILLE: [u64; 3] = [5, 10, 20];
/// Coverages tried for the hybrid's learned classes.
const COVERAGES: [f64; 2] = [0.8, 0.95];
/// Warm-up lengths tried for the hybrid.
const WARMUPS: [u64; 2] = [1024, 4096];
/// Size percentiles tried as the fixed pool's block size.
const BLOCK_PERCENTILES: [f64; 6] = [0.5, 0.75, 0.9, 0.95, 0.99, 1.0];

/// The configurations tried for `strategy` on `plan`, on a device of `capacity` bytes.
///
/// - fixed: block sizes at the 50th to 100th percentile of request sizes, each with as many blocks as
///   requests of at most that size were live at once, fallback to device segments;
/// - dynamic: pages of 2, 8 or 32 MiB × initial size one page or 256 MiB × growth factors 1.01 to 2 × idle
///   idle pages reclaimed (waiting for those still in use, or not) or not, on virtual memory; and the range
///   the default runs as ([`AdaptiveConfig::region`]: pages it sizes itself) with 64 to 512 pages per pool ×
///   5, 10 or 20 thousandths of the time for moving idle pages;
/// - hybrid: pages of 2, 8 or 32 MiB × rounding waste 3% or 12.5% × coverage 0.8 or 0.95 × warm-up 1024 or
///   4096 requests × region growth factor 1.01 to 1.1 × the classes' free blocks given back before each
///   growth or only when a growth is refused (watermark 0.8, the region waiting for idle pages);
/// - adaptive: its one configuration, the default (it has nothing to sweep).
pub fn candidates(strategy: Strategy, plan: &ReplayPlan, capacity: u64) -> Vec<PoolSpec> {
    let profile = SizeProfile::of(plan);
    let mut specs = Vec::new();
    match strategy {
        Strategy::Fixed => {
            let mut blocks: Vec<u64> = BLOCK_PERCENTILES.iter().map(|&p| profile.percentile(p).max(256)).collect();
            blocks.dedup();
            for block_size in blocks {
                let count = SizeProfile::peak_live_up_to(plan, block_size).max(1);
                if block_size.saturating_mul(count) > capacity {
                    continue;
                }
                let fixed = FixedConfig { block_size, block_count: count, fallback: Fallback::Backend };
                specs.push(PoolSpec { strategy, fixed, ..PoolSpec::default() });
            }
        }
        Strategy::Dynamic => {
            for page in PAGE_SIZES {
                for initial_size in INITIAL_SIZES.map(|size| size.max(page)) {
                    for growth_factor in GROWTH_FACTORS {
                        for (reclaim_idle, wait_for_idle) in [(true, false), (true, true), (false, false)] {
                            let dynamic = DynamicConfig {
                                initial_size,
                                growth_factor,
                                reclaim_idle,
                                wait_for_idle,
                                ..DynamicConfig::default()
                            };
                            specs.push(PoolSpec { strategy, dynamic, page_size: Some(page), ..PoolSpec::default() });
                        }
                    }
                }
            }
            for pages_per_pool in PAGES_PER_POOL {
                for driver_per_mille in DRIVER_PER_MILLE {
                    let pages = PagePolicy { pages_per_pool, driver_per_mille, ..PagePolicy::default() };
                    let dynamic = AdaptiveConfig::default().pages(pages).region();
                    specs.push(PoolSpec { strategy, dynamic, ..PoolSpec::default() });
                }
            }
        }
        Strategy::Adaptive => specs.push(PoolSpec { strategy, ..PoolSpec::default() }),
        Strategy::Hybrid => {
            for page in PAGE_SIZES {
                for max_rounding_waste in MAX_WASTES {
                    for coverage in COVERAGES {
                        for warmup_requests in WARMUPS {
                            for growth_factor in REGION_GROWTH_FACTORS {
                                for drain_before_growth in [false, true] {
                                    let dynamic = DynamicConfig { growth_factor, ..HybridConfig::default().dynamic };
                                    let hybrid = HybridConfig {
                                        coverage,
                                        warmup_requests,
                                        max_rounding_waste,
                                        drain_before_growth,
                                        dynamic,
                                        ..HybridConfig::default()
                                    };
                                    let page_size = Some(page);
                                    specs.push(PoolSpec { strategy, hybrid, page_size, ..PoolSpec::default() });
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    for spec in &mut specs {
        spec.dynamic.cap = Cap::Fraction(0.8);
        spec.hybrid.dynamic.cap = Cap::Fraction(0.8);
        spec.adaptive.cap = Cap::Fraction(0.8);
    }
    specs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The range the default runs as is tried with each page policy, beside the device's pages.
    #[test]
    fn the_dynamic_pool_is_tried_as_the_defaults_range_with_each_page_policy() {
        let specs = candidates(Strategy::Dynamic, &ReplayPlan::default(), 141 << 30);
        let region = AdaptiveConfig::default().region();
        for pages_per_pool in PAGES_PER_POOL {
            for driver_per_mille in DRIVER_PER_MILLE {
                let pages = PagePolicy { pages_per_pool, driver_per_mille, ..PagePolicy::default() };
                let tuned = DynamicConfig {
                    paging: vrampool::Paging::Adaptive(pages),
                    cap: Cap::Fraction(0.8),
                    ..region.clone()
                };
                assert!(
                    specs.iter().any(|s| s.dynamic == tuned && s.page_size.is_none()),
                    "no candidate with {pages_per_pool} pages per pool, {driver_per_mille} per mille"
                );
            }
        }
        let default_range = specs.iter().find(|s| s.dynamic.paging == region.paging).expect("the default's own pages");
        assert_eq!(
            PoolSpec::parse(&default_range.to_string()).unwrap().dynamic,
            default_range.dynamic,
            "its string reads back"
        );
        assert_eq!(
            specs.len(),
            PAGE_SIZES.len() * INITIAL_SIZES.len() * GROWTH_FACTORS.len() * 3
                + PAGES_PER_POOL.len() * DRIVER_PER_MILLE.len()
        );
    }

    #[test]
    fn the_hybrid_is_tried_with_each_drain_policy_on_every_page_size_with_the_default_largest_class() {
        let specs = candidates(Strategy::Hybrid, &ReplayPlan::default(), 141 << 30);
        assert_eq!(
            specs.len(),
            PAGE_SIZES.len() * MAX_WASTES.len() * COVERAGES.len() * WARMUPS.len() * REGION_GROWTH_FACTORS.len() * 2
        );
        for page in PAGE_SIZES {
            for drain in [false, true] {
                assert!(
                    specs.iter().any(|s| s.page_size == Some(page) && s.hybrid.drain_before_growth == drain),
                    "no candidate with {page} B pages, drain {drain}"
                );
            }
        }
        assert_eq!(candidates(Strategy::Adaptive, &ReplayPlan::default(), 141 << 30), vec![PoolSpec::default()]);
        let default_largest = HybridConfig::default().max_class_size;
        assert!(specs.iter().all(|s| s.hybrid.max_class_size == default_largest));
        assert!(specs.iter().all(|s| s.hybrid.dynamic.cap == Cap::Fraction(0.8)));
    }
}
