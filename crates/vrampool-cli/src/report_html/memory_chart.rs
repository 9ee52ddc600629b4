//! The memory chart of one allocator on one trace: live bytes (an area) and reserved bytes (a line) over
//! the trace's events, with both peaks marked.

use vrampool::whole_mib;

use super::byte_units::ByteUnit;
use super::scale::{LinearScale, ticks_from_zero};
use super::svg::{Anchor, Svg};

/// Live and reserved bytes after some number of the trace's events.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryPoint {
    /// Events done (fractional where a replay's operations were placed between events).
    pub event: f64,
    /// Bytes live.
    pub live_bytes: u64,
    /// Bytes reserved.
    pub reserved_bytes: u64,
}

/// One allocator's memory along one trace, as the chart draws it.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryPanel {
    /// The allocator: `fixed`, `dynamic`, `hybrid` or `pytorch` (also the colour's class).
    pub allocator: String,
    /// A note after the name (the utilization).
    pub note: String,
    /// The points, in order of events.
    pub points: Vec<MemoryPoint>,
    /// The highest live bytes of the run (the points may fall between peaks).
    pub peak_live_bytes: u64,
    /// The highest reserved bytes of the run.
    pub peak_reserved_bytes: u64,
    /// Events in the trace: the x axis's end.
    pub events: u64,
}

/// The chart's size and margins.
const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 250.0;
const LEFT: f64 = 58.0;
const RIGHT: f64 = WIDTH - 16.0;
const TOP: f64 = 48.0;
const BOTTOM: f64 = HEIGHT - 36.0;

/// Room left above the highest value, as a share of it, for the peak labels.
const HEADROOM: f64 = 0.18;

/// A count of events written short: `950`, `20k`, `1.5M`.
pub fn short_count(value: f64) -> String {
    let (scaled, suffix) = if value >= 1e6 {
        (value / 1e6, "M")
    } else if value >= 1e3 {
        (value / 1e3, "k")
    } else {
        (value, "")
    };
    let text = format!("{scaled:.1}");
    format!("{}{suffix}", text.trim_end_matches(".0"))
}

/// A peak as the comparison table writes it (MiB), and in the axis's unit too where that is larger.
fn peak_size(bytes: u64, unit: ByteUnit) -> String {
    if unit.bytes > 1 << 20 {
        format!("{} ({} {})", whole_mib(bytes), unit.tick_label(bytes as f64), unit.name)
    } else {
        whole_mib(bytes)
    }
}

impl MemoryPanel {
    /// The y axis's end in bytes and its ticks (in bytes), in one unit.
    fn y_axis(&self) -> (ByteUnit, Vec<f64>) {
        let highest = self
            .points
            .iter()
            .map(|p| p.live_bytes.max(p.reserved_bytes))
            .chain([self.peak_live_bytes, self.peak_reserved_bytes])
            .max()
            .unwrap_or(0)
            .max(1);
        let unit = ByteUnit::for_axis(highest);
        let top_in_units = highest as f64 * (1.0 + HEADROOM) / unit.bytes as f64;
        let ticks = ticks_from_zero(top_in_units, 4).into_iter().map(|t| t * unit.bytes as f64).collect();
        (unit, ticks)
    }

    /// The chart as SVG.
    pub fn render(&self) -> String {
        let (unit, y_ticks) = self.y_axis();
        let y_end = y_ticks.last().copied().unwrap_or(1.0);
        let x_end = (self.events as f64).max(1.0);
        let x = LinearScale::new((0.0, x_end), (LEFT, RIGHT));
        let y = LinearScale::new((0.0, y_end), (BOTTOM, TOP));
        let label = format!(
            "{}: live and reserved bytes over {} events; peak live {}, peak reserved {}",
            self.allocator,
            self.events,
            whole_mib(self.peak_live_bytes),
            whole_mib(self.peak_reserved_bytes)
        );
        let mut svg = Svg::new(WIDTH, HEIGHT, &format!("memory s-{}", self.allocator), &label);
        svg.text((LEFT, 18.0), Anchor::Start, "panel-title", &self.allocator);
        svg.text((RIGHT, 18.0), Anchor::End, "panel-note", &self.note);
        self.legend(&mut svg);

        for &tick in &y_ticks {
            let py = y.map(tick);
            svg.line((LEFT, py), (RIGHT, py), "grid");
            svg.text((LEFT - 6.0, py + 4.0), Anchor::End, "tick", &unit.tick_label(tick));
        }
        svg.text((LEFT - 6.0, TOP - 10.0), Anchor::End, "axis-title", unit.name);
        for tick in ticks_from_zero(x_end, 5).into_iter().filter(|&t| t <= x_end) {
            let px = x.map(tick);
            svg.line((px, BOTTOM), (px, BOTTOM + 4.0), "axis");
            svg.text((px, BOTTOM + 16.0), Anchor::Middle, "tick", &short_count(tick));
        }
        svg.text((RIGHT, HEIGHT - 4.0), Anchor::End, "axis-title", "trace events");

        let live: Vec<(f64, f64)> = self.points.iter().map(|p| (x.map(p.event), y.map(p.live_bytes as f64))).collect();
        if let (Some(first), Some(last)) = (live.first(), live.last()) {
            let mut area = live.clone();
            area.push((last.0, BOTTOM));
            area.push((first.0, BOTTOM));
            svg.polygon(&area, "live-area");
        }
        let reserved: Vec<(f64, f64)> =
            self.points.iter().map(|p| (x.map(p.event), y.map(p.reserved_bytes as f64))).collect();
        svg.polyline(&reserved, "reserved");
        svg.line((LEFT, BOTTOM), (RIGHT, BOTTOM), "axis");
        svg.line((LEFT, TOP - 4.0), (LEFT, BOTTOM), "axis");

        let reserved_y = y.map(self.peak_reserved_bytes as f64);
        svg.line((LEFT, reserved_y), (RIGHT, reserved_y), "peak reserved-peak");
        svg.text(
            (RIGHT - 4.0, reserved_y - 5.0),
            Anchor::End,
            "peak-label reserved-label",
            &format!("peak reserved {}", peak_size(self.peak_reserved_bytes, unit)),
        );
        let live_y = y.map(self.peak_live_bytes as f64);
        svg.line((LEFT, live_y), (RIGHT, live_y), "peak live-peak");
        // Under its line, unless that would run into the x axis.
        let live_label_y = if live_y + 14.0 < BOTTOM - 2.0 { live_y + 14.0 } else { live_y - 5.0 };
        svg.text(
            (LEFT + 6.0, live_label_y),
            Anchor::Start,
            "peak-label live-label",
            &format!("peak live {}", peak_size(self.peak_live_bytes, unit)),
        );
        svg.finish()
    }

    fn legend(&self, svg: &mut Svg) {
        let y = 36.0;
        let mut at = LEFT;
        svg.line((at, y - 4.0), (at + 18.0, y - 4.0), "reserved");
        svg.text((at + 23.0, y), Anchor::Start, "legend", "reserved");
        at += 88.0;
        svg.rect((at, y - 10.0), (18.0, 10.0), "live-area", None);
        svg.text((at + 23.0, y), Anchor::Start, "legend", "live (requested)");
        at += 132.0;
        svg.line((at, y - 4.0), (at + 18.0, y - 4.0), "peak reserved-peak");
        svg.text((at + 23.0, y), Anchor::Start, "legend", "peaks");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn panel() -> MemoryPanel {
        MemoryPanel {
            allocator: "dynamic".into(),
            note: "utilization 0.500".into(),
            points: vec![
                MemoryPoint { event: 0.0, live_bytes: 0, reserved_bytes: 256 << 20 },
                MemoryPoint { event: 500.0, live_bytes: 700 << 20, reserved_bytes: 1 << 30 },
                MemoryPoint { event: 1000.0, live_bytes: 100 << 20, reserved_bytes: 1 << 30 },
            ],
            peak_live_bytes: 800 << 20,
            peak_reserved_bytes: 1600 << 20,
            events: 1000,
        }
    }

    #[test]
    fn counts_are_short() {
        assert_eq!(short_count(0.0), "0");
        assert_eq!(short_count(950.0), "950");
        assert_eq!(short_count(20_000.0), "20k");
        assert_eq!(short_count(1_500_000.0), "1.5M");
    }

    #[test]
    fn the_axis_holds_the_peaks_with_room_for_labels() {
        let (unit, ticks) = panel().y_axis();
        assert_eq!(unit.name, "MiB");
        // 1600 MiB and 18% of headroom: ticks every 500 MiB up to 2000 MiB.
        let mib = (1u64 << 20) as f64;
        assert_eq!(ticks, vec![0.0, 500.0 * mib, 1000.0 * mib, 1500.0 * mib, 2000.0 * mib]);
    }

    #[test]
    fn the_chart_draws_the_points_and_labels_the_peaks() {
        let svg = panel().render();
        // x: 0..1000 events onto 58..624; y: 0..2000 MiB onto 214..48.
        let y = |mib: f64| 214.0 - mib / 2000.0 * 166.0;
        let reserved = format!(
            "class=\"reserved\" points=\"58,{} 341,{} 624,{}\"",
            super::super::svg::number(y(256.0)),
            super::super::svg::number(y(1024.0)),
            super::super::svg::number(y(1024.0))
        );
        assert!(svg.contains(&reserved), "{reserved} in {svg}");
        assert!(svg.contains(">peak reserved 1,600 MiB</text>"), "{svg}");
        assert!(svg.contains(">peak live 800 MiB</text>"), "{svg}");
        assert!(svg.contains("class=\"memory s-dynamic\""), "{svg}");
        assert!(svg.contains(">1500</text>") && svg.contains(">MiB</text>"), "{svg}");
        assert!(svg.contains(">500</text>") && svg.contains(">1k</text>"), "{svg}");
        let peak_y = super::super::svg::number(y(1600.0));
        assert!(svg.contains(&format!("class=\"peak reserved-peak\" x1=\"58\" y1=\"{peak_y}\"")), "{svg}");
    }
}
