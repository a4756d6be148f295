//! `cargo xtask dist`: the release bundle.

use anyhow::{Result, bail};
use std::path::PathBuf;

#[derive(clap::Args, Default)]
pub struct Args {}

pub fn run(_args: &Args) -> Result<PathBuf> {
    bail!("dist is not available yet")
}
