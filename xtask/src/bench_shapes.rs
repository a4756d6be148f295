//! `cargo xtask bench shapes`: `npu-verify --shapes-only` on VLA-shaped programs, as printed figures.
//!
//! Builds `npu-verify` and runs `xtask/python/bench_shapes.py` with the cached test venv: one training step of
//! `xtask/python/vla_shapes_train.py` (OpenVLA-7B's shapes, a 1.1B model, a tiny one) pre-flighted shapes-only,
//! with its wall time, peak RSS and memory report; the tiny one also runs in full, to compare the peaks.
//! Targets (issue 44): the 7B step within 60 s and 4 GB of RSS on 2 cores, the 1B within 20 s. Nothing is
//! asserted: a benchmark prints figures.

use anyhow::{Context, Result, bail};
use std::path::PathBuf;

#[derive(clap::Args, Default)]
#[command(
    after_help = "Examples:\n  cargo xtask bench shapes\n  cargo xtask bench shapes --sizes 1b\n  \
                        cargo xtask bench shapes --json > shapes.json"
)]
pub struct Args {
    /// Print the figures as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// The models to pre-flight, comma-separated: `7b`, `1b`, `tiny` (tiny also runs in full).
    #[arg(long, default_value = "7b,1b,tiny")]
    sizes: String,
    /// The card's HBM in GB for the fits / does-not-fit line.
    #[arg(long, default_value_t = 64.0)]
    hbm_gb: f64,
    /// Build npu-verify with the release profile (the harness's Python dominates either way).
    #[arg(long)]
    release: bool,
}

pub fn run(args: &Args) -> Result<()> {
    let root = crate::project_root();
    let python = crate::venv::ensure(&crate::venv::default_requirements())?;
    let verify = verify_binary(args.release)?;
    let script = root.join("xtask").join("python").join("bench_shapes.py");
    let mut command_line = vec![
        script.into_os_string(),
        "--verify".into(),
        verify.into_os_string(),
        "--python".into(),
        python.clone().into_os_string(),
        "--sizes".into(),
        args.sizes.clone().into(),
        "--hbm-gb".into(),
        args.hbm_gb.to_string().into(),
    ];
    if args.json {
        command_line.push("--json".into());
    }
    let status = duct::cmd(&python, command_line)
        .dir(&root)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env(
            "NPU_PATCHER_EMULATOR_DIR",
            root.join("assets").join("emulator"),
        )
        .unchecked()
        .run()
        .with_context(|| format!("cannot run {}", python.display()))?
        .status;
    if !status.success() {
        bail!("xtask/python/bench_shapes.py failed ({status})");
    }
    Ok(())
}

pub(crate) fn verify_binary(release: bool) -> Result<PathBuf> {
    let root = crate::project_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut build = vec!["build", "--quiet", "-p", "verify"];
    if release {
        build.push("--release");
    }
    eprintln!("xtask: building npu-verify");
    duct::cmd(&cargo, &build)
        .dir(&root)
        .run()
        .context("cargo build -p verify failed")?;
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let target = if target.is_relative() {
        root.join(target)
    } else {
        target
    };
    let binary = target
        .join(if release { "release" } else { "debug" })
        .join("npu-verify");
    if !binary.exists() {
        bail!("the npu-verify binary is not at {}", binary.display());
    }
    Ok(binary)
}
