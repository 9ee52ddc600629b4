//! Scales: how a value becomes a position on a chart's axis, and where the axis's ticks go.

/// A linear map from `domain` (values) onto `range` (pixels); the range may run backwards (a y axis).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinearScale {
    domain: (f64, f64),
    range: (f64, f64),
}

impl LinearScale {
    /// The scale taking `domain.0` to `range.0` and `domain.1` to `range.1`. An empty domain maps
    /// everything to `range.0`.
    pub fn new(domain: (f64, f64), range: (f64, f64)) -> Self {
        LinearScale { domain, range }
    }

    /// The position of `value`.
    pub fn map(&self, value: f64) -> f64 {
        let span = self.domain.1 - self.domain.0;
        if span.abs() < f64::EPSILON || !span.is_finite() {
            return self.range.0;
        }
        self.range.0 + (value - self.domain.0) / span * (self.range.1 - self.range.0)
    }
}

/// A map from `domain` (positive values) onto `range` that gives each doubling the same length.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogScale {
    linear: LinearScale,
}

impl LogScale {
    /// The scale taking `domain.0` to `range.0` and `domain.1` to `range.1`; both ends must be positive
    /// (values at or below zero are taken as the smallest positive float).
    pub fn new(domain: (f64, f64), range: (f64, f64)) -> Self {
        LogScale { linear: LinearScale::new((log2(domain.0), log2(domain.1)), range) }
    }

    /// The position of `value`.
    pub fn map(&self, value: f64) -> f64 {
        self.linear.map(log2(value))
    }
}

fn log2(value: f64) -> f64 {
    value.max(f64::MIN_POSITIVE).log2()
}

/// The smallest step of the form 1, 2, 2.5 or 5 times a power of ten that is at least `raw`.
pub fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&step| step >= raw * (1.0 - 1e-9))
        .unwrap_or(power * 10.0)
}

/// Ticks from 0 for an axis whose values reach `max`: about `count` of them, a [`nice_step`] apart, the
/// last at or above `max`. Returns the ticks; the last is the axis's end.
pub fn ticks_from_zero(max: f64, count: usize) -> Vec<f64> {
    let max = if max.is_finite() && max > 0.0 { max } else { 1.0 };
    let step = nice_step(max / count.max(1) as f64);
    let steps = (max / step - 1e-9).ceil().max(1.0) as usize;
    (0..=steps).map(|i| i as f64 * step).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_maps_ends_and_middle_even_backwards() {
        let y = LinearScale::new((0.0, 100.0), (200.0, 0.0));
        assert_eq!(y.map(0.0), 200.0);
        assert_eq!(y.map(100.0), 0.0);
        assert_eq!(y.map(25.0), 150.0);
        assert_eq!(LinearScale::new((5.0, 5.0), (10.0, 20.0)).map(7.0), 10.0);
    }

    #[test]
    fn log_gives_each_doubling_the_same_length() {
        let x = LogScale::new((256.0, 1024.0 * 1024.0), (0.0, 120.0));
        assert_eq!(x.map(256.0), 0.0);
        assert_eq!(x.map(1024.0 * 1024.0), 120.0);
        let octave = x.map(512.0) - x.map(256.0);
        assert!((octave - 10.0).abs() < 1e-9, "{octave}");
        assert!((x.map(8192.0) - x.map(4096.0) - octave).abs() < 1e-9);
    }

    #[test]
    fn steps_and_ticks_are_round() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.3), 2.0);
        assert_eq!(nice_step(2.2), 2.5);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(340.0), 500.0);
        assert_eq!(nice_step(2000.0), 2000.0);
        assert_eq!(ticks_from_zero(1685.0, 5), vec![0.0, 500.0, 1000.0, 1500.0, 2000.0]);
        assert_eq!(ticks_from_zero(10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        let empty = ticks_from_zero(0.0, 5);
        assert_eq!((empty.len(), empty.last().copied()), (6, Some(1.0)));
    }
}
