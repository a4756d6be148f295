//! `cargo xtask bench parity`: what `npu-verify --parity --steps 3 --emulate-npu` costs against a
//! plain `--pipeline --steps 3 --emulate-npu` run of the same program, as printed figures.
//!
//! Three programs: the demo's port (`assets/demo/tiny-vla-fixed`, `--config configs/train.yaml`),
//! the small diffusion policy of the parity tests (`crates/verify/tests/parity/train.py`) and the
//! public denoising-diffusion-pytorch 1D model of `parity_public_emulated.rs`, each in a
//! fresh copy with `migrate_to_cloudrobo/` set up as the workflow's step 1 writes it. Goal: the
//! parity run within 3x the pipeline run. Nothing is asserted: a benchmark prints figures.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args, Default)]
#[command(
    after_help = "Examples:\n  cargo xtask bench parity\n  cargo xtask bench parity --repeat 3\n  \
                        cargo xtask bench parity --json > parity.json"
)]
pub struct Args {
    /// Print the figures as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Runs of each command; the fastest counts.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10))]
    repeat: u32,
    /// Build npu-verify with the release profile (the harness's Python dominates either way).
    #[arg(long)]
    release: bool,
}

struct Program {
    name: &'static str,
    root: PathBuf,
    args: Vec<String>,
    env: Vec<(&'static str, &'static str)>,
}

pub(crate) fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == "__pycache__" || name == "outputs" {
            continue;
        }
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &to.join(&name))?;
        } else {
            std::fs::copy(entry.path(), to.join(&name))?;
        }
    }
    Ok(())
}

/// `migrate_to_cloudrobo/` with `env_npu.sh`, `train.sh` and `runtime_patches.py`.
pub(crate) fn set_up_migrate(assets: &Path, root: &Path) -> Result<()> {
    let migrate = root.join("migrate_to_cloudrobo");
    std::fs::create_dir_all(&migrate)?;
    for (from, to) in [
        ("templates/env_npu.sh", "env_npu.sh"),
        ("templates/train.sh", "train.sh"),
        ("runtime_patches.py", "runtime_patches.py"),
    ] {
        std::fs::copy(assets.join(from), migrate.join(to))
            .with_context(|| format!("cannot copy assets/{from}"))?;
    }
    Ok(())
}

fn programs(dir: &Path) -> Result<Vec<Program>> {
    let root = crate::project_root();
    let assets = root.join("assets");
    let demo = dir.join("tiny-vla-fixed");
    copy_tree(&assets.join("demo").join("tiny-vla-fixed"), &demo)?;
    set_up_migrate(&assets, &demo)?;
    let policy = dir.join("policy");
    std::fs::create_dir_all(&policy)?;
    std::fs::copy(
        root.join("crates/verify/tests/parity/train.py"),
        policy.join("train.py"),
    )?;
    set_up_migrate(&assets, &policy)?;
    Ok(vec![
        Program {
            name: "demo tiny-vla-fixed",
            root: demo,
            args: vec!["--config".into(), "configs/train.yaml".into()],
            env: Vec::new(),
        },
        Program {
            name: "diffusion policy (parity tests)",
            root: policy,
            args: vec!["--".into(), "python".into(), "train.py".into()],
            env: Vec::new(),
        },
        Program {
            name: "denoising-diffusion-pytorch 1D",
            root: public_diffusion(&assets, dir)?,
            args: vec!["--".into(), "python".into(), "train.py".into()],
            // The port that matches (the parity tests': float64 kept for the schedule).
            env: vec![("NPU_PATCHES_DISABLE", "Float64To32")],
        },
    ])
}

/// denoising-diffusion-pytorch's `GaussianDiffusion1D` and `Unet1D` trained by the parity tests'
/// loop (`tests/parity/public/ddpm1d_train.py`), as `parity_public_emulated.rs` sets it up.
fn public_diffusion(assets: &Path, dir: &Path) -> Result<PathBuf> {
    public_project(
        assets,
        dir,
        &PublicProgram {
            dist: "denoising-diffusion-pytorch-2.3.4",
            package: "denoising_diffusion_pytorch",
            files: &["denoising_diffusion_pytorch_1d.py", "version.py"],
            program: "ddpm1d_train.py",
        },
    )
}

/// A public project's files and the training loop of ours that runs them
/// (`crates/verify/tests/parity/public/<program>`).
pub(crate) struct PublicProgram {
    /// The extracted distribution, `<name>-<version>`.
    pub dist: &'static str,
    /// Its package directory.
    pub package: &'static str,
    /// The package's files the program needs.
    pub files: &'static [&'static str],
    pub program: &'static str,
}

/// The project `dir/<package>/` that `parity_public_emulated.rs` sets up: the package's `files`
/// (with an empty `__init__.py`, whose own imports need torchvision), einops, the training loop
/// as `train.py` and `migrate_to_cloudrobo/`.
pub(crate) fn public_project(assets: &Path, dir: &Path, p: &PublicProgram) -> Result<PathBuf> {
    let public = crate::parity_public::ensure_all()?;
    let project = dir.join(p.package);
    let package = project.join(p.package);
    std::fs::create_dir_all(&package)?;
    let source = public.join(p.dist).join(p.package);
    for file in p.files {
        std::fs::copy(source.join(file), package.join(file))
            .with_context(|| format!("cannot copy {}/{file}", p.dist))?;
    }
    std::fs::write(package.join("__init__.py"), "")?;
    copy_tree(&public.join("einops-0.8.2/einops"), &project.join("einops"))?;
    std::fs::copy(
        crate::project_root()
            .join("crates/verify/tests/parity/public")
            .join(p.program),
        project.join("train.py"),
    )?;
    set_up_migrate(assets, &project)?;
    Ok(project)
}

/// The fastest of `repeat` runs of `npu-verify <root> <mode…> <args…>`, in seconds, and the last
/// exit code.
fn time(
    verify: &Path,
    python: &Path,
    program: &Program,
    mode: &[&str],
    repeat: u32,
) -> Result<(f64, Option<i32>)> {
    let mut best = f64::INFINITY;
    let mut code = None;
    for _ in 0..repeat {
        let mut args: Vec<String> = vec![
            program.root.display().to_string(),
            "--quiet".into(),
            "--format".into(),
            "json".into(),
            "--python".into(),
            python.display().to_string(),
            "--emulate-npu".into(),
            "--steps".into(),
            "3".into(),
            "--timeout".into(),
            "600".into(),
        ];
        args.extend(mode.iter().map(|s| (*s).to_owned()));
        args.extend(program.args.iter().cloned());
        let started = Instant::now();
        let mut cmd = duct::cmd(verify, &args).env_remove("ASCEND_RT_VISIBLE_DEVICES");
        for (key, value) in &program.env {
            cmd = cmd.env(key, value);
        }
        let out = cmd
            .stdout_null()
            .stderr_null()
            .unchecked()
            .run()
            .with_context(|| format!("cannot run {}", verify.display()))?;
        best = best.min(started.elapsed().as_secs_f64());
        code = out.status.code();
    }
    Ok((best, code))
}

pub fn run(args: &Args) -> Result<()> {
    let python = crate::venv::ensure(&crate::venv::default_requirements())?;
    let verify = crate::bench_shapes::verify_binary(args.release)?;
    let dir = tempfile::tempdir()?;
    let mut rows = Vec::new();
    for program in programs(dir.path())? {
        eprintln!("xtask: {}: --pipeline", program.name);
        let (pipeline, pipeline_code) =
            time(&verify, &python, &program, &["--pipeline"], args.repeat)?;
        eprintln!("xtask: {}: --parity", program.name);
        let (parity, parity_code) = time(&verify, &python, &program, &["--parity"], args.repeat)?;
        rows.push(serde_json::json!({
            "program": program.name,
            "pipeline_s": pipeline, "pipeline_exit": pipeline_code,
            "parity_s": parity, "parity_exit": parity_code,
            "ratio": parity / pipeline,
        }));
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"goal_ratio": 3.0, "runs": rows}))?
        );
        return Ok(());
    }
    println!(
        "npu-verify --parity --steps 3 --emulate-npu against --pipeline --steps 3 --emulate-npu (fastest of {}; goal: <= 3x)",
        args.repeat
    );
    println!(
        "{:<34} {:>11} {:>10} {:>7}  exit (pipeline/parity)",
        "program", "pipeline s", "parity s", "ratio"
    );
    for row in &rows {
        println!(
            "{:<34} {:>11.1} {:>10.1} {:>6.2}x  {}/{}",
            row["program"].as_str().unwrap_or("?"),
            row["pipeline_s"].as_f64().unwrap_or(f64::NAN),
            row["parity_s"].as_f64().unwrap_or(f64::NAN),
            row["ratio"].as_f64().unwrap_or(f64::NAN),
            row["pipeline_exit"],
            row["parity_exit"],
        );
    }
    Ok(())
}
