//! `npu-verify`: see the `verify` library for what it checks.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = verify::cli::Args::parse();
    match verify::run(&args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            #[allow(clippy::print_stderr, reason = "the error is the program's last word")]
            {
                eprintln!("npu-verify: error: {e}");
                let mut source = std::error::Error::source(&e);
                while let Some(cause) = source {
                    eprintln!("  caused by: {cause}");
                    source = cause.source();
                }
            }
            ExitCode::from(2)
        }
    }
}
