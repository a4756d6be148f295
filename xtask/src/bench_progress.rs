//! `cargo xtask` `bench_progress`.

use anyhow::{Result, bail};

#[derive(clap::Args, Default)]
pub struct Args {}

pub fn run(_args: &Args) -> Result<()> {
    bail!("bench_progress is not available yet")
}
