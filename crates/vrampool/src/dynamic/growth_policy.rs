//! How much a dynamic pool asks the device for when it must grow.

use crate::units::round_up_to;

/// The seed's growth rule, done right.
///
/// With `reserved` bytes held and a request needing `need` more, the new total is `reserved × factorᵏ` for
/// the smallest k ≥ 1 that makes the new memory hold the request. If that passes the cap but the request
/// still fits under it, the growth is clamped to the cap; if the request itself does not fit, there is no
/// growth (the pool then trims and retries, and finally reports out of memory). With nothing reserved, the
/// pool starts again at its initial size. Every growth is a multiple of `unit` bytes: the factor's growth
/// rounded down to a unit, and never less than the request rounded up to one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GrowthPolicy {
    /// Bytes to reserve when nothing is reserved.
    pub initial_size: u64,
    /// The multiplier per step, above 1.0.
    pub factor: f64,
    /// The most the pool may hold.
    pub cap: u64,
    /// Every growth is a multiple of this (the device's granularity).
    pub unit: u64,
}

impl GrowthPolicy {
    /// The bytes to add, or `None` when even the request would pass the cap.
    pub fn growth(&self, reserved: u64, request: u64) -> Option<u64> {
        let need = round_up_to(request, self.unit)?;
        let room = self.cap.saturating_sub(reserved);
        if need > room {
            return None;
        }
        let target = if reserved == 0 {
            self.initial_size.max(need)
        } else {
            // Smallest k >= 1 with reserved * factor^k - reserved >= need, in closed form (the epsilon keeps
            // an exact power, 2.0000000000000004 steps, from counting as 3).
            let ratio = 1.0 + request as f64 / reserved as f64;
            let steps = (ratio.ln() / self.factor.ln() - 1e-9).ceil().max(1.0);
            let total = reserved as f64 * self.factor.powf(steps);
            // Guard against rounding just below the need.
            (total as u64).max(reserved + request)
        };
        let grow = (target - reserved) / self.unit * self.unit;
        let room_in_units = room / self.unit * self.unit;
        Some(grow.min(room_in_units).max(need))
    }

    /// The bytes one growth ahead of need adds with `reserved` bytes held: one step of the factor
    /// (`reserved × (factor − 1)`, at least one unit, rounded up to units), or `None` where a whole step
    /// would pass the cap.
    pub fn step_ahead(&self, reserved: u64) -> Option<u64> {
        let step = ((reserved as f64 * (self.factor - 1.0)) as u64).max(self.unit);
        self.growth(reserved, step).filter(|&bytes| bytes > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::MIB;

    fn policy() -> GrowthPolicy {
        GrowthPolicy { initial_size: 256 * MIB, factor: 1.5, cap: 1000 * MIB, unit: 2 * MIB }
    }

    #[test]
    fn multiplies_until_the_request_fits() {
        let p = policy();
        assert_eq!(p.growth(256 * MIB, MIB), Some(128 * MIB), "one step: 256 -> 384");
        // 256 -> 384 -> 576: 320 MiB new holds 300 MiB.
        assert_eq!(p.growth(256 * MIB, 300 * MIB), Some(320 * MIB));
        // An exact power: 4 -> 9 adds 5 MiB, rounded down to 4, but never below the 6 MiB request.
        let p4 = GrowthPolicy { initial_size: 4 * MIB, ..p };
        assert_eq!(p4.growth(4 * MIB, 5 * MIB), Some(6 * MIB));
        assert_eq!(p4.growth(4 * MIB, 4 * MIB), Some(4 * MIB));
        assert_eq!(p4.growth(10 * MIB, 10 * MIB), Some(12 * MIB));
        assert_eq!(p.growth(0, MIB), Some(256 * MIB), "starts again at the initial size");
        assert_eq!(p.growth(0, 300 * MIB), Some(300 * MIB));
    }

    #[test]
    fn clamps_to_the_cap_when_the_request_fits() {
        let p = policy();
        // 800 * 1.5 = 1200 passes the 1000 cap; the 100 MiB request fits under it.
        assert_eq!(p.growth(800 * MIB, 100 * MIB), Some(200 * MIB));
        assert_eq!(p.growth(800 * MIB, 201 * MIB), None);
        assert_eq!(p.growth(0, u64::MAX), None);
    }

    #[test]
    fn a_step_ahead_is_one_step_of_the_factor_within_the_cap() {
        let p = policy();
        assert_eq!(p.step_ahead(256 * MIB), Some(128 * MIB), "256 -> 384");
        assert_eq!(p.step_ahead(MIB), Some(2 * MIB), "at least one unit");
        assert_eq!(p.step_ahead(600 * MIB), Some(300 * MIB));
        assert_eq!(p.step_ahead(700 * MIB), None, "a step of 350 MiB would pass the cap");
        assert_eq!(p.step_ahead(1000 * MIB), None, "at the cap");
        assert_eq!(p.step_ahead(0), Some(256 * MIB), "nothing held: the initial size");
    }

    #[test]
    fn small_factors_terminate() {
        let p = GrowthPolicy { factor: 1.000001, cap: u64::MAX / 4, ..policy() };
        let grow = p.growth(2 * MIB, 1 << 40).unwrap();
        assert!(grow >= 1 << 40);
    }
}
