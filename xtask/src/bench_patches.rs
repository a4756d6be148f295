//! `cargo xtask bench patches`: runtime patch overhead and the emulated device's cost, as printed figures.
//!
//! Runs `xtask/python/bench_patches.py` with the cached test venv: the patcher's overhead on a CPU training
//! step of a small transformer policy (target <= 3%), builtin `min`/`max` with the patch (target <= 0.3 us
//! extra per call), and the emulated `npu` device's per-op overhead and step time vs. CPU. Nothing is asserted:
//! a benchmark prints figures.

use anyhow::{Context, Result, bail};

#[derive(clap::Args, Default)]
#[command(
    after_help = "Examples:\n  cargo xtask bench patches\n  cargo xtask bench patches --quick\n  \
                        cargo xtask bench patches --json > patches.json"
)]
pub struct Args {
    /// Print the figures as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Fewer repetitions: a smoke run with noisier figures.
    #[arg(long)]
    quick: bool,
    /// Leave out the emulated-device figures.
    #[arg(long)]
    no_emulator: bool,
}

pub fn run(args: &Args) -> Result<()> {
    let root = crate::project_root();
    let python = crate::venv::ensure(&crate::venv::default_requirements())?;
    let script = root.join("xtask").join("python").join("bench_patches.py");
    let mut command_line = vec![script.into_os_string()];
    for (on, flag) in [
        (args.json, "--json"),
        (args.quick, "--quick"),
        (args.no_emulator, "--no-emulator"),
    ] {
        if on {
            command_line.push(flag.into());
        }
    }
    // No `__pycache__` under assets/: everything there is embedded in the binaries.
    let status = duct::cmd(&python, command_line)
        .dir(&root)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .unchecked()
        .run()
        .with_context(|| format!("cannot run {}", python.display()))?
        .status;
    if !status.success() {
        bail!("xtask/python/bench_patches.py failed ({status})");
    }
    Ok(())
}
