//! `cargo xtask fix-check`: do `npu-scan --fix` and `--fix --unsafe-fixes` keep real projects
//! working? For each project of `tests/fix-check/projects.json` (pinned sdists of public
//! projects with CPU test suites), run its tests on the CPU on three copies: as released,
//! after the safe fixes, after the unsafe fixes too, and compare the outcome of every test id.
//! Safe fixes must leave every outcome as it was; each outcome the unsafe fixes change must be
//! judged in `tests/fix-check/judged.json`. Then run each entry point the safe fixes set up one
//! step on the emulated npu with the real `transfer_to_npu` (`npu-verify --emulate-npu`).
//!
//! The sdists are downloaded and checked with the corpus code ([`crate::corpus::fetch`]). Each
//! project gets a venv under the fix-check cache that sees the test venv's torch through a
//! `.pth` file (no second torch is installed: torch and numpy are pinned as constraints) and
//! holds the project's own test dependencies. Tests run under `nice`, with a per-test timeout
//! (pytest-timeout), and a small pytest plugin records each test id's outcome.

use crate::conformance::{Format, ProjectArgs};
use crate::corpus::fetch::{self, Distribution, Kind};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

const ABOUT: &str = "Run the CPU tests of pinned public projects before and after `npu-scan --fix` (safe \
fixes: every test outcome must stay the same) and after `--fix --unsafe-fixes` (every changed outcome \
must be judged in tests/fix-check/judged.json), then run each entry point the safe fixes set up one step \
on the emulated npu with the real transfer_to_npu (npu-verify --emulate-npu).";

const AFTER_HELP: &str = "\
Examples:
  cargo xtask fix-check                          every project of projects.json
  cargo xtask fix-check --project skrl           one project (repeatable)
  cargo xtask fix-check --format json > fc.json  the table as JSON
  cargo xtask fix-check --no-entries             tests only, no emulated entry runs

Files: tests/fix-check/projects.json (the projects), tests/fix-check/judged.json
(judgements of outcomes the unsafe fixes change). Caches: sdists and venvs under
~/.cache/npu-patcher/fix-check; the copies of the last run, with the scan output
and pytest logs, under its work/ directory.

Exit codes:
  0  every check passed
  1  a safe fix changed a test outcome, an unsafe fix changed one that judged.json
     does not accept, or a fixed entry point failed on the emulated npu
  2  setup error (download, venv, pytest could not run)";

#[derive(clap::Args)]
#[command(about = ABOUT, long_about = ABOUT, after_help = AFTER_HELP)]
pub struct Args {
    #[command(flatten)]
    select: ProjectArgs,
    /// Skip the entry-point runs on the emulated npu.
    #[arg(long)]
    no_entries: bool,
    /// The projects manifest (default: tests/fix-check/projects.json).
    #[arg(long, value_name = "PATH")]
    manifest: Option<PathBuf>,
    /// The judgements of changed outcomes (default: tests/fix-check/judged.json).
    #[arg(long, value_name = "PATH")]
    judged: Option<PathBuf>,
}

/// `tests/fix-check/projects.json`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Manifest {
    #[allow(dead_code, reason = "documentation for readers of the manifest")]
    about: String,
    pub(crate) projects: Vec<Project>,
}

/// One project to check.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(crate) struct Project {
    pub(crate) name: String,
    pub(crate) version: String,
    source: Source,
    /// What its tests need besides torch and numpy (pip requirement specifiers).
    #[serde(default)]
    pip: Vec<String>,
    /// Directories (relative to the project root) its code is imported from.
    #[serde(default = "default_python_path")]
    python_path: Vec<String>,
    /// The pytest selection: paths or node ids relative to the project root.
    tests: Vec<String>,
    /// Other pytest arguments.
    #[serde(default)]
    pytest_args: Vec<String>,
    /// The per-test timeout in seconds.
    #[serde(default = "default_test_timeout")]
    test_timeout_s: u32,
    /// Entry points the safe fixes set up, run one step on the emulated npu.
    #[serde(default)]
    entries: Vec<Entry>,
}

fn default_python_path() -> Vec<String> {
    vec![".".to_owned()]
}

fn default_test_timeout() -> u32 {
    120
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Source {
    kind: String,
    filename: String,
    url: String,
    sha256: String,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Entry {
    /// The launch command, run in the fixed copy (`python path/to/entry.py`).
    command: Vec<String>,
    /// Whether it trains (an optimizer step is expected); `false` for a smoke-test main.
    #[serde(default = "yes")]
    trains: bool,
}

fn yes() -> bool {
    true
}

/// `tests/fix-check/judged.json`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Judged {
    #[allow(dead_code, reason = "documentation for readers of the file")]
    #[serde(default)]
    about: String,
    /// Project name → test id → judgement.
    #[serde(default)]
    projects: BTreeMap<String, BTreeMap<String, Judgement>>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Judgement {
    before: String,
    after: String,
    accepted: bool,
    reason: String,
}

pub(crate) fn read_manifest(path: &Path) -> Result<Manifest> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let manifest: Manifest = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a valid fix-check manifest", path.display()))?;
    let mut names = std::collections::BTreeSet::new();
    for p in &manifest.projects {
        if !names.insert(p.name.clone()) {
            bail!("{}: {} is listed twice", path.display(), p.name);
        }
        if p.source.kind != "sdist" {
            bail!(
                "{}: {}: source kind {:?}; only \"sdist\" is supported",
                path.display(),
                p.name,
                p.source.kind
            );
        }
        if p.tests.is_empty() {
            bail!("{}: {} names no tests", path.display(), p.name);
        }
        if p.name.contains(['/', '\\']) || p.name.starts_with('.') {
            bail!("{}: bad project name {:?}", path.display(), p.name);
        }
    }
    Ok(manifest)
}

impl Project {
    fn distribution(&self) -> Distribution {
        Distribution {
            name: self.name.clone(),
            version: self.version.clone(),
            kind: Kind::Sdist,
            filename: self.source.filename.clone(),
            url: self.source.url.clone(),
            sha256: self.source.sha256.clone(),
            exclude: Vec::new(),
        }
    }

    fn dir_name(&self) -> String {
        format!("{}-{}", self.name, self.version)
    }
}

/// The outcome of one test id, as the recording plugin writes it.
pub(crate) type Outcomes = BTreeMap<String, String>;

/// One run of a project's tests.
#[derive(Serialize, Default, Clone)]
struct TestRun {
    passed: usize,
    failed: usize,
    errors: usize,
    skipped: usize,
    other: usize,
    secs: f64,
    #[serde(skip)]
    outcomes: Outcomes,
}

impl TestRun {
    fn from_outcomes(outcomes: Outcomes, secs: f64) -> TestRun {
        let mut run = TestRun {
            secs,
            ..TestRun::default()
        };
        for outcome in outcomes.values() {
            match outcome.as_str() {
                "passed" => run.passed += 1,
                "failed" => run.failed += 1,
                "error" | "collect-error" => run.errors += 1,
                "skipped" => run.skipped += 1,
                _ => run.other += 1,
            }
        }
        run.outcomes = outcomes;
        run
    }

    fn summary(&self) -> String {
        let mut s = format!("{} passed", self.passed);
        for (n, what) in [
            (self.failed, "failed"),
            (self.errors, "errors"),
            (self.skipped, "skipped"),
            (self.other, "other"),
        ] {
            if n > 0 {
                let _ = write!(s, ", {n} {what}");
            }
        }
        s
    }
}

/// A test whose outcome changed.
#[derive(Serialize, Clone)]
struct Change {
    test: String,
    before: String,
    after: String,
    /// For unsafe fixes: the judgement's verdict (`accepted`, `defect`) or `unjudged`.
    verdict: String,
    reason: String,
}

#[derive(Serialize, Clone)]
struct EntryResult {
    command: String,
    ok: bool,
    detail: String,
}

#[derive(Serialize)]
struct ProjectReport {
    project: String,
    version: String,
    safe_fixes: usize,
    unsafe_fixes: usize,
    before: TestRun,
    after_safe: TestRun,
    after_unsafe: TestRun,
    safe_changes: Vec<Change>,
    unsafe_changes: Vec<Change>,
    entries: Vec<EntryResult>,
    ok: bool,
}

/// A failure to set up or run a project: exit code 2.
struct SetupError(anyhow::Error);

pub fn run(args: &Args) -> Result<()> {
    let root = crate::project_root();
    let manifest_path = args
        .manifest
        .clone()
        .unwrap_or_else(|| root.join("tests/fix-check/projects.json"));
    let judged_path = args
        .judged
        .clone()
        .unwrap_or_else(|| root.join("tests/fix-check/judged.json"));
    let setup = |e: anyhow::Error| -> ! {
        eprintln!("xtask: fix-check: setup error: {e:#}");
        std::process::exit(2)
    };
    let manifest = read_manifest(&manifest_path).unwrap_or_else(|e| setup(e));
    let judged = read_judged(&judged_path).unwrap_or_else(|e| setup(e));
    let selected: Vec<&Project> = if args.select.project.is_empty() {
        manifest.projects.iter().collect()
    } else {
        let mut out = Vec::new();
        for name in &args.select.project {
            match manifest.projects.iter().find(|p| &p.name == name) {
                Some(p) => out.push(p),
                None => setup(anyhow::anyhow!(
                    "no project {name:?} in {} (known: {})",
                    manifest_path.display(),
                    manifest
                        .projects
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
        }
        out
    };
    let tools = Tools::build(&root).unwrap_or_else(|e| setup(e));
    let torch_python =
        crate::venv::ensure(&crate::venv::default_requirements()).unwrap_or_else(|e| setup(e));
    let cache = cache_dir();
    let mut reports = Vec::new();
    let mut setup_failed = Vec::new();
    for project in selected {
        eprintln!("xtask: fix-check: {}", project.dir_name());
        match check_project(
            project,
            &cache,
            &tools,
            &torch_python,
            &judged,
            !args.no_entries,
        ) {
            Ok(report) => reports.push(report),
            // The other projects still run; the exit code says a setup failed.
            Err(SetupError(e)) => {
                eprintln!(
                    "xtask: fix-check: setup error: project {}: {e:#}",
                    project.dir_name()
                );
                setup_failed.push(project.dir_name());
            }
        }
    }
    match args.select.format {
        Format::Text => print!("{}", text_table(&reports)),
        Format::Json => println!("{}", serde_json::to_string_pretty(&reports)?),
    }
    if !setup_failed.is_empty() {
        eprintln!(
            "xtask: fix-check: could not check {} (setup errors above)",
            setup_failed.join(", ")
        );
        std::process::exit(2)
    }
    if reports.iter().all(|r| r.ok) {
        Ok(())
    } else {
        eprintln!("xtask: fix-check: FAILED (see the table)");
        std::process::exit(1)
    }
}

fn read_judged(path: &Path) -> Result<Judged> {
    if !path.exists() {
        return Ok(Judged::default());
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not valid", path.display()))
}

/// The fix-check cache: `fix-check/` in the test venvs' cache directory.
pub(crate) fn cache_dir() -> PathBuf {
    crate::venv::cache_dir().join("fix-check")
}

/// The release binaries the check runs.
struct Tools {
    scan: PathBuf,
    assets: PathBuf,
    verify: PathBuf,
}

impl Tools {
    fn build(root: &Path) -> Result<Tools> {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let ok = duct::cmd!(
            &cargo,
            "build",
            "--release",
            "--quiet",
            "-p",
            "scan",
            "-p",
            "patch-assets",
            "-p",
            "verify"
        )
        .dir(root)
        .unchecked()
        .run()
        .context("cannot run cargo build")?
        .status
        .success();
        if !ok {
            bail!("cargo build --release -p scan -p patch-assets -p verify failed");
        }
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map_or_else(|| root.join("target"), PathBuf::from)
            .join("release");
        Ok(Tools {
            scan: target.join("npu-scan"),
            assets: target.join("npu-assets"),
            verify: target.join("npu-verify"),
        })
    }
}

fn check_project(
    project: &Project,
    cache: &Path,
    tools: &Tools,
    torch_python: &Path,
    judged: &Judged,
    entries: bool,
) -> std::result::Result<ProjectReport, SetupError> {
    let source = fetch::ensure(cache, &project.distribution()).map_err(SetupError)?;
    let python = ensure_venv(cache, project, torch_python).map_err(SetupError)?;
    let work = cache.join("work").join(project.dir_name());
    let copies = prepare_copies(&source, &work, tools).map_err(SetupError)?;
    let before =
        run_tests(project, &python, &copies.before, &work.join("before")).map_err(SetupError)?;
    let after_safe =
        run_tests(project, &python, &copies.safe, &work.join("safe")).map_err(SetupError)?;
    let after_unsafe =
        run_tests(project, &python, &copies.unsafe_, &work.join("unsafe")).map_err(SetupError)?;
    let safe_changes: Vec<Change> = changes(&before.outcomes, &after_safe.outcomes)
        .into_iter()
        .map(|(test, b, a)| Change {
            test,
            before: b,
            after: a,
            verdict: "defect".to_owned(),
            reason: "a safe fix changed this outcome".to_owned(),
        })
        .collect();
    let judgements = judged.projects.get(&project.name);
    let unsafe_changes: Vec<Change> = changes(&before.outcomes, &after_unsafe.outcomes)
        .into_iter()
        .map(|(test, b, a)| {
            let judgement = judgements
                .and_then(|j| j.get(&test))
                .filter(|j| j.before == b && j.after == a);
            let (verdict, reason) = match judgement {
                Some(j) if j.accepted => ("accepted", j.reason.clone()),
                Some(j) => ("defect", j.reason.clone()),
                None => (
                    "unjudged",
                    format!(
                        "add a judgement to tests/fix-check/judged.json: projects.{}.{test:?} \
                         with before {b:?}, after {a:?}",
                        project.name
                    ),
                ),
            };
            Change {
                test,
                before: b,
                after: a,
                verdict: verdict.to_owned(),
                reason,
            }
        })
        .collect();
    let entry_results = if entries {
        project
            .entries
            .iter()
            .map(|e| run_entry(tools, &python, &copies.safe, e))
            .collect()
    } else {
        Vec::new()
    };
    let ok = safe_changes.is_empty()
        && unsafe_changes.iter().all(|c| c.verdict == "accepted")
        && entry_results.iter().all(|e: &EntryResult| e.ok);
    Ok(ProjectReport {
        project: project.name.clone(),
        version: project.version.clone(),
        safe_fixes: copies.safe_fixes,
        unsafe_fixes: copies.unsafe_fixes,
        before,
        after_safe,
        after_unsafe,
        safe_changes,
        unsafe_changes,
        entries: entry_results,
        ok,
    })
}

/// The test ids whose outcome differs between two runs (a test missing from one run counts as
/// `missing`), with the outcome before and after.
pub(crate) fn changes(before: &Outcomes, after: &Outcomes) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for (test, b) in before {
        let a = after.get(test).map_or("missing", String::as_str);
        if a != b {
            out.push((test.clone(), b.clone(), a.to_owned()));
        }
    }
    for (test, a) in after {
        if !before.contains_key(test) {
            out.push((test.clone(), "missing".to_owned(), a.clone()));
        }
    }
    out
}

/// The project's venv (shared with `cargo xtask conformance`): it sees the test venv's packages
/// (torch) and has pytest-timeout and the project's pip packages on top, torch and numpy pinned.
fn ensure_venv(cache: &Path, project: &Project, torch_python: &Path) -> Result<PathBuf> {
    let torch = crate::conformance::torch_version(torch_python)?;
    let deps: Vec<String> = std::iter::once("pytest-timeout".to_owned())
        .chain(project.pip.iter().cloned())
        .collect();
    crate::conformance::suite::ensure_venv(cache, &project.name, torch_python, &torch, &deps)
}

struct Copies {
    before: PathBuf,
    safe: PathBuf,
    unsafe_: PathBuf,
    safe_fixes: usize,
    unsafe_fixes: usize,
}

/// Fresh copies of the extracted project: as released, after `--fix`, after `--fix
/// --unsafe-fixes` (both after `npu-assets init`, which the entry setup needs).
fn prepare_copies(source: &Path, work: &Path, tools: &Tools) -> Result<Copies> {
    if work.exists() {
        std::fs::remove_dir_all(work)
            .with_context(|| format!("cannot remove the old copies {}", work.display()))?;
    }
    let copy = |name: &str| -> Result<PathBuf> {
        let to = work.join(name).join("project");
        copy_tree(source, &to)?;
        Ok(to)
    };
    let before = copy("before")?;
    let safe = copy("safe")?;
    let unsafe_ = copy("unsafe")?;
    let mut counts = [0usize; 2];
    for (i, (dir, extra)) in [(&safe, None), (&unsafe_, Some("--unsafe-fixes"))]
        .into_iter()
        .enumerate()
    {
        duct::cmd!(&tools.assets, "init", dir)
            .stdout_null()
            .run()
            .with_context(|| format!("npu-assets init {} failed", dir.display()))?;
        let out_dir = dir.parent().unwrap_or(work).join("scan");
        let mut args: Vec<std::ffi::OsString> = vec![
            dir.as_os_str().to_owned(),
            "--fix".into(),
            "--output".into(),
            out_dir.as_os_str().to_owned(),
        ];
        if let Some(extra) = extra {
            args.push(extra.into());
        }
        // npu-scan exits 1 when issues are left: only a crash or a usage error (2) is fatal.
        let out = duct::cmd(&tools.scan, args)
            .stderr_to_stdout()
            .stdout_capture()
            .unchecked()
            .run()?;
        let log = String::from_utf8_lossy(&out.stdout).into_owned();
        std::fs::write(dir.parent().unwrap_or(work).join("scan.log"), &log)?;
        if !matches!(out.status.code(), Some(0 | 1)) {
            bail!("npu-scan {} --fix failed: {log}", dir.display());
        }
        counts[i] = applied_count(&log);
    }
    Ok(Copies {
        before,
        safe,
        unsafe_,
        safe_fixes: counts[0],
        unsafe_fixes: counts[1],
    })
}

/// The fix count of npu-scan's "Applied N fixes in M files" line.
pub(crate) fn applied_count(log: &str) -> usize {
    log.lines()
        .find_map(|l| l.strip_prefix("Applied "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    for entry in
        std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))?
    {
        let entry = entry?;
        let name = entry.file_name();
        if name == ".complete" {
            continue;
        }
        let kind = entry.file_type()?;
        let target = to.join(&name);
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target).with_context(|| {
                format!(
                    "cannot copy {} to {}",
                    entry.path().display(),
                    target.display()
                )
            })?;
        }
    }
    Ok(())
}

/// The pytest plugin that writes one JSON line per test id and phase outcome.
const RECORDER: &str = r#"import json
import os

_OUT = os.environ["NPU_PATCHER_FIX_CHECK_OUTCOMES"]


def _write(nodeid, outcome):
    with open(_OUT, "a", encoding="utf-8") as f:
        f.write(json.dumps({"test": nodeid, "outcome": outcome}) + "\n")


def pytest_collectreport(report):
    if report.failed:
        _write(report.nodeid or "<collection>", "collect-error")


def pytest_runtest_logreport(report):
    if report.when == "call":
        if hasattr(report, "wasxfail"):
            _write(report.nodeid, "xpassed" if report.passed else "xfailed")
        else:
            _write(report.nodeid, report.outcome)
    elif report.failed:
        _write(report.nodeid, "error")
    elif report.when == "setup" and report.skipped:
        _write(report.nodeid, "xfailed" if hasattr(report, "wasxfail") else "skipped")
"#;

/// Run the project's tests in `dir` with `python`; the outcome of every test id.
fn run_tests(project: &Project, python: &Path, dir: &Path, logs: &Path) -> Result<TestRun> {
    std::fs::create_dir_all(logs)?;
    let plugin_dir = logs.join("plugin");
    std::fs::create_dir_all(&plugin_dir)?;
    std::fs::write(plugin_dir.join("npu_fix_check_recorder.py"), RECORDER)?;
    let outcomes_path = logs.join("outcomes.jsonl");
    let _ = std::fs::remove_file(&outcomes_path);
    let mut python_path: Vec<String> = vec![plugin_dir.display().to_string()];
    python_path.extend(
        project
            .python_path
            .iter()
            .map(|p| dir.join(p).display().to_string()),
    );
    let mut args: Vec<String> = vec![
        "-n".into(),
        "10".into(),
        python.display().to_string(),
        "-m".into(),
        "pytest".into(),
        "-p".into(),
        "npu_fix_check_recorder".into(),
        "-p".into(),
        "no:cacheprovider".into(),
        "-q".into(),
        // A module that fails to import is one more outcome to compare, not the end of the run.
        "--continue-on-collection-errors".into(),
        format!("--timeout={}", project.test_timeout_s),
    ];
    args.extend(project.pytest_args.iter().cloned());
    args.extend(project.tests.iter().cloned());
    let t = Instant::now();
    let out = duct::cmd("nice", args)
        .dir(dir)
        .env("PYTHONPATH", python_path.join(":"))
        .env("NPU_PATCHER_FIX_CHECK_OUTCOMES", &outcomes_path)
        .env("CUDA_VISIBLE_DEVICES", "")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("MPLBACKEND", "Agg")
        .stderr_to_stdout()
        .stdout_capture()
        .unchecked()
        .run()
        .with_context(|| format!("cannot run pytest in {}", dir.display()))?;
    let secs = t.elapsed().as_secs_f64();
    std::fs::write(logs.join("pytest.log"), &out.stdout)?;
    // 0 all passed, 1 some failed; 2 interrupted, 3 internal error, 4 usage error, 5 nothing
    // collected: the tests did not run as configured.
    let code = out.status.code().unwrap_or(-1);
    if !matches!(code, 0 | 1) {
        let log = String::from_utf8_lossy(&out.stdout);
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        bail!(
            "pytest exited with {code} in {} (log: {}):\n{}",
            dir.display(),
            logs.join("pytest.log").display(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    let text = std::fs::read_to_string(&outcomes_path).unwrap_or_default();
    Ok(TestRun::from_outcomes(parse_outcomes(&text), secs))
}

/// The recorder's JSON lines: the last outcome of each test id, where an error in any phase
/// wins over the call's outcome.
pub(crate) fn parse_outcomes(text: &str) -> Outcomes {
    #[derive(Deserialize)]
    struct Line {
        test: String,
        outcome: String,
    }
    let mut out = Outcomes::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(line) = serde_json::from_str::<Line>(line) else {
            continue;
        };
        let slot = out.entry(line.test).or_default();
        if slot.as_str() != "error" {
            *slot = line.outcome;
        }
    }
    out
}

/// Run an entry point of the fixed copy one step on the emulated npu with the real
/// `transfer_to_npu`, and judge the report.
fn run_entry(tools: &Tools, python: &Path, dir: &Path, entry: &Entry) -> EntryResult {
    let command = entry.command.join(" ");
    let mut args: Vec<std::ffi::OsString> = vec![
        dir.as_os_str().to_owned(),
        "--pipeline".into(),
        "--emulate-npu".into(),
        "--steps".into(),
        "1".into(),
        "--timeout".into(),
        "600".into(),
        "--python".into(),
        python.as_os_str().to_owned(),
        "--format".into(),
        "json".into(),
        "--quiet".into(),
        "--".into(),
    ];
    args.extend(entry.command.iter().map(std::ffi::OsString::from));
    let out = duct::cmd(&tools.verify, args)
        .dir(dir)
        .stdout_capture()
        .stderr_capture()
        .unchecked()
        .run();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            return EntryResult {
                command,
                ok: false,
                detail: format!("cannot run npu-verify: {e}"),
            };
        }
    };
    let report: serde_json::Value = match serde_json::from_slice(&out.stdout) {
        Ok(v) => v,
        Err(e) => {
            return EntryResult {
                command,
                ok: false,
                detail: format!(
                    "npu-verify wrote no JSON report ({e}): {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            };
        }
    };
    let (ok, detail) = judge_entry(&report, entry.trains);
    EntryResult {
        command,
        ok,
        detail,
    }
}

/// Whether an entry's verify report shows it ran with the NPU setup: the real
/// `transfer_to_npu` ran over the emulated device, the patcher was applied, and the program
/// trained a step (or, for a smoke-test main, ran to its end without an optimizer step).
pub(crate) fn judge_entry(report: &serde_json::Value, trains: bool) -> (bool, String) {
    let check = |name: &str| -> (String, String) {
        report["checks"]
            .as_array()
            .and_then(|checks| checks.iter().find(|c| c["name"] == name))
            .map_or(("missing".to_owned(), String::new()), |c| {
                (
                    c["status"].as_str().unwrap_or("missing").to_owned(),
                    c["detail"].as_str().unwrap_or_default().to_owned(),
                )
            })
    };
    let (t2n, t2n_detail) = check("pipeline.transfer_to_npu");
    let (patches, patches_detail) = check("pipeline.patches");
    let (run, run_detail) = check("pipeline.run");
    if t2n != "pass" {
        return (false, format!("transfer_to_npu: {t2n}: {t2n_detail}"));
    }
    if patches != "pass" && patches != "warn" {
        return (
            false,
            format!("runtime patcher: {patches}: {patches_detail}"),
        );
    }
    let ran = run == "pass" || run == "warn";
    let smoke_ok = !trains && run == "fail" && run_detail.contains("ran no optimizer step");
    if ran || smoke_ok {
        let what = if ran {
            "trained a step"
        } else {
            "ran to its end (a smoke-test main: no optimizer step)"
        };
        (true, format!("{what}; {t2n_detail}; {patches_detail}"))
    } else {
        (false, format!("pipeline.run: {run}: {run_detail}"))
    }
}

fn text_table(reports: &[ProjectReport]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<28} {:>5} {:>7}  {:<34} {:<34} {:<34}",
        "project", "safe", "unsafe", "tests before", "after --fix", "after --fix --unsafe-fixes"
    );
    for r in reports {
        let _ = writeln!(
            s,
            "{:<28} {:>5} {:>7}  {:<34} {:<34} {:<34}",
            format!("{}-{}", r.project, r.version),
            r.safe_fixes,
            r.unsafe_fixes,
            r.before.summary(),
            r.after_safe.summary(),
            r.after_unsafe.summary()
        );
        for c in &r.safe_changes {
            let _ = writeln!(
                s,
                "    SAFE FIX CHANGED {}: {} -> {}",
                c.test, c.before, c.after
            );
        }
        for c in &r.unsafe_changes {
            let _ = writeln!(
                s,
                "    unsafe fixes changed {}: {} -> {} [{}] {}",
                c.test, c.before, c.after, c.verdict, c.reason
            );
        }
        for e in &r.entries {
            let _ = writeln!(
                s,
                "    entry `{}` on the emulated npu: {}: {}",
                e.command,
                if e.ok { "ok" } else { "FAILED" },
                e.detail
            );
        }
        let _ = writeln!(s, "    {}", if r.ok { "ok" } else { "FAILED" });
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcomes(pairs: &[(&str, &str)]) -> Outcomes {
        pairs
            .iter()
            .map(|(t, o)| ((*t).to_owned(), (*o).to_owned()))
            .collect()
    }

    #[test]
    fn the_committed_manifest_reads_and_names_five_projects() {
        let m =
            read_manifest(&crate::project_root().join("tests/fix-check/projects.json")).unwrap();
        assert!(m.projects.len() >= 5);
        for p in &m.projects {
            assert_eq!(p.source.sha256.len(), 64, "{}", p.name);
            assert!(p.source.url.ends_with(&p.source.filename), "{}", p.name);
        }
        read_judged(&crate::project_root().join("tests/fix-check/judged.json")).unwrap();
    }

    #[test]
    fn an_error_in_any_phase_wins_and_xfail_is_kept_apart() {
        let text = r#"{"test": "t.py::a", "outcome": "passed"}
{"test": "t.py::a", "outcome": "error"}
{"test": "t.py::b", "outcome": "error"}
{"test": "t.py::b", "outcome": "passed"}
{"test": "t.py::c", "outcome": "xfailed"}
not json
{"test": "t.py", "outcome": "collect-error"}
"#;
        assert_eq!(
            parse_outcomes(text),
            outcomes(&[
                ("t.py::a", "error"),
                ("t.py::b", "error"),
                ("t.py::c", "xfailed"),
                ("t.py", "collect-error"),
            ])
        );
    }

    #[test]
    fn a_changed_or_missing_test_is_a_change() {
        let before = outcomes(&[("a", "passed"), ("b", "failed"), ("c", "passed")]);
        let after = outcomes(&[("a", "passed"), ("b", "passed"), ("d", "passed")]);
        assert_eq!(
            changes(&before, &after),
            vec![
                ("b".to_owned(), "failed".to_owned(), "passed".to_owned()),
                ("c".to_owned(), "passed".to_owned(), "missing".to_owned()),
                ("d".to_owned(), "missing".to_owned(), "passed".to_owned()),
            ]
        );
        assert!(changes(&before, &before).is_empty());
    }

    #[test]
    fn the_applied_count_comes_from_the_scan_summary() {
        assert_eq!(
            applied_count("x\nApplied 26 fixes in 26 files (P_ENT 26).\n"),
            26
        );
        assert_eq!(applied_count("Applied 1 fix in 1 file (P_ENT 1).\n"), 1);
        assert_eq!(applied_count("nothing\n"), 0);
    }

    #[test]
    fn an_entry_passes_only_with_the_real_transfer_to_npu_and_a_run() {
        let report = |t2n: &str, run: &str, detail: &str| {
            serde_json::json!({"checks": [
                {"name": "pipeline.transfer_to_npu", "status": t2n, "detail": "the real torch-npu 2.14.0 contrib/transfer_to_npu.py ran"},
                {"name": "pipeline.patches", "status": "pass", "detail": "patcher applied"},
                {"name": "pipeline.run", "status": run, "detail": detail},
            ]})
        };
        let no_step = "the program ran no optimizer step: npu-scan found no optimizer";
        assert!(judge_entry(&report("pass", "pass", "1 step"), true).0);
        assert!(judge_entry(&report("pass", "fail", no_step), false).0);
        assert!(!judge_entry(&report("pass", "fail", no_step), true).0);
        assert!(!judge_entry(&report("pass", "fail", "exited with 1: Traceback"), false).0);
        assert!(!judge_entry(&report("warn", "pass", "1 step"), true).0);
    }
}
