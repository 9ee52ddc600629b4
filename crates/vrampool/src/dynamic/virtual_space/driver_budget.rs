//! How much time a virtual range's optional device work has taken, against how much it may take.

use std::time::Instant;

use crate::backend::{Backend, CostModel, DriverClock};

/// The time a virtual range has spent on optional device work (moving and aliasing idle pages), against the
/// time since it first read its device's clock ([`DriverClock`]). Moving idle pages saves memory and costs
/// driver calls each time a block lands where nothing is mapped; where those calls would take more than a
/// set share of the time ([`crate::PagePolicy::driver_per_mille`]) the range maps new memory instead, so a
/// stream of requests denser than the driver's calls (a churn of spread sizes, back to back) stops paying
/// for them, while one whose requests come between the device's work (training and serving steps) keeps
/// its memory compact.
///
/// The work is charged at a cost model's price for each call, never at what the host's clock says it took:
/// a simulated device's own model ([`DriverClock::Simulated`]), and on a real device
/// ([`DriverClock::Wall`]) the default model's anchors ([`CostModel::default`]), which the callers add up
/// call by call ([`DriverBudget::charge`]). The host's time of a call moves by a factor between runs (a page
/// fault in the driver, a busy CPU, a descheduled thread), and one slow call would keep the range from
/// moving pages for the many steps it takes the elapsed time to catch up; charged by the model, the range
/// decides from the requests and the time between them alone, as a replay of the same requests does.
///
/// Reading the clock costs one `Instant::now` on a real device, one lock of the simulated device's state on
/// a simulated one, nothing without a clock.
#[derive(Debug)]
pub(super) struct DriverBudget {
    /// Parts per thousand of the elapsed time the optional work may take; 1000 or more: no bound.
    per_mille: u64,
    /// When the range opened, for a real device's clock.
    opened: Instant,
    /// The simulated clock's first reading, in nanoseconds.
    simulated_start_ns: Option<u64>,
    /// Nanoseconds of optional work so far.
    spent_ns: u64,
    /// The prices of a real device's calls.
    model: CostModel,
    /// The modelled nanoseconds of the calls charged since the last [`DriverBudget::mark`].
    charged_ns: u64,
}

/// The clock's reading before optional device work ([`DriverBudget::mark`]).
#[derive(Clone, Copy, Debug)]
pub(super) enum SpendMark {
    /// No clock.
    Untimed,
    /// A real device: the calls charged from here count.
    Charged,
    /// The cost model's driver time so far.
    Simulated(u64),
}

impl DriverBudget {
    /// A budget of `per_mille` thousandths of the time.
    pub(super) fn new(per_mille: u64) -> Self {
        DriverBudget {
            per_mille,
            opened: Instant::now(),
            simulated_start_ns: None,
            spent_ns: 0,
            model: CostModel::default(),
            charged_ns: 0,
        }
    }

    /// The prices a real device's calls are charged at ([`DriverBudget::charge`]).
    pub(super) fn model(&self) -> &CostModel {
        &self.model
    }

    /// Charges `ns` modelled nanoseconds of a call made since [`DriverBudget::mark`]; counted by
    /// [`DriverBudget::spend`] on a real device only (a simulated one has charged its calls itself).
    pub(super) fn charge(&mut self, ns: u64) {
        self.charged_ns = self.charged_ns.saturating_add(ns);
    }

    /// The time since the range's first reading of `backend`'s clock, in nanoseconds; `None` without a clock.
    fn elapsed_ns(&mut self, backend: &dyn Backend) -> Option<u64> {
        match backend.driver_clock() {
            DriverClock::Untimed => None,
            DriverClock::Wall => Some(u64::try_from(self.opened.elapsed().as_nanos()).unwrap_or(u64::MAX)),
            DriverClock::Simulated { now_ns, .. } => {
                Some(now_ns.saturating_sub(*self.simulated_start_ns.get_or_insert(now_ns)))
            }
        }
    }

    /// Whether the optional work so far has taken more than its share of the time since the first reading.
    /// False on a device without a clock, and for a budget of the whole time.
    pub(super) fn overspent(&mut self, backend: &dyn Backend) -> bool {
        self.overspent_by(backend, 1)
    }

    /// Whether the optional work so far has taken more than `shares` times its share of the time since the
    /// first reading (the bound of an overdraft, [`DriverBudget::overspent`] for 1). False on a device
    /// without a clock, and for a budget of the whole time.
    pub(super) fn overspent_by(&mut self, backend: &dyn Backend, shares: u64) -> bool {
        if self.per_mille >= 1000 {
            return false;
        }
        let allowed = u128::from(self.per_mille) * u128::from(shares);
        self.elapsed_ns(backend).is_some_and(|elapsed| u128::from(self.spent_ns) * 1000 > u128::from(elapsed) * allowed)
    }

    /// Where the clock stands before optional device work: [`DriverBudget::spend`] counts the time from here.
    pub(super) fn mark(&mut self, backend: &dyn Backend) -> SpendMark {
        self.charged_ns = 0;
        match backend.driver_clock() {
            DriverClock::Untimed => SpendMark::Untimed,
            DriverClock::Wall => SpendMark::Charged,
            DriverClock::Simulated { driver_ns, .. } => SpendMark::Simulated(driver_ns),
        }
    }

    /// Counts the time of the optional work since `mark`: the calls charged on a real device, the cost
    /// model's driver time on a simulated one.
    pub(super) fn spend(&mut self, backend: &dyn Backend, mark: SpendMark) {
        let took = match (mark, backend.driver_clock()) {
            (SpendMark::Charged, _) => self.charged_ns,
            (SpendMark::Simulated(before), DriverClock::Simulated { driver_ns, .. }) => {
                let took = driver_ns.saturating_sub(before);
                debug_assert_eq!(took, self.charged_ns, "the calls charged and the simulated device's model disagree");
                took
            }
            _ => 0,
        };
        self.charged_ns = 0;
        self.spent_ns = self.spent_ns.saturating_add(took);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backend::{SimDevice, SimDeviceConfig};
    use crate::units::MIB;

    #[test]
    fn optional_work_is_bounded_by_its_share_of_the_trace_time() {
        let sim = Arc::new(SimDevice::new(SimDeviceConfig::default()));
        let mut budget = DriverBudget::new(10);
        // No replay has set the clock: no budget.
        assert_eq!(sim.driver_clock(), DriverClock::Untimed);
        let mark = budget.mark(&*sim);
        let range = sim.reserve_range(64 * MIB).unwrap();
        budget.spend(&*sim, mark);
        assert_eq!(budget.spent_ns, 0);
        assert!(!budget.overspent(&*sim));
        sim.advance_clock(1_000);
        assert!(!budget.overspent(&*sim), "nothing spent at the first reading");
        let mark = budget.mark(&*sim);
        sim.map(range, 2 * MIB).unwrap();
        budget.charge(budget.model().map(1, 2 * MIB));
        budget.spend(&*sim, mark);
        let spent_us = budget.spent_ns / 1000;
        assert!(spent_us > 0, "the cost model's time of the map");
        // 1% of the time since the first reading: overspent until 100 times the work has passed.
        sim.advance_clock(1_000 + (spent_us * 100) as i64 - 1);
        assert!(budget.overspent(&*sim));
        sim.advance_clock(1_000 + ((budget.spent_ns * 100).div_ceil(1000)) as i64);
        assert!(!budget.overspent(&*sim));
        assert!(!DriverBudget::new(1000).overspent(&*sim), "a budget of the whole time never runs out");
        // Twice the work: over the share, within twice it.
        let mark = budget.mark(&*sim);
        sim.map(range + 2 * MIB, 2 * MIB).unwrap();
        budget.charge(budget.model().map(1, 2 * MIB));
        budget.spend(&*sim, mark);
        assert!(budget.overspent(&*sim) && !budget.overspent_by(&*sim, 3), "over its share, within three times it");
        assert!(budget.overspent_by(&*sim, 1));
    }

    /// A device timed by the host's clock, with nothing else.
    #[derive(Debug)]
    struct Wall;

    impl Backend for Wall {
        fn name(&self) -> String {
            "wall".into()
        }
        fn capacity(&self) -> u64 {
            0
        }
        fn allocate_segment(&self, _: u64) -> crate::Result<u64> {
            Err(self.unsupported("allocate_segment"))
        }
        fn free_segment(&self, _: u64, _: u64) -> crate::Result<()> {
            Ok(())
        }
        fn record_event(&self, _: crate::StreamId) -> crate::Result<crate::EventId> {
            Err(self.unsupported("record_event"))
        }
        fn event_complete(&self, _: crate::EventId) -> crate::Result<bool> {
            Ok(true)
        }
        fn stream_wait_event(&self, _: crate::StreamId, _: crate::EventId) -> crate::Result<()> {
            Ok(())
        }
        fn release_event(&self, _: crate::EventId) {}
        fn synchronize(&self) -> crate::Result<()> {
            Ok(())
        }
        fn driver_clock(&self) -> DriverClock {
            DriverClock::Wall
        }
    }

    #[test]
    fn a_real_device_is_charged_the_modelled_time_of_its_calls_not_the_hosts() {
        let mut budget = DriverBudget::new(10);
        assert!(!budget.overspent(&Wall), "nothing spent");
        let mark = budget.mark(&Wall);
        // However long the host takes, only the charged calls count.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let access = budget.model().set_access_ns;
        budget.charge(access);
        budget.spend(&Wall, mark);
        assert_eq!(budget.spent_ns, access);
        // A charge before the next mark does not count.
        budget.charge(1_000_000);
        let mark = budget.mark(&Wall);
        budget.spend(&Wall, mark);
        assert_eq!(budget.spent_ns, access);
        // 20 ms have passed: 34 µs is within 1% of them.
        assert!(!budget.overspent(&Wall));
        let mark = budget.mark(&Wall);
        budget.charge(1_000_000_000);
        budget.spend(&Wall, mark);
        assert!(budget.overspent(&Wall), "a second of calls is over 1% of the time since the range opened");
        let mut none = DriverBudget::new(0);
        let mark = none.mark(&Wall);
        none.charge(1);
        none.spend(&Wall, mark);
        assert!(none.overspent(&Wall), "a budget of nothing is spent by any work");
    }

    #[test]
    fn a_simulated_device_counts_its_own_model_which_the_charges_match() {
        let sim = Arc::new(SimDevice::new(SimDeviceConfig::default()));
        sim.advance_clock(1);
        let range = sim.reserve_range(64 * MIB).unwrap();
        sim.map(range, 4 * MIB).unwrap();
        let mut budget = DriverBudget::new(10);
        let driver_ns = |sim: &SimDevice| match sim.driver_clock() {
            DriverClock::Simulated { driver_ns, .. } => driver_ns,
            other => panic!("{other:?}"),
        };
        let mark = budget.mark(&*sim);
        let before = driver_ns(&sim);
        sim.remap(range, range + 32 * MIB, 4 * MIB).unwrap();
        budget.charge(budget.model().batched(&[2 * MIB, 2 * MIB], CostModel::remap, true));
        budget.spend(&*sim, mark);
        assert_eq!(budget.spent_ns, driver_ns(&sim) - before);
        assert_eq!(budget.spent_ns, budget.model().remap(2, 2 * MIB), "one access call for the batch");
    }
}
