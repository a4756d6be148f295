//! `npu-train`: run a training command with the NPU environment, a log, and signal forwarding.

use std::process::ExitCode;
use train_wrap::cli;

fn main() -> ExitCode {
    ExitCode::from(match cli::parse() {
        Ok(args) => cli::run(&args),
        Err(code) => code,
    })
}
