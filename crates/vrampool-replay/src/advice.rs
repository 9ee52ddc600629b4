//! Advice: sweep each strategy's parameters on a trace and recommend one strategy and its config.

use std::cmp::Ordering;
use std::sync::Mutex;
use std::sync::atomic::{self, AtomicUsize};

use serde::Serialize;
use vrampool::{PoolSpec, Strategy, human_bytes};

use crate::candidates::candidates;
use crate::error::{Error, Result};
use crate::replay::{ReplayOptions, replay};
use crate::replay_plan::{Operation, ReplayPlan};
use crate::replay_result::ReplayResult;
use crate::size_profile::SizeProfile;

/// Share of the trace's duration a configuration may spend in the driver and still be chosen for its
/// utilization.
pub const DRIVER_BUDGET: f64 = 0.01;

/// How configurations are ranked: those within the driver-time budget first, and among them the fewest
/// requests refused (out of memory), then the highest utilization to the three decimals the tables print,
/// then the least driver time; those over the budget by the fewest refused, then the least driver time, then
/// the highest utilization. Ties go to the smaller growth factor (how far past its reserve the pool grows when
/// a run's peak goes beyond the trace's), then to the config string in byte order, so that the ranking never
/// depends on the order the configurations were replayed in. [`Objective::ranking`] says so in one sentence.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Objective {
    /// The driver time allowed, in microseconds: [`DRIVER_BUDGET`] of the trace's duration.
    pub driver_budget_us: f64,
}

impl Objective {
    /// The objective for a trace lasting `duration_us`.
    pub fn for_duration(duration_us: i64) -> Self {
        Objective { driver_budget_us: duration_us.max(0) as f64 * DRIVER_BUDGET }
    }

    /// Whether `a` ranks above `b`.
    pub fn prefers(&self, a: &ReplayResult, b: &ReplayResult) -> bool {
        self.compare(a, b) == Ordering::Less
    }

    /// Where `a` ranks against `b`: [`Ordering::Less`] where `a` ranks above.
    pub fn compare(&self, a: &ReplayResult, b: &ReplayResult) -> Ordering {
        let within = |r: &ReplayResult| r.driver_time_us <= self.driver_budget_us;
        let higher_utilization = || permille(b.utilization).cmp(&permille(a.utilization));
        let less_driver_time = || a.driver_time_us.total_cmp(&b.driver_time_us);
        let first = within(b).cmp(&within(a)).then(a.ooms.cmp(&b.ooms));
        let figures = if within(a) {
            first.then_with(higher_utilization).then_with(less_driver_time)
        } else {
            first.then_with(less_driver_time).then_with(higher_utilization)
        };
        figures.then_with(|| growth_factor(a).total_cmp(&growth_factor(b))).then_with(|| a.config.cmp(&b.config))
    }

    /// How configurations are ranked, in one sentence without its capital or full stop, for the commands and
    /// the report to print: exactly what [`Objective::compare`] does.
    pub fn ranking(&self) -> String {
        format!(
            "configurations within {:.1} ms of driver time ({}% of the trace's duration) rank first, by fewest \
             requests refused for lack of memory, then highest utilization (to three decimals), then least driver \
             time; those over it by fewest refused, then least driver time, then highest utilization; ties go to \
             the smaller growth factor, then the config string",
            self.driver_budget_us / 1000.0,
            DRIVER_BUDGET * 100.0
        )
    }
}

/// A utilization in thousandths, rounded as the tables print it.
fn permille(utilization: f64) -> i64 {
    (utilization * 1000.0).round() as i64
}

/// The factor a replayed pool grows by once its reserve is full: 1 for the fixed pool, which does not grow.
fn growth_factor(result: &ReplayResult) -> f64 {
    match PoolSpec::parse(&result.config) {
        Ok(spec) => match spec.strategy {
            Strategy::Fixed => 1.0,
            Strategy::Dynamic => spec.dynamic.growth_factor,
            Strategy::Hybrid => spec.hybrid.dynamic.growth_factor,
            // It maps memory only under blocks: it never grows past what they need.
            Strategy::Adaptive => 1.0,
        },
        Err(_) => f64::INFINITY,
    }
}

/// The best configuration of one strategy.
#[derive(Clone, Debug, Serialize)]
pub struct StrategyAdvice {
    /// Its replay.
    pub best: ReplayResult,
    /// Configurations tried.
    pub tried: usize,
}

/// The recommendation for a trace.
#[derive(Clone, Debug, Serialize)]
pub struct Advice {
    /// The trace's name.
    pub trace: String,
    /// How configurations were ranked.
    pub objective: Objective,
    /// The best configuration of each strategy, in the order fixed, dynamic, hybrid, adaptive.
    pub strategies: Vec<StrategyAdvice>,
    /// The strategy recommended.
    pub recommended: Strategy,
    /// Its config string.
    pub config: String,
    /// Why, in one sentence.
    pub reason: String,
    /// How much better than the default (the adaptive pool) the recommended config does, in one sentence;
    /// empty where the default was not replayed.
    pub versus_default: String,
}

impl Advice {
    /// The best replay of the recommended strategy.
    pub fn recommended_result(&self) -> &ReplayResult {
        &self
            .strategies
            .iter()
            .find(|s| s.best.strategy == self.recommended)
            .expect("the recommended strategy was swept")
            .best
    }
}

/// Replays every candidate configuration of `strategies` on `plan`, in parallel on the machine's cores,
/// and recommends the best by [`Objective`]. The best configuration of each strategy is replayed once more
/// alone, so that its CPU time per event is measured without the others running beside it. `progress` is
/// called with (done, total) after each replay. A plan that allocates nothing is an error
/// ([`Error::NoAllocations`]): there is nothing to rank.
pub fn advise(
    plan: &ReplayPlan,
    strategies: &[Strategy],
    options: &ReplayOptions,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Advice> {
    let allocates = plan.initial.iter().chain(&plan.operations).any(|op| matches!(op, Operation::Alloc { .. }));
    if !allocates {
        return Err(Error::NoAllocations { trace: plan.name.clone(), events: plan.events });
    }
    let objective = Objective::for_duration(plan.duration_us);
    let specs: Vec<PoolSpec> = strategies.iter().flat_map(|&s| candidates(s, plan, options.capacity)).collect();
    let total = specs.len() + strategies.len();
    let results: Vec<Mutex<Option<Result<ReplayResult>>>> = specs.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(specs.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, atomic::Ordering::Relaxed);
                    let Some(spec) = specs.get(i) else { break };
                    let result = replay(plan, spec, options);
                    *results[i].lock().expect("no replay panics while holding its slot") = Some(result);
                    progress(done.fetch_add(1, atomic::Ordering::Relaxed) + 1, total);
                }
            });
        }
    });
    let mut per_strategy: Vec<StrategyAdvice> = Vec::new();
    for (spec, slot) in specs.iter().zip(results) {
        let result = slot.into_inner().expect("no replay panics").expect("every candidate was replayed")?;
        match per_strategy.iter_mut().find(|s| s.best.strategy == spec.strategy) {
            Some(advice) => {
                advice.tried += 1;
                if objective.prefers(&result, &advice.best) {
                    advice.best = result;
                }
            }
            None => per_strategy.push(StrategyAdvice { best: result, tried: 1 }),
        }
    }
    for advice in &mut per_strategy {
        let spec = PoolSpec::parse(&advice.best.config).expect("a replay's config string parses");
        let alone = replay(plan, &spec, options)?;
        advice.best.replay_ns_per_event = alone.replay_ns_per_event;
        progress(done.fetch_add(1, atomic::Ordering::Relaxed) + 1, total);
    }
    per_strategy.sort_by_key(|s| Strategy::ALL.iter().position(|&x| x == s.best.strategy));
    let winner = per_strategy
        .iter()
        .map(|s| &s.best)
        .reduce(|best, r| if objective.prefers(r, best) { r } else { best })
        .expect("at least one strategy");
    let reason = reason(plan, winner, &objective);
    let default = per_strategy.iter().find(|s| s.best.strategy == Strategy::Adaptive);
    let versus_default = default.map_or_else(String::new, |default| versus_default(winner, &default.best, &objective));
    Ok(Advice {
        trace: plan.name.clone(),
        objective,
        recommended: winner.strategy,
        config: winner.config.clone(),
        reason,
        versus_default,
        strategies: per_strategy,
    })
}

/// One sentence: how the winner compares with the default, `default`, and where the default falls short.
fn versus_default(winner: &ReplayResult, default: &ReplayResult, objective: &Objective) -> String {
    if winner.strategy == Strategy::Adaptive {
        return "the default (the adaptive pool) is the best found: no tuned config reserves less within the driver \
                budget"
            .into();
    }
    let saved = default.peak_reserved_bytes as i64 - winner.peak_reserved_bytes as i64;
    let share = saved as f64 / default.peak_reserved_bytes.max(1) as f64 * 100.0;
    let reserves = match saved {
        0 => "reserves as much as the default".to_string(),
        s if s > 0 => format!("reserves {} ({share:.1}%) less than the default", human_bytes(s.unsigned_abs())),
        s => format!("reserves {} ({:.1}%) more than the default", human_bytes(s.unsigned_abs()), -share),
    };
    let over = if default.driver_time_us > objective.driver_budget_us { ", over the budget" } else { "" };
    format!(
        "tuned, the {} pool {reserves} ({}, utilization {:.3}) and spends {:.1} ms in the driver against the \
         default's {:.1} ms{over}",
        winner.strategy.name(),
        human_bytes(default.peak_reserved_bytes),
        default.utilization,
        winner.driver_time_us / 1000.0,
        default.driver_time_us / 1000.0,
    )
}

/// One sentence: what the sizes look like and what the winner achieves.
fn reason(plan: &ReplayPlan, winner: &ReplayResult, objective: &Objective) -> String {
    let profile = SizeProfile::of(plan);
    let sizes = profile.sizes_covering(0.95);
    let shape = if sizes <= 32 {
        format!("shapes are fixed: 95% of requests fall in {sizes} sizes")
    } else {
        format!("sizes vary: 95% of requests spread over {sizes} sizes")
    };
    let budget = if winner.driver_time_us <= objective.driver_budget_us { "within" } else { "over" };
    format!(
        "{shape}; the {} pool reserves {} at most for {} live (utilization {:.3}) and spends {:.1} ms in the \
         driver, {budget} the budget of 1% of the trace's {:.1} s",
        winner.strategy.name(),
        human_bytes(winner.peak_reserved_bytes),
        human_bytes(winner.peak_live_bytes),
        winner.utilization,
        winner.driver_time_us / 1000.0,
        plan.duration_us as f64 / 1e6,
    )
}

#[cfg(test)]
mod tests {
    use vrampool_trace::{Event, EventKind, Trace};

    use super::*;

    fn plan(events: Vec<Event>) -> ReplayPlan {
        ReplayPlan::from_trace(&Trace { name: "t".into(), events, ..Trace::default() }).unwrap()
    }

    #[test]
    fn a_trace_that_allocates_nothing_is_refused_by_name() {
        let segments_only = plan(vec![Event::new(0, EventKind::SegmentAlloc, 0x1000, 2 << 20, 0)]);
        let err = advise(&segments_only, &Strategy::ALL, &ReplayOptions::default(), &|_, _| {}).unwrap_err();
        assert!(matches!(err, Error::NoAllocations { events: 1, .. }), "{err:?}");
        assert_eq!(err.to_string(), "t: no allocation in the trace (events: 1): nothing to compare or advise on");
        let one = plan(vec![
            Event::new(0, EventKind::Alloc, 0x1000, 4096, 0),
            Event::new(1, EventKind::Free, 0x1000, 4096, 0),
        ]);
        let advice =
            advise(&one, &Strategy::ALL, &ReplayOptions::default(), &|_, _| {}).expect("one allocation is enough");
        assert_eq!(advice.strategies.len(), 4);
        assert!(!advice.versus_default.is_empty());
        let tuned_only = advise(&one, &Strategy::TUNABLE, &ReplayOptions::default(), &|_, _| {}).unwrap();
        assert!(tuned_only.versus_default.is_empty(), "the default was not replayed");
    }

    /// The comparison with the default says how much the tuned config saves, and the default's driver time;
    /// where the default wins, it says so.
    #[test]
    fn the_advice_says_how_much_better_than_the_default_a_tuned_config_does() {
        let one = plan(vec![
            Event::new(0, EventKind::Alloc, 0x1000, 4096, 0),
            Event::new(1, EventKind::Free, 0x1000, 4096, 0),
        ]);
        let base = replay(&one, &PoolSpec::default(), &ReplayOptions::default()).unwrap();
        let with = |strategy, reserved: u64, driver_time_us: f64| ReplayResult {
            strategy,
            peak_reserved_bytes: reserved,
            driver_time_us,
            ..base.clone()
        };
        let objective = Objective { driver_budget_us: 10_000.0 };
        let default = with(Strategy::Adaptive, 100 << 20, 15_000.0);
        let tuned = with(Strategy::Dynamic, 90 << 20, 2_000.0);
        let sentence = versus_default(&tuned, &default, &objective);
        assert!(sentence.contains("10 MiB (10.0%) less than the default"), "{sentence}");
        assert!(sentence.contains("2.0 ms in the driver against the default's 15.0 ms, over the budget"), "{sentence}");
        assert!(versus_default(&default, &default, &objective).contains("is the best found"));
    }

    /// Configurations whose utilizations print the same rank by driver time; only where that is equal too
    /// does the smaller growth factor (how far past its reserve a pool grows when a run outgrows the trace),
    /// then the config string, decide. A higher utilization still comes first, and the budget before it.
    #[test]
    fn equal_utilizations_rank_by_driver_time_then_growth_factor() {
        let one = plan(vec![
            Event::new(0, EventKind::Alloc, 0x1000, 4096, 0),
            Event::new(1, EventKind::Free, 0x1000, 4096, 0),
        ]);
        let spec = PoolSpec::parse("strategy=dynamic").unwrap();
        let base = replay(&one, &spec, &ReplayOptions::default()).unwrap();
        let with = |config: &str, utilization: f64, driver_time_us: f64| ReplayResult {
            config: config.into(),
            utilization,
            driver_time_us,
            ..base.clone()
        };
        let objective = Objective { driver_budget_us: 100.0 };
        let fast_but_steep = with("strategy=dynamic,page_size=32MiB,initial_size=32MiB", 0.9801, 20.0);
        let slow_but_gentle = with("strategy=dynamic,page_size=32MiB,growth_factor=1.01", 0.9804, 40.0);
        assert!(objective.prefers(&fast_but_steep, &slow_but_gentle), "0.980 both: less driver time first");
        assert!(!objective.prefers(&slow_but_gentle, &fast_but_steep));
        let hybrid = with("strategy=hybrid,page_size=8MiB", 0.9804, 11.93);
        let dynamic = with("strategy=dynamic,page_size=8MiB,initial_size=8MiB", 0.9796, 9.28);
        assert!(objective.prefers(&dynamic, &hybrid), "the dynamic pool's 9.28 ms against the hybrid's 11.93");
        let gentle_twin = with("strategy=dynamic,page_size=32MiB,growth_factor=1.01", 0.9801, 20.0);
        assert!(objective.prefers(&gentle_twin, &fast_but_steep), "equal driver time: 1.01 against 1.5");
        let hybrid_twin = with("strategy=hybrid,page_size=32MiB", 0.9801, 20.0);
        assert!(objective.prefers(&gentle_twin, &hybrid_twin), "1.01 both: the config string");
        assert_eq!(objective.compare(&gentle_twin, &gentle_twin), Ordering::Equal);
        let higher = with("strategy=dynamic,growth_factor=2", 0.9815, 50.0);
        assert!(objective.prefers(&higher, &fast_but_steep), "a higher utilization first");
        let over_budget = with("strategy=dynamic,growth_factor=1.01", 0.99, 150.0);
        assert!(objective.prefers(&fast_but_steep, &over_budget), "the budget first");
        let refused = ReplayResult { ooms: 1, ..higher.clone() };
        assert!(objective.prefers(&fast_but_steep, &refused), "fewer refused requests before utilization");
        // Over the budget, driver time before utilization.
        let over_but_faster = with("strategy=dynamic,growth_factor=1.5", 0.5, 120.0);
        assert!(objective.prefers(&over_but_faster, &over_budget));
        let over_and_as_fast = with("strategy=dynamic,growth_factor=1.2", 0.6, 120.0);
        assert!(objective.prefers(&over_and_as_fast, &over_but_faster), "then utilization");
    }

    /// The sentence the commands and the report print names the budget and every step of the ranking, in
    /// [`Objective::compare`]'s order.
    #[test]
    fn the_ranking_says_what_compare_does() {
        let ranking = Objective { driver_budget_us: 14_300.0 }.ranking();
        assert!(ranking.starts_with("configurations within 14.3 ms of driver time (1% of the trace's duration)"));
        let steps = [
            "rank first",
            "fewest requests refused",
            "highest utilization (to three decimals)",
            "least driver time",
            "over it",
            "fewest refused",
            "least driver time",
            "highest utilization",
            "smaller growth factor",
            "config string",
        ];
        let mut from = 0;
        for step in steps {
            let at = ranking[from..].find(step).unwrap_or_else(|| panic!("`{step}` after byte {from}: {ranking}"));
            from += at + step.len();
        }
    }
}
