//! What the five command-line tools share beyond the schema: how a fatal error and its causes
//! are printed (`<tool>: error: …`, then `  caused by: …` per cause), when output is colored
//! (`--color auto|always|never`; auto colors a terminal unless `NO_COLOR` is set), and how a
//! distributed launch command is read ([`launcher`], one reading for `npu-train` and
//! `npu-verify`). It knows nothing of issues.

pub mod launcher;

use std::error::Error;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};

/// The `--color` choice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// Color when the stream is a terminal and `NO_COLOR` is not set.
    #[default]
    Auto,
    Always,
    Never,
}

impl ColorChoice {
    /// Whether to color what is written to `stream`.
    pub fn enabled(self, stream: &impl IsTerminal) -> bool {
        self.decide(stream.is_terminal(), std::env::var_os("NO_COLOR").is_some())
    }

    /// The decision for a stream that is (or is not) a terminal, with `NO_COLOR` set or not.
    pub fn decide(self, terminal: bool, no_color: bool) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => terminal && !no_color,
        }
    }
}

/// `<tool>: error: <error>` and one `  caused by: <cause>` line per source, each line ending in
/// a newline; `error` in bold red when `color` is set.
pub fn error_chain(tool: &str, error: &dyn Error, color: bool) -> String {
    let label = if color {
        "\x1b[1;31merror\x1b[0m"
    } else {
        "error"
    };
    let mut text = format!("{tool}: {label}: {error}\n");
    let mut cause = error.source();
    while let Some(c) = cause {
        let _ = writeln!(text, "  caused by: {c}");
        cause = c.source();
    }
    text
}

/// Write [`error_chain`] to stderr, colored as `color` decides for stderr.
pub fn report_error(tool: &str, error: &dyn Error, color: ColorChoice) {
    let stderr = std::io::stderr();
    let text = error_chain(tool, error, color.enabled(&stderr));
    // Nothing is left to tell the user if stderr itself is gone.
    let _ = stderr.lock().write_all(text.as_bytes());
}
