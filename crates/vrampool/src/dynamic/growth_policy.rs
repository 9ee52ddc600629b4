//! How much a dynamic pool asks the device for when it must grow.

use crate::units::round_up_to;

/// The seed's growth rule, done right.
///
/// With `reserved` bytes held and a request needing `need` more, the new total is `reserved × factorᵏ` for
/// the smallest k ≥ 1 that makes the new memory hold the request. If that passes the cap but the request
/// still fits under it, the growth is clamped to the cap; if the request itself does not fit, there is no
/// growth (the pool then trims and retries, and finally reports out of memory). With nothing reserved, the
/// pool starts again at its initial size. Every growth is a multiple of `unit` bytes.
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
    pub fn growth(&self, reserved: u64, need: u64) -> Option<u64> {
        let need = round_up_to(need, self.unit)?;
        let room = self.cap.saturating_sub(reserved);
        if need > room {
            return None;
        }
        let target = if reserved == 0 {
            self.initial_size.max(need)
        } else {
            // Smallest k >= 1 with reserved * factor^k - reserved >= need, in closed form.
            let ratio = 1.0 + need as f64 / reserved as f64;
            let steps = (ratio.ln() / self.factor.ln()).ceil().max(1.0);
            let total = reserved as f64 * self.factor.powf(steps);
            // Guard against rounding just below the need.
            (total as u64).max(reserved + need)
        };
        let grow = round_up_to(target - reserved, self.unit).unwrap_or(u64::MAX);
        let room_in_units = room / self.unit * self.unit;
        Some(grow.min(room_in_units).max(need))
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
    fn small_factors_terminate() {
        let p = GrowthPolicy { factor: 1.000001, cap: u64::MAX / 4, ..policy() };
        let grow = p.growth(2 * MIB, 1 << 40).unwrap();
        assert!(grow >= 1 << 40);
    }
}
