//! `cargo xtask tidy`: repository consistency checks.

use anyhow::{Result, bail};

pub fn run() -> Result<()> {
    bail!("tidy is not available yet")
}
