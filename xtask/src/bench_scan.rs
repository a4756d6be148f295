//! `cargo xtask` `bench_scan`.

use anyhow::{Result, bail};

#[derive(clap::Args, Default)]
pub struct Args {}

pub fn run(_args: &Args) -> Result<()> {
    bail!("bench_scan is not available yet")
}
