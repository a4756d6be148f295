//! `npu-assets`: list, show and install the files npu-patcher ships, and draft the summary.

use clap::Parser;
use patch_assets::cli::{Cli, run};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let color = cli.color;
    ExitCode::from(match run(cli.command) {
        Ok(code) => code,
        Err(failure) => failure.report(color),
    })
}
