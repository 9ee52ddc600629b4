//! Input quoted in error messages: its first characters only, so that a message stays one short line
//! however long the input that caused it.

/// The most characters of an input an error message quotes.
pub const MAX_EXCERPT_CHARS: usize = 100;

/// `text` as an error message quotes it: whole where it has at most [`MAX_EXCERPT_CHARS`] characters, else
/// its first ones followed by `...` and its length in bytes.
pub fn excerpt(text: &str) -> String {
    match text.char_indices().nth(MAX_EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}... ({} bytes)", &text[..cut], text.len()),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_quoted_whole_and_long_text_by_its_start() {
        assert_eq!(excerpt(""), "");
        assert_eq!(excerpt("cap=0.8"), "cap=0.8");
        let exact = "x".repeat(MAX_EXCERPT_CHARS);
        assert_eq!(excerpt(&exact), exact);
        let long = "y".repeat(1 << 20);
        assert_eq!(excerpt(&long), format!("{}... (1048576 bytes)", "y".repeat(MAX_EXCERPT_CHARS)));
        // Cut on a character boundary, never inside one.
        let wide = "é".repeat(MAX_EXCERPT_CHARS + 50);
        let bytes = 2 * (MAX_EXCERPT_CHARS + 50);
        assert_eq!(excerpt(&wide), format!("{}... ({bytes} bytes)", "é".repeat(MAX_EXCERPT_CHARS)));
    }
}
