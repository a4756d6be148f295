//! `cargo xtask`: project automation (tests, benchmarks, the release bundle, tidy checks).
//!
//! Each subcommand lives in its own module; this file only dispatches.

// A developer tool: its whole output is progress and figures on the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod accuracy;
mod bench_parity;
mod bench_patches;
mod bench_progress;
mod bench_scan;
mod bench_shapes;
mod codegen;
mod conformance;
mod corpus;
mod dist;
mod fix_check;
mod matrix;
mod parity_public;
mod shipped;
mod static_measured;
mod stress_exit;
mod support_table;
mod test;
mod tidy;
mod torch_npu;
mod torch_npu_tests;
mod venv;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "npu-patcher project automation")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every check and test from a fresh clone: fmt, clippy, cargo tests, the Python venv and pytest.
    Test(test::Args),
    /// Create (or reuse) the cached Python test venv and print its interpreter path
    /// (`--torch X.Y.Z`: the torch-matrix venv of that torch).
    Venv(VenvArgs),
    /// Only the torch matrix of `cargo xtask test` (default: torch 2.1.0 and 2.6.0), then write the
    /// support tables from its results.
    Matrix(MatrixArgs),
    /// Render the torch support tables of docs/runtime-patches.md and the emulator README from
    /// tests/torch-matrix/results (`--check`: fail if they are stale).
    SupportTable(support_table::Args),
    /// Benchmarks that print figures.
    #[command(subcommand)]
    Bench(Bench),
    /// Precision and recall of every rule over the labelled fixture projects (or, with
    /// `--corpus`, over the hand-labelled real-code corpus).
    Accuracy(accuracy::Args),
    /// Build the release bundle under target/dist/.
    Dist(dist::Args),
    /// Repository consistency checks (also run as a test).
    Tidy,
    /// Download (cached, sha256-checked) the pinned torch-npu wheels of `torch-npu/wheels.json`
    /// and extract their Python sources; print each version and its directory.
    TorchNpu(torch_npu::Args),
    /// Download (cached, sha256-checked) the public projects the `--parity` tests port and print
    /// their directory (`export NPU_PATCHER_PARITY_PUBLIC=$(cargo xtask parity-public)`).
    ParityPublic,
    /// Run the CPU tests of pinned public projects before and after `npu-scan --fix` and
    /// `--fix --unsafe-fixes`, and their fixed entry points on the emulated npu.
    FixCheck(fix_check::Args),
    /// The emulated npu on real projects' test suites: each suite on the CPU and on the npu with
    /// the real `transfer_to_npu`, every difference classified (conformance/README.md).
    Conformance(conformance::Args),
    /// `torch_npu`'s own tests of `transfer_to_npu` on the emulated npu, with the stand-in and with
    /// the real module of the paired wheel (conformance/README.md).
    TorchNpuTests(torch_npu_tests::Args),
    /// For the public programs the `--parity` tests run: which labelled problems `npu-scan` finds,
    /// which `npu-verify --pipeline --record-issues` measures, and which neither finds.
    StaticMeasured(static_measured::Args),
    /// Fresh interpreters that install the emulated npu, train one step and exit, per torch
    /// version: counts the ones that abort at exit, hang or lose output (default 200 per version).
    StressExit(stress_exit::Args),
    /// Generate the scanner's `transfer_to_npu` table from `torch-npu/transfer_to_npu.json`
    /// (`--check`: fail if the committed file is stale).
    Codegen(codegen::Args),
}

#[derive(clap::Args)]
struct VenvArgs {
    /// The torch version of a torch-matrix venv (default: the test venv of requirements-test.txt).
    #[arg(long = "torch", value_name = "X.Y.Z")]
    torch: Option<String>,
}

#[derive(clap::Args)]
struct MatrixArgs {
    /// A torch version to run (repeatable); default: the matrix of `cargo xtask test`.
    #[arg(long = "torch", value_name = "X.Y.Z")]
    torch: Vec<String>,
}

#[derive(Subcommand)]
enum Bench {
    /// npu-progress on a generated issues.json with many issues.
    Progress(bench_progress::Args),
    /// The scanner on a large real Python tree, against `CPython`'s `ast.parse`.
    Scan(bench_scan::Args),
    /// Runtime patch overhead and emulated device cost.
    Patches(bench_patches::Args),
    /// `npu-verify --shapes-only` on VLA-shaped programs up to OpenVLA-7B's shapes.
    Shapes(bench_shapes::Args),
    /// `npu-verify --parity --steps 3` against a plain `--pipeline` run of the same program.
    Parity(bench_parity::Args),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Test(args) => test::run(&args),
        Command::Venv(args) => {
            let requirements = match &args.torch {
                Some(version) => venv::requirements_for_torch(version)?,
                None => venv::default_requirements(),
            };
            let python = venv::ensure(&requirements)?;
            println!("{}", python.display());
            Ok(())
        }
        Command::Bench(Bench::Progress(args)) => bench_progress::run(&args),
        Command::Bench(Bench::Scan(args)) => bench_scan::run(&args),
        Command::Bench(Bench::Patches(args)) => bench_patches::run(&args),
        Command::Bench(Bench::Shapes(args)) => bench_shapes::run(&args),
        Command::Bench(Bench::Parity(args)) => bench_parity::run(&args),
        Command::Accuracy(args) => accuracy::run(&args),
        Command::Dist(args) => dist::run(&args).map(|_| ()),
        Command::Tidy => tidy::run(),
        Command::SupportTable(args) => support_table::run(&args),
        Command::Matrix(args) => run_matrix(&args),
        Command::TorchNpu(args) => torch_npu::run(&args),
        Command::Codegen(args) => codegen::run(&args),
        Command::ParityPublic => {
            println!("{}", parity_public::ensure_all()?.display());
            Ok(())
        }
        Command::StaticMeasured(args) => static_measured::run(&args),
        Command::StressExit(args) => stress_exit::run(&args),
        Command::FixCheck(args) => fix_check::run(&args),
        Command::Conformance(args) => std::process::exit(conformance::main(&args)),
        Command::TorchNpuTests(args) => std::process::exit(torch_npu_tests::main(&args)),
    }
}

fn run_matrix(args: &MatrixArgs) -> Result<()> {
    let versions: Vec<String> = if args.torch.is_empty() {
        venv::MATRIX.iter().map(|v| (*v).to_owned()).collect()
    } else {
        args.torch.clone()
    };
    torch_npu::ensure_all()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let wheels = torch_npu::cache_dir();
    let env = matrix::Env {
        cargo: &cargo,
        wheels: &wheels,
        path_tail: std::env::var_os("PATH"),
    };
    let mut failed = Vec::new();
    matrix::run(&versions, &env, &mut |s: matrix::Step| {
        eprintln!(
            "xtask: {}: {} ({:.1}s)",
            s.name,
            if s.ok { "ok" } else { "FAILED" },
            s.secs
        );
        if !s.ok {
            failed.push(s.name);
        }
    });
    support_table::run(&support_table::Args { check: false })?;
    if failed.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("failed: {}", failed.join(", "))
    }
}

/// The workspace root (the parent of this crate's directory).
pub fn project_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .map_or(manifest.clone(), std::path::Path::to_path_buf)
}
