//! An inline SVG picture written element by element, every text escaped, every shape styled by a class of
//! the page's stylesheet.

use super::escape::escape;

/// Where a text sits relative to its anchor point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anchor {
    /// The text starts at the point.
    Start,
    /// The text is centred on the point.
    Middle,
    /// The text ends at the point.
    End,
}

impl Anchor {
    fn name(self) -> &'static str {
        match self {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        }
    }
}

/// An SVG picture being written: `width` × `height` user units, drawn at that size in CSS pixels (smaller
/// where the page is narrower).
#[derive(Debug)]
pub struct Svg {
    out: String,
}

/// A coordinate with at most one decimal, without a trailing `.0` (keeps the page small).
pub fn number(value: f64) -> String {
    let value = if value.is_finite() { value } else { 0.0 };
    let text = format!("{value:.1}");
    match text.strip_suffix(".0") {
        Some("-0") => "0".into(),
        Some(whole) => whole.into(),
        None => text,
    }
}

impl Svg {
    /// A picture of `width` × `height`, with `class` on the `svg` element and `label` read out by screen
    /// readers.
    pub fn new(width: f64, height: f64, class: &str, label: &str) -> Self {
        let (w, h) = (number(width), number(height));
        Svg {
            out: format!(
                "<svg class=\"{}\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"{}\">\n",
                escape(class),
                escape(label)
            ),
        }
    }

    /// A straight line.
    pub fn line(&mut self, from: (f64, f64), to: (f64, f64), class: &str) {
        self.out.push_str(&format!(
            "<line class=\"{}\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>\n",
            escape(class),
            number(from.0),
            number(from.1),
            number(to.0),
            number(to.1)
        ));
    }

    /// A rectangle with its top left corner at `(x, y)`, and a tooltip where `title` is given.
    pub fn rect(&mut self, origin: (f64, f64), size: (f64, f64), class: &str, title: Option<&str>) {
        self.rounded_rect(origin, size, 0.0, class, title);
    }

    /// A rectangle with corners rounded by `radius`.
    pub fn rounded_rect(
        &mut self,
        (x, y): (f64, f64),
        (width, height): (f64, f64),
        radius: f64,
        class: &str,
        title: Option<&str>,
    ) {
        let mut shape = format!(
            "<rect class=\"{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"",
            escape(class),
            number(x),
            number(y),
            number(width.max(0.0)),
            number(height.max(0.0)),
        );
        if radius > 0.0 {
            shape.push_str(&format!(" rx=\"{}\"", number(radius)));
        }
        self.out.push_str(&shape);
        match title {
            Some(title) => self.out.push_str(&format!("><title>{}</title></rect>\n", escape(title))),
            None => self.out.push_str("/>\n"),
        }
    }

    /// A line through `points`, in order. Points that change nothing at the written precision are left
    /// out: repeats, and the middle points of a horizontal run.
    pub fn polyline(&mut self, points: &[(f64, f64)], class: &str) {
        self.points("polyline", points, class);
    }

    /// A closed shape through `points`, left out as for [`Svg::polyline`].
    pub fn polygon(&mut self, points: &[(f64, f64)], class: &str) {
        self.points("polygon", points, class);
    }

    fn points(&mut self, element: &str, points: &[(f64, f64)], class: &str) {
        let mut written: Vec<(String, String)> = points.iter().map(|&(x, y)| (number(x), number(y))).collect();
        written.dedup();
        let mut list = String::with_capacity(written.len() * 12);
        for (i, (x, y)) in written.iter().enumerate() {
            let flat_before = i > 0 && written[i - 1].1 == *y;
            let flat_after = written.get(i + 1).is_some_and(|next| next.1 == *y);
            if flat_before && flat_after {
                continue;
            }
            if !list.is_empty() {
                list.push(' ');
            }
            list.push_str(&format!("{x},{y}"));
        }
        self.out.push_str(&format!("<{element} class=\"{}\" points=\"{list}\"/>\n", escape(class)));
    }

    /// One line of text with its baseline at `(x, y)`.
    pub fn text(&mut self, (x, y): (f64, f64), anchor: Anchor, class: &str, text: &str) {
        self.out.push_str(&format!(
            "<text class=\"{}\" x=\"{}\" y=\"{}\" text-anchor=\"{}\">{}</text>\n",
            escape(class),
            number(x),
            number(y),
            anchor.name(),
            escape(text)
        ));
    }

    /// Lines of text, the first baseline at `(x, y)`, each next one `spacing` lower.
    pub fn text_lines(&mut self, (x, y): (f64, f64), spacing: f64, anchor: Anchor, class: &str, lines: &[String]) {
        for (i, line) in lines.iter().enumerate() {
            self.text((x, y + spacing * i as f64), anchor, class, line);
        }
    }

    /// An invisible rectangle over `origin` and `size` that shows `title` when the pointer rests on it.
    pub fn hover(&mut self, origin: (f64, f64), size: (f64, f64), title: &str) {
        self.rect(origin, size, "hover", Some(title));
    }

    /// The picture's markup.
    pub fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_short() {
        assert_eq!(number(12.0), "12");
        assert_eq!(number(12.34), "12.3");
        assert_eq!(number(-0.01), "0");
        assert_eq!(number(f64::NAN), "0");
    }

    #[test]
    fn text_is_escaped_and_points_that_change_nothing_dropped() {
        let mut svg = Svg::new(100.0, 50.0, "chart", "a <b>");
        svg.text((1.0, 2.0), Anchor::End, "label", "x < y & \"z\"");
        svg.polyline(&[(0.0, 0.0), (0.01, 0.0), (1.0, 1.0)], "line");
        svg.polygon(&[(0.0, 5.0), (1.0, 5.0), (2.0, 5.0), (3.0, 5.0), (3.0, 0.0), (0.0, 0.0)], "area");
        svg.rect((0.0, 0.0), (2.0, -3.0), "bar", Some("<tip>"));
        let out = svg.finish();
        assert!(out.starts_with("<svg class=\"chart\" width=\"100\" height=\"50\" viewBox=\"0 0 100 50\""), "{out}");
        assert!(out.contains("aria-label=\"a &lt;b&gt;\""), "{out}");
        assert!(out.contains(">x &lt; y &amp; &quot;z&quot;</text>"), "{out}");
        assert!(out.contains("text-anchor=\"end\""), "{out}");
        assert!(out.contains("points=\"0,0 1,1\""), "{out}");
        assert!(out.contains("class=\"area\" points=\"0,5 3,5 3,0 0,0\""), "a flat run keeps its ends: {out}");
        assert!(out.contains("height=\"0\""), "{out}");
        assert!(out.contains("<title>&lt;tip&gt;</title>"), "{out}");
        assert!(out.ends_with("</svg>\n"));
        assert!(!out.contains("http"), "inline SVG in HTML needs no namespace: {out}");
    }
}
