//! `cargo xtask test`: every check and test, from a fresh clone, in one command.
//!
//! Order: rustfmt check, clippy with `-D warnings`, the Python venv, the pinned torch-npu wheels
//! (`cargo xtask torch-npu`), the cargo tests, the scanner
//! on the real-code corpus (`accuracy --corpus`), one small project through `fix-check`, the
//! quick part of the conformance runs (`conformance --subset`), the release bundle (`--targets
//! auto`: its aarch64 binaries only where this machine can cross-build them, else it says why;
//! with `--offline-build`, then its offline rebuild: [`crate::dist::check_offline_build`]), pytest
//! over `tests/` (`tests/e2e/test_bundle_aarch64.py` runs the aarch64 binaries under qemu), then
//! the torch matrix ([`crate::matrix`]: the runtime-patch, emulator and harness suites and the
//! emulated demo verify on torch 2.1.0 and 2.6.0, or the `--torch` versions), the short exit
//! stress check ([`crate::stress_exit`]) and the support-table check. Every step runs even when an
//! earlier one fails, so one run shows everything that is
//! wrong; the exit code is non-zero if any step failed.

use anyhow::{Result, bail};
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Skip rustfmt and clippy (quicker local iterations).
    #[arg(long)]
    no_lint: bool,
    /// Run the torch matrix on this torch version instead of the default ones (repeatable), e.g.
    /// `--torch 2.4.1`; each gets a venv from `tests/torch-matrix/requirements-<version>.txt` or,
    /// without one, from `requirements-test.txt` with the torch pin replaced.
    #[arg(long = "torch", value_name = "X.Y.Z")]
    torch: Vec<String>,
    /// Skip the torch matrix.
    #[arg(long)]
    no_matrix: bool,
    /// Fresh interpreters per torch version in the exit stress check (`cargo xtask stress-exit`
    /// runs 200); 0 skips it.
    #[arg(long, default_value_t = 30, value_name = "N")]
    stress_runs: usize,
    /// Also check that the release tarball rebuilds `bin/` offline (`cargo xtask dist
    /// --check-offline-build`: a release build from the vendored sources, minutes).
    #[arg(long)]
    offline_build: bool,
    /// Extra arguments passed to pytest (e.g. `-k float64`).
    #[arg(last = true)]
    #[allow(clippy::struct_field_names, reason = "the CLI's own name for them")]
    pytest_args: Vec<String>,
}

pub fn run(args: &Args) -> Result<()> {
    let root = crate::project_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    // Python must not leave `__pycache__` under assets/: everything there is embedded in the binaries.
    remove_pycache(&root.join("assets"));
    let total = Instant::now();
    let mut steps = Steps::default();

    if !args.no_lint {
        let t = Instant::now();
        let ok = duct::cmd!(&cargo, "fmt", "--all", "--check")
            .dir(&root)
            .stdin_null()
            .unchecked()
            .run()?
            .status
            .success();
        steps.step("cargo fmt --check", ok, t);
        let t = Instant::now();
        let ok = duct::cmd!(
            &cargo,
            "clippy",
            "--workspace",
            "--all-targets",
            "--locked",
            "--",
            "-D",
            "warnings"
        )
        .dir(&root)
        .stdin_null()
        .unchecked()
        .run()?
        .status
        .success();
        steps.step("cargo clippy", ok, t);
    }

    let t = Instant::now();
    let python = crate::venv::ensure(&crate::venv::default_requirements());
    steps.step("python venv", python.is_ok(), t);
    let python = match python {
        Ok(p) => p,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            bail!("the Python test venv could not be created; the Python tests cannot run");
        }
    };

    // The venv's bin/ (python, pytest, shellcheck) comes first on PATH for every test.
    let path = venv_path(&python);

    // The pinned torch-npu wheels' Python sources: the remap-table test reads them and the
    // emulator runs their transfer_to_npu.py. Without them those tests fail (never skip).
    let t = Instant::now();
    let wheels = crate::torch_npu::ensure_all();
    if let Err(e) = &wheels {
        eprintln!("xtask: error: {e:#}");
    }
    steps.step("torch-npu wheels", wheels.is_ok(), t);
    let wheels = crate::torch_npu::cache_dir();

    // The public projects the --parity tests port (pinned wheels and sdists, never committed).
    let t = Instant::now();
    let public = crate::parity_public::ensure_all();
    if let Err(e) = &public {
        eprintln!("xtask: error: {e:#}");
    }
    steps.step("parity test projects", public.is_ok(), t);
    let public = crate::parity_public::cache_dir();

    let t = Instant::now();
    let cargo_test_ok = duct::cmd!(&cargo, "test", "--workspace", "--locked")
        .dir(&root)
        .env("NPU_PATCHER_TORCH_NPU_DIR", &wheels)
        .env("NPU_PATCHER_PARITY_PUBLIC", &public)
        .env("PATH", &path)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("NPU_PATCHER_PYTHON", &python)
        .stdin_null()
        .unchecked()
        .run()?
        .status
        .success();
    steps.step("cargo test", cargo_test_ok, t);

    // The scanner on the pinned real-code corpus: downloads (cached) like the venv, fails on a
    // download, hash, scan or label-file error, and only prints the figures.
    let t = Instant::now();
    let corpus = crate::corpus::run(&crate::corpus::Options {
        strict_labels: true,
        ..crate::corpus::Options::default()
    });
    if let Err(e) = &corpus {
        eprintln!("xtask: error: {e:#}");
    }
    steps.step("accuracy --corpus", corpus.is_ok(), t);

    // One small real project through `cargo xtask fix-check` (its tests before and after
    // `npu-scan --fix` and `--unsafe-fixes`; the full check is `cargo xtask fix-check`).
    let t = Instant::now();
    let ok = duct::cmd!(std::env::current_exe()?, "fix-check", "--project", "skrl")
        .dir(&root)
        .stdin_null()
        .unchecked()
        .run()?
        .status
        .success();
    steps.step("fix-check --project skrl", ok, t);

    // The quick part of the conformance runs: real projects' tests on the CPU and on the
    // emulated npu (downloads cached like the corpus); fails on an unclassified difference.
    let t = Instant::now();
    let conformance = crate::conformance::run(&crate::conformance::Args {
        subset: true,
        ..crate::conformance::Args::default()
    });
    let ok = match &conformance {
        Ok(report) => {
            eprint!("{}", crate::conformance::report::render(report));
            report.goal_met()
        }
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            false
        }
    };
    steps.step("conformance --subset", ok, t);

    let t = Instant::now();
    // With its tarball: the bundle-only end-to-end test starts from the unpacked archive.
    let bundle = crate::dist::run(&crate::dist::Args {
        debug: true,
        ..crate::dist::Args::default()
    });
    steps.step("cargo xtask dist", bundle.is_ok(), t);
    let (bundle_dir, bundle_archive) = match &bundle {
        Ok(b) => (
            b.dir.display().to_string(),
            b.archive
                .as_ref()
                .map(|a| a.display().to_string())
                .unwrap_or_default(),
        ),
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            (String::new(), String::new())
        }
    };

    if args.offline_build {
        let t = Instant::now();
        let checked = match &bundle {
            Ok(b) => match &b.archive {
                Some(archive) => crate::dist::check_offline_build(archive),
                None => Err(anyhow::anyhow!("the bundle has no tarball")),
            },
            Err(_) => Err(anyhow::anyhow!("no bundle was built")),
        };
        if let Err(e) = &checked {
            eprintln!("xtask: error: {e:#}");
        }
        steps.step("offline build from the tarball", checked.is_ok(), t);
    }

    let t = Instant::now();
    let default_record = std::env::temp_dir().join("npu-patcher-matrix-default.json");
    let _ = std::fs::remove_file(&default_record);
    let mut pytest: Vec<String> = vec!["-m".into(), "pytest".into(), "tests".into(), "-q".into()];
    pytest.extend(args.pytest_args.iter().cloned());
    let ok = duct::cmd(&python, &pytest)
        .dir(&root)
        .env("NPU_PATCHER_TORCH_NPU_DIR", &wheels)
        .env("NPU_PATCHER_PYTHON", &python)
        .env("PATH", &path)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("NPU_PATCHER_BUNDLE", &bundle_dir)
        .env("NPU_PATCHER_BUNDLE_ARCHIVE", &bundle_archive)
        .env("NPU_PATCHER_TARGET", root.join("target"))
        .env("NPU_PATCHER_MATRIX_RESULTS", &default_record)
        .stdin_null()
        .unchecked()
        .run()?
        .status
        .success();
    steps.step("pytest", ok, t);
    crate::matrix::record_default(&python, &path, &default_record, cargo_test_ok);

    let versions: Vec<String> = if args.no_matrix {
        Vec::new()
    } else if args.torch.is_empty() {
        crate::venv::MATRIX
            .iter()
            .map(|v| (*v).to_owned())
            .collect()
    } else {
        args.torch.clone()
    };
    if !versions.is_empty() {
        let env = crate::matrix::Env {
            cargo: &cargo,
            wheels: &wheels,
            path_tail: std::env::var_os("PATH"),
        };
        crate::matrix::run(&versions, &env, &mut |s: crate::matrix::Step| {
            steps.record(s.name, s.ok, s.secs);
        });
    }
    if args.stress_runs > 0 {
        // Interpreters that install the emulated npu, train a step and exit: none may abort at
        // exit, hang or lose output (the short form of `cargo xtask stress-exit`), on the test
        // venv's torch and the matrix's.
        let t = Instant::now();
        let stressed: Vec<Option<String>> = std::iter::once(None)
            .chain(versions.iter().cloned().map(Some))
            .collect();
        let stress = crate::stress_exit::run_versions(
            &stressed,
            &crate::stress_exit::Args {
                runs: args.stress_runs,
                torch: Vec::new(),
                jobs: None,
                timeout: 120,
            },
        );
        if let Err(e) = &stress {
            eprintln!("xtask: error: {e:#}");
        }
        steps.step(
            &format!("stress-exit ({} runs per torch)", args.stress_runs),
            stress.is_ok(),
            t,
        );
    }
    let t = Instant::now();
    let tables = crate::support_table::run(&crate::support_table::Args { check: true });
    if let Err(e) = &tables {
        eprintln!("xtask: error: {e:#}");
    }
    steps.step("support-table --check", tables.is_ok(), t);

    eprintln!(
        "xtask: total {:.1} min",
        total.elapsed().as_secs_f64() / 60.0
    );
    if steps.failed.is_empty() {
        eprintln!("xtask: all checks passed");
        Ok(())
    } else {
        bail!("failed: {}", steps.failed.join(", "))
    }
}

/// The named steps of one run: each is printed with its time as it ends.
#[derive(Default)]
struct Steps {
    failed: Vec<String>,
}

impl Steps {
    fn step(&mut self, name: &str, ok: bool, started: Instant) {
        self.record(name.to_owned(), ok, started.elapsed().as_secs_f64());
    }

    fn record(&mut self, name: String, ok: bool, secs: f64) {
        eprintln!(
            "xtask: {name}: {} ({secs:.1}s)",
            if ok { "ok" } else { "FAILED" }
        );
        if !ok {
            self.failed.push(name);
        }
    }
}

fn venv_path(python: &std::path::Path) -> std::ffi::OsString {
    let mut dirs: Vec<std::path::PathBuf> = python
        .parent()
        .map(std::path::Path::to_path_buf)
        .into_iter()
        .collect();
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    std::env::join_paths(dirs).unwrap_or_default()
}

fn remove_pycache(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if entry.file_name() == "__pycache__" {
            if let Err(e) = std::fs::remove_dir_all(&path) {
                eprintln!("xtask: warning: cannot remove {}: {e}", path.display());
            }
        } else {
            remove_pycache(&path);
        }
    }
}
