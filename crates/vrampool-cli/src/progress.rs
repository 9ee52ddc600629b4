//! Progress on stderr while a long command runs.

use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub fn bar(total: u64, message: &str) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{msg:>24} [{bar:40}] {pos}/{len} replays ({elapsed})")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_message(message.to_string());
    bar
}
