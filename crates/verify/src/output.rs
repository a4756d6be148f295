//! The one place that writes to the terminal: the report on stdout, progress on stderr.

use std::io::Write;

/// Write the product to stdout; a closed pipe is not an error.
pub fn stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// A progress line on stderr, prefixed with the tool name.
#[allow(clippy::print_stderr, reason = "progress goes to stderr by design")]
pub fn progress(quiet: bool, message: &str) {
    if !quiet {
        eprintln!("npu-verify: {message}");
    }
}
