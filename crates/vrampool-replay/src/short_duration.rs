//! Whether a trace lasts long enough for the driver-time budget to mean anything.
//!
//! A replay weighs the cost model's driver time against the trace's duration, from its first event's time to
//! its last: [`crate::Objective`] allows [`DRIVER_BUDGET`] of it, `replay` prints the share, and the
//! simulated device keeps the trace's time for the default pool's own budget of moves and for a lagging GPU.
//! A trace whose times are not the microseconds of the run it recorded (line numbers, one tick per event, all
//! zero) makes that share meaningless without any error. [`ShortDuration::check`] tells such a trace from the
//! trace alone: holding its peak of live bytes costs any pool some driver time, and where that least cost is
//! already over the budget, the budget cannot tell one configuration from another.

use std::fmt;

use serde::Serialize;
use vrampool::{CostModel, SimDeviceConfig, human_bytes};

use crate::advice::DRIVER_BUDGET;
use crate::replay::ReplayOptions;
use crate::replay_plan::{Operation, ReplayPlan};

/// A trace too short for the driver-time budget: the least driver time any pool spends to hold its peak of
/// live bytes is more than [`DRIVER_BUDGET`] of its duration. Its [`fmt::Display`] is the warning the
/// commands print.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShortDuration {
    /// The trace's name.
    pub trace: String,
    /// Microseconds from the trace's first event to its last ([`ReplayPlan::duration_us`]).
    pub duration_us: i64,
    /// The driver time allowed, in microseconds: [`DRIVER_BUDGET`] of the duration.
    pub budget_us: f64,
    /// The most bytes the trace's allocations hold at once (at most the simulated device's memory).
    pub peak_live_bytes: u64,
    /// The least driver time, in microseconds, that holding [`ShortDuration::peak_live_bytes`] costs any pool
    /// ([`least_driver_time_us`]).
    pub least_driver_time_us: f64,
}

impl ShortDuration {
    /// The warning for `plan` replayed with `options` (the cost model of the simulated device replays use),
    /// or `None` where the least driver time any pool needs is within the budget, or the plan holds nothing.
    pub fn check(plan: &ReplayPlan, options: &ReplayOptions) -> Option<ShortDuration> {
        let peak_live_bytes = peak_live_bytes(plan).min(options.capacity);
        if peak_live_bytes == 0 {
            return None;
        }
        let least_driver_time_us = least_driver_time_us(&SimDeviceConfig::default().cost_model, peak_live_bytes);
        let budget_us = plan.duration_us.max(0) as f64 * DRIVER_BUDGET;
        (least_driver_time_us > budget_us).then(|| ShortDuration {
            trace: plan.name.clone(),
            duration_us: plan.duration_us,
            budget_us,
            peak_live_bytes,
            least_driver_time_us,
        })
    }
}

impl fmt::Display for ShortDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let same_time = if self.duration_us == 0 { " (its events all have the same time)" } else { "" };
        write!(
            f,
            "{}: the driver-time share is relative to the trace's duration of {}{same_time} and may be \
             meaningless: holding its peak of {} live costs any pool at least {} in the driver (cost model), more \
             than the budget of {}% of that duration, {}, so no configuration can be within it and advise ranks \
             every one by driver time before utilization. Are the trace's times microseconds of the run it \
             recorded? The default pool's share of time for moving idle pages, and --gpu-lag-ms, go by them too.",
            self.trace,
            human_time(self.duration_us as f64),
            human_bytes(self.peak_live_bytes),
            human_time(self.least_driver_time_us),
            DRIVER_BUDGET * 100.0,
            human_time(self.budget_us),
        )
    }
}

/// The least driver time, in microseconds, that holding `bytes` at once costs a pool on a device with the
/// cost model `model`: the cheaper of one segment of that size and one reserved range with one page of that
/// size mapped. Any pool makes at least one such call, and with the default model no set of smaller calls
/// costs less (each call costs a fixed part plus a part that grows no faster than the size).
pub fn least_driver_time_us(model: &CostModel, bytes: u64) -> f64 {
    if bytes == 0 {
        return 0.0;
    }
    let segment = model.segment_alloc(bytes);
    let range = model.reserve_range_ns.saturating_add(model.map(1, bytes));
    segment.min(range) as f64 / 1000.0
}

/// The most bytes `plan`'s allocations hold at once, its blocks live from the start included (saturating).
fn peak_live_bytes(plan: &ReplayPlan) -> u64 {
    let mut sizes = vec![0u64; plan.slots as usize];
    let (mut live, mut peak) = (0u128, 0u128);
    for op in plan.initial.iter().chain(&plan.operations) {
        match *op {
            Operation::Alloc { slot, size, .. } => {
                sizes[slot as usize] = size;
                live += u128::from(size);
                peak = peak.max(live);
            }
            Operation::Free { slot } => live -= u128::from(std::mem::take(&mut sizes[slot as usize])),
        }
    }
    u64::try_from(peak).unwrap_or(u64::MAX)
}

/// A time in microseconds in the unit that suits it, to three figures or so: `99.0 µs`, `4.30 ms`, `1.43 s`.
fn human_time(us: f64) -> String {
    let (value, unit) = if us >= 1e6 {
        (us / 1e6, "s")
    } else if us >= 1e3 {
        (us / 1e3, "ms")
    } else {
        (us, "µs")
    };
    let decimals = if value >= 100.0 {
        0
    } else if value >= 10.0 {
        1
    } else {
        2
    };
    format!("{value:.decimals$} {unit}")
}

#[cfg(test)]
mod tests {
    use vrampool::Strategy;
    use vrampool_trace::{Event, EventKind, Trace};

    use super::*;
    use crate::candidates::candidates;
    use crate::replay::replay;

    /// 50 allocations of 4 to 12 KiB, each freed at the next tick, `tick_us` apart.
    fn plan(tick_us: i64) -> ReplayPlan {
        let mut events = Vec::new();
        for i in 0..50i64 {
            let (addr, size) = (0x1000 * (i as u64 % 4 + 1), 4096 * (i as u64 % 3 + 1));
            events.push(Event::new(2 * i * tick_us, EventKind::Alloc, addr, size, 0));
            events.push(Event::new((2 * i + 1) * tick_us, EventKind::Free, addr, size, 0));
        }
        ReplayPlan::from_trace(&Trace { name: "t.csv".into(), events, ..Trace::default() }).unwrap()
    }

    #[test]
    fn times_a_microsecond_apart_are_too_short_for_the_budget() {
        let short = ShortDuration::check(&plan(1), &ReplayOptions::default()).expect("99 µs is too short");
        assert_eq!(short.duration_us, 99);
        assert_eq!(short.peak_live_bytes, 12 << 10);
        // Half of a segment pair of 12 KiB, a little over its 86 µs at 4 KiB: cheaper than a range and a page.
        assert_eq!(short.least_driver_time_us, CostModel::default().segment_alloc(12 << 10) as f64 / 1000.0);
        assert!((43.0..43.1).contains(&short.least_driver_time_us), "{}", short.least_driver_time_us);
        let message = short.to_string();
        assert!(
            message.starts_with(
                "t.csv: the driver-time share is relative to the trace's duration of 99.0 µs and may be meaningless"
            ),
            "{message}"
        );
        assert!(message.contains("at least 43.0 µs in the driver"), "{message}");
        assert!(message.contains("the budget of 1% of that duration, 0.99 µs"), "{message}");
        assert!(!message.contains("same time"), "{message}");
    }

    #[test]
    fn the_same_trace_in_milliseconds_is_long_enough() {
        assert_eq!(ShortDuration::check(&plan(1000), &ReplayOptions::default()), None);
        // The line lies where the least driver time is 1% of the duration: 43 µs of 4.3 ms.
        assert!(ShortDuration::check(&plan(43), &ReplayOptions::default()).is_some(), "4.257 ms");
        assert_eq!(ShortDuration::check(&plan(44), &ReplayOptions::default()), None, "4.356 ms");
    }

    #[test]
    fn times_all_the_same_are_told_as_such() {
        let short = ShortDuration::check(&plan(0), &ReplayOptions::default()).expect("no duration at all");
        assert_eq!((short.duration_us, short.budget_us), (0, 0.0));
        assert!(short.to_string().contains("duration of 0.00 µs (its events all have the same time)"), "{short}");
    }

    #[test]
    fn a_trace_that_holds_nothing_warns_of_nothing() {
        let empty = ReplayPlan::from_trace(&Trace::default()).unwrap();
        assert_eq!(ShortDuration::check(&empty, &ReplayOptions::default()), None);
    }

    /// The least driver time is a floor under every pool: every configuration `advise` tries on the short
    /// trace spends at least that much.
    #[test]
    fn no_configuration_spends_less_than_the_least_driver_time() {
        let plan = plan(1);
        let options = ReplayOptions::default();
        let least = ShortDuration::check(&plan, &options).unwrap().least_driver_time_us;
        for strategy in Strategy::ALL {
            for spec in candidates(strategy, &plan, options.capacity) {
                let result = replay(&plan, &spec, &options).unwrap();
                assert!(result.driver_time_us >= least, "{spec}: {} µs", result.driver_time_us);
            }
        }
    }

    #[test]
    fn the_peak_of_live_bytes_counts_blocks_live_from_the_start_and_never_wraps() {
        let plan = ReplayPlan {
            initial: vec![Operation::Alloc { slot: 0, size: u64::MAX, stream: 0 }],
            operations: vec![
                Operation::Alloc { slot: 1, size: u64::MAX, stream: 0 },
                Operation::Free { slot: 0 },
                Operation::Free { slot: 1 },
            ],
            slots: 2,
            ..ReplayPlan::default()
        };
        assert_eq!(peak_live_bytes(&plan), u64::MAX);
        let short = ShortDuration::check(&plan, &ReplayOptions::default()).unwrap();
        assert_eq!(short.peak_live_bytes, ReplayOptions::default().capacity, "at most the device's memory");
    }

    #[test]
    fn times_read_in_the_unit_that_suits_them() {
        assert_eq!(human_time(0.99), "0.99 µs");
        assert_eq!(human_time(99.0), "99.0 µs");
        assert_eq!(human_time(4_300.0), "4.30 ms");
        assert_eq!(human_time(1_430_000.0), "1.43 s");
        assert_eq!(human_time(250_000_000.0), "250 s");
    }
}
