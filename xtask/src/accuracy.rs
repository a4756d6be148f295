//! `cargo xtask` accuracy.

use anyhow::{Result, bail};

#[derive(clap::Args, Default)]
pub struct Args {}

pub fn run(_args: &Args) -> Result<()> {
    bail!("accuracy is not available yet")
}
