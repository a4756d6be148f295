//! `cargo xtask` `bench_patches`.

use anyhow::{Result, bail};

#[derive(clap::Args, Default)]
pub struct Args {}

pub fn run(_args: &Args) -> Result<()> {
    bail!("bench_patches is not available yet")
}
