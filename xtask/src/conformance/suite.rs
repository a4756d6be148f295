//! Run a pinned project's own pytest suite and collect every test's outcome.
//!
//! The steps are separate so other commands that run project suites can reuse them: [`unpack`]
//! (the corpus download cache: sha256-checked, extracted once), [`ensure_venv`] (a per-project
//! venv over an existing torch venv, with the project's extra test dependencies), [`run_pytest`]
//! (one `nice`d pytest run with the `npu_conformance` plugin, a per-test and a whole-run timeout)
//! and [`read_outcomes`] (the plugin's JSON-lines file, a crashed interpreter included).

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::corpus::fetch::{self, Distribution};

/// The cache of the conformance runs: `<venv cache>/conformance` (sources, venvs, results).
pub(crate) fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("NPU_PATCHER_CONFORMANCE_DIR") {
        return PathBuf::from(dir);
    }
    crate::venv::cache_dir().join("conformance")
}

/// Extract `dist` under `<cache>/src/` (downloaded once, sha256-checked), delete the files
/// `remove` names and create the empty files `create` names (paths relative to the tree: a
/// top-level `__init__.py` that would make the tree a package, a missing `tests/__init__.py`);
/// return the tree.
pub(crate) fn unpack(
    cache: &Path,
    dist: &Distribution,
    remove: &[String],
    create: &[String],
) -> Result<PathBuf> {
    let tree = fetch::ensure(&cache.join("src"), dist)?;
    for rel in remove.iter().chain(create) {
        let plain = Path::new(rel)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !plain {
            bail!(
                "{}: {rel:?} must be a relative path inside the tree",
                dist.dir_name()
            );
        }
    }
    for rel in remove {
        let path = tree.join(rel);
        if path.is_file() {
            fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
        }
    }
    for rel in create {
        let path = tree.join(rel);
        if !path.exists() {
            fs::write(&path, "").with_context(|| format!("cannot create {}", path.display()))?;
        }
    }
    Ok(tree)
}

/// The interpreter of a venv for `name` that sees the packages of the torch venv `base` (a
/// `.pth` file) and has `deps` installed on top with pip, with torch held at `torch` and numpy
/// at the base's numpy (constraints: pip never installs another torch, whose wheels would pull
/// CUDA); made once, keyed by the torch venv and the dependency list. Shared by
/// `cargo xtask conformance` and `cargo xtask fix-check`.
pub(crate) fn ensure_venv(
    cache: &Path,
    name: &str,
    base: &Path,
    torch: &str,
    deps: &[String],
) -> Result<PathBuf> {
    let base_site = site_packages(base)?;
    let numpy = numpy_version(base);
    let mut key = Sha256::new();
    key.update(base_site.to_string_lossy().as_bytes());
    key.update(numpy.as_deref().unwrap_or_default().as_bytes());
    for d in deps {
        key.update(b"\n");
        key.update(d.as_bytes());
    }
    let hash = issue_model::ids::hex(&key.finalize()[..6]);
    let venvs = cache.join("venvs");
    let venv = venvs.join(format!("{name}-{hash}"));
    let python = venv.join("bin").join("python");
    let ready = venv.join(".complete");
    if ready.exists() {
        return Ok(python);
    }
    fs::create_dir_all(&venvs).with_context(|| format!("cannot create {}", venvs.display()))?;
    let lock_path = venvs.join(format!(".{name}-{hash}.lock"));
    let lock = fs::File::create(&lock_path)
        .with_context(|| format!("cannot create {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("cannot lock {}", lock_path.display()))?;
    if ready.exists() {
        return Ok(python);
    }
    if venv.exists() {
        fs::remove_dir_all(&venv)
            .with_context(|| format!("cannot remove the incomplete venv {}", venv.display()))?;
    }
    eprintln!(
        "xtask: creating the venv of {name} at {} (one time)",
        venv.display()
    );
    duct::cmd!(base, "-m", "venv", &venv)
        .stdout_null()
        .run()
        .with_context(|| format!("`{} -m venv {}` failed", base.display(), venv.display()))?;
    let own_site = site_packages(&python)?;
    let pth = own_site.join("_npu_conformance_torch.pth");
    fs::write(&pth, format!("{}\n", base_site.display()))
        .with_context(|| format!("cannot write {}", pth.display()))?;
    if !deps.is_empty() {
        let constraints = venv.join("constraints.txt");
        let numpy_pin = numpy.as_ref().map(|v| format!("numpy=={v}\n"));
        let pins = format!("torch=={torch}\n{}", numpy_pin.unwrap_or_default());
        fs::write(&constraints, pins)
            .with_context(|| format!("cannot write {}", constraints.display()))?;
        let mut args: Vec<String> = vec![
            "-m".into(),
            "pip".into(),
            "install".into(),
            "--quiet".into(),
            "--disable-pip-version-check".into(),
            "-c".into(),
            constraints.display().to_string(),
        ];
        args.extend(deps.iter().cloned());
        let out = duct::cmd(&python, &args)
            .stderr_to_stdout()
            .stdout_capture()
            .unchecked()
            .run()
            .with_context(|| format!("cannot run pip of {}", venv.display()))?;
        if !out.status.success() {
            bail!(
                "{name}: pip install {} failed in {}:\n{}",
                deps.join(" "),
                venv.display(),
                String::from_utf8_lossy(&out.stdout).trim()
            );
        }
    }
    fs::write(&ready, deps.join("\n") + "\n")
        .with_context(|| format!("cannot write {}", ready.display()))?;
    Ok(python)
}

/// The numpy version of the interpreter `python`, if it has numpy.
fn numpy_version(python: &Path) -> Option<String> {
    let out = duct::cmd!(python, "-c", "import numpy; print(numpy.__version__)")
        .stdout_capture()
        .stderr_null()
        .unchecked()
        .run()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

/// The `site-packages` directory of the interpreter `python`.
fn site_packages(python: &Path) -> Result<PathBuf> {
    let out = duct::cmd!(
        python,
        "-c",
        "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    )
    .stdout_capture()
    .unchecked()
    .run()
    .with_context(|| format!("cannot run {}", python.display()))?;
    if !out.status.success() {
        bail!(
            "{} cannot report its site-packages (is it a Python interpreter?)",
            python.display()
        );
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
    ))
}

/// Where a suite runs: on the CPU as it is, or on the emulated npu with the real `transfer_to_npu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    Cpu,
    Npu,
}

impl Mode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Cpu => "cpu",
            Mode::Npu => "npu",
        }
    }
}

/// One pytest run of a project's suite.
pub(crate) struct PytestRun<'a> {
    pub python: &'a Path,
    /// The project's tree: the working directory.
    pub tree: &'a Path,
    /// pytest's arguments after the plugin's: test paths, `-k`, `--deselect`.
    pub args: &'a [String],
    /// Directories (relative to the tree) put on `PYTHONPATH` after the plugin's folder.
    pub pythonpath: &'a [String],
    pub env: &'a BTreeMap<String, String>,
    pub mode: Mode,
    /// `torch.set_default_device("npu")` on the npu (suites that never choose a device).
    pub default_device: bool,
    /// The folder of `npu_conformance.py`.
    pub plugin_dir: &'a Path,
    /// `assets/emulator`.
    pub emulator_dir: &'a Path,
    /// The extracted torch-npu wheels (`cargo xtask torch-npu --dir`).
    pub torch_npu_dir: &'a Path,
    /// The emulator's restriction groups stay on (else all are switched off).
    pub restrictions: bool,
    /// Seconds one test may run.
    pub test_timeout: u32,
    /// Seconds the whole run may take.
    pub run_timeout: u32,
    /// The plugin's JSON-lines file; pytest's own output goes to the same path with `.log`.
    pub results: &'a Path,
}

/// How one pytest run ended.
#[derive(Debug, Clone)]
pub(crate) struct RunEnd {
    pub secs: f64,
    /// pytest's exit code (`None`: killed by a signal or past the whole-run timeout).
    pub code: Option<i32>,
    pub timed_out: bool,
}

/// Run pytest once; its output goes to `<results>.log`.
pub(crate) fn run_pytest(run: &PytestRun) -> Result<RunEnd> {
    if let Some(parent) = run.results.parent() {
        fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let _ = fs::remove_file(run.results);
    let log = run.results.with_extension("log");
    let log_file =
        fs::File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
    let mut pythonpath = vec![run.plugin_dir.to_path_buf()];
    pythonpath.extend(run.pythonpath.iter().map(|p| run.tree.join(p)));
    let pythonpath = std::env::join_paths(&pythonpath).context("a PYTHONPATH entry has a ':'")?;
    let mut args: Vec<String> = vec![
        "-n".into(),
        "10".into(),
        run.python.display().to_string(),
        "-m".into(),
        "pytest".into(),
        "-p".into(),
        "npu_conformance".into(),
        "-p".into(),
        "no:cacheprovider".into(),
        "-q".into(),
        "--no-header".into(),
        "-rN".into(),
        "--color=no".into(),
        // A module that fails to import is one `error`; the other modules still run.
        "--continue-on-collection-errors".into(),
    ];
    args.extend(run.args.iter().cloned());
    let mut cmd = duct::cmd("nice", &args)
        .dir(run.tree)
        .stdin_null()
        .stdout_file(log_file.try_clone()?)
        .stderr_file(log_file)
        .env("PYTHONPATH", pythonpath)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONHASHSEED", "0")
        .env("OMP_NUM_THREADS", "1")
        .env("MKL_NUM_THREADS", "1")
        .env("MPLBACKEND", "Agg")
        .env("NPU_CONFORMANCE_MODE", run.mode.name())
        .env("NPU_CONFORMANCE_RESULTS", run.results)
        .env("NPU_CONFORMANCE_TIMEOUT", run.test_timeout.to_string())
        .env("NPU_CONFORMANCE_EMULATOR_DIR", run.emulator_dir)
        .env("NPU_PATCHER_TORCH_NPU_DIR", run.torch_npu_dir)
        .unchecked();
    // duct applies an inner expression's variables last: each is set once, here.
    cmd = if run.mode == Mode::Npu && run.default_device {
        cmd.env("NPU_CONFORMANCE_DEFAULT_DEVICE", "npu")
    } else {
        cmd.env_remove("NPU_CONFORMANCE_DEFAULT_DEVICE")
    };
    cmd = if run.restrictions {
        cmd.env_remove("NPU_CONFORMANCE_RESTRICTIONS")
    } else {
        cmd.env("NPU_CONFORMANCE_RESTRICTIONS", "off")
    };
    for (k, v) in run.env {
        cmd = cmd.env(k, v);
    }
    let started = Instant::now();
    let handle = cmd
        .start()
        .with_context(|| format!("cannot start pytest in {}", run.tree.display()))?;
    let limit = Duration::from_secs(u64::from(run.run_timeout));
    loop {
        if let Some(out) = handle.try_wait()? {
            return Ok(RunEnd {
                secs: started.elapsed().as_secs_f64(),
                code: out.status.code(),
                timed_out: false,
            });
        }
        if started.elapsed() > limit {
            handle.kill()?;
            return Ok(RunEnd {
                secs: started.elapsed().as_secs_f64(),
                code: None,
                timed_out: true,
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One test's outcome as the plugin wrote it (`crashed`: the interpreter died in it; `not-run`:
/// the run ended, by its timeout or a crash, before it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Outcome {
    pub outcome: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What one run's JSON-lines file says.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outcomes {
    pub tests: BTreeMap<String, Outcome>,
    /// The plugin's `session` line (mode, torch, which `transfer_to_npu` ran).
    pub session: Option<serde_json::Value>,
    /// The `finish` line was written: pytest ended on its own.
    pub finished: bool,
}

#[derive(Deserialize)]
struct Line {
    kind: String,
    nodeid: Option<String>,
    outcome: Option<String>,
    message: Option<String>,
}

/// Read the plugin's file: a test that started and has no outcome crashed the interpreter
/// (or was running when the run's timeout struck).
pub(crate) fn read_outcomes(path: &Path) -> Result<Outcomes> {
    let text = fs::read_to_string(path).with_context(|| {
        format!(
            "cannot read {} (pytest wrote no results: see {})",
            path.display(),
            path.with_extension("log").display()
        )
    })?;
    let mut outcomes = Outcomes::default();
    let mut running: Option<String> = None;
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let Ok(parsed) = serde_json::from_str::<Line>(line) else {
            // A line cut short by a crash is the last one; anything else is a broken file.
            if n + 1 == text.lines().count() {
                break;
            }
            bail!("{}:{}: not a result line", path.display(), n + 1);
        };
        match parsed.kind.as_str() {
            "session" => outcomes.session = serde_json::from_str(line).ok(),
            "start" => running = parsed.nodeid,
            "outcome" => {
                let (Some(id), Some(outcome)) = (parsed.nodeid, parsed.outcome) else {
                    bail!(
                        "{}:{}: an outcome line without nodeid",
                        path.display(),
                        n + 1
                    );
                };
                if running.as_deref() == Some(id.as_str()) {
                    running = None;
                }
                outcomes.tests.insert(
                    id,
                    Outcome {
                        outcome,
                        message: parsed.message,
                    },
                );
            }
            "finish" => {
                outcomes.finished = true;
                running = None;
            }
            _ => {}
        }
    }
    if let Some(id) = running {
        outcomes.tests.entry(id).or_insert(Outcome {
            outcome: "crashed".to_owned(),
            message: Some("the interpreter died or the run timed out in this test".to_owned()),
        });
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_started_without_an_outcome_crashed_and_a_cut_last_line_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        fs::write(
            &path,
            concat!(
                "{\"kind\": \"session\", \"mode\": \"npu\"}\n",
                "{\"kind\": \"start\", \"nodeid\": \"t.py::a\"}\n",
                "{\"kind\": \"outcome\", \"nodeid\": \"t.py::a\", \"outcome\": \"passed\", \"message\": null}\n",
                "{\"kind\": \"start\", \"nodeid\": \"t.py::b\"}\n",
                "{\"kind\": \"outc",
            ),
        )
        .unwrap();
        let got = read_outcomes(&path).unwrap();
        assert!(!got.finished);
        assert_eq!(got.tests["t.py::a"].outcome, "passed");
        assert_eq!(got.tests["t.py::b"].outcome, "crashed");
        assert_eq!(got.session.unwrap()["mode"], "npu");
    }

    #[test]
    fn unpack_removes_and_creates_files_and_refuses_paths_outside_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("demo-1.0.tar.gz");
        crate::corpus::fetch::write_tar_gz(
            &archive,
            &[
                ("demo-1.0/__init__.py", b"x\n"),
                ("demo-1.0/tests/test_a.py", b"x\n"),
            ],
        );
        let sha = {
            let bytes = fs::read(&archive).unwrap();
            issue_model::ids::hex(&Sha256::digest(&bytes))
        };
        let dist = Distribution {
            name: "demo".into(),
            version: "1.0".into(),
            kind: crate::corpus::fetch::Kind::Sdist,
            filename: "demo-1.0.tar.gz".into(),
            url: format!("file://{}", archive.display()),
            sha256: sha,
            exclude: Vec::new(),
        };
        let cache = dir.path().join("cache");
        let tree = unpack(
            &cache,
            &dist,
            &["__init__.py".into()],
            &["tests/__init__.py".into()],
        )
        .unwrap();
        assert!(!tree.join("__init__.py").exists());
        assert!(tree.join("tests/__init__.py").is_file());
        assert!(tree.join("tests/test_a.py").is_file());
        let err = format!(
            "{:#}",
            unpack(&cache, &dist, &["../outside.py".into()], &[]).unwrap_err()
        );
        assert!(err.contains("inside the tree"), "{err}");
    }

    #[test]
    fn a_missing_results_file_names_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let err = format!(
            "{:#}",
            read_outcomes(&dir.path().join("x.jsonl")).unwrap_err()
        );
        assert!(err.contains("x.log"), "{err}");
    }
}
