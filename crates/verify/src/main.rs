//! `npu-verify`: see the `verify` library for what it checks.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = verify::cli::Args::parse();
    match verify::run(&args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            cli_support::report_error("npu-verify", &e, args.color);
            ExitCode::from(2)
        }
    }
}
