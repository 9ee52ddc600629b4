//! Text made safe to put inside HTML and SVG, as element content or as a quoted attribute value.

/// `text` with the characters that mean markup (`&`, `<`, `>`, `"`, `'`) written as character references.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// A config string, escaped, that may break across lines after its commas.
pub fn config_html(config: &str) -> String {
    escape(config).replace(',', ",<wbr>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_characters_become_references() {
        assert_eq!(
            escape(r#"<script src="x">'a' & b</script>"#),
            "&lt;script src=&quot;x&quot;&gt;&#39;a&#39; &amp; b&lt;/script&gt;"
        );
        assert_eq!(escape("size ≤ 4 MiB × 2"), "size ≤ 4 MiB × 2");
        assert_eq!(escape("&amp;"), "&amp;amp;");
        assert_eq!(config_html("strategy=fixed,x=<1>"), "strategy=fixed,<wbr>x=&lt;1&gt;");
    }
}
