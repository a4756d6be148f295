//! `cargo xtask conformance`: the emulated npu on real projects' own test suites.
//!
//! `conformance/manifest.json` pins public `PyTorch` projects (sdists with their tests, sha256-checked).
//! Each suite runs twice in a per-project venv over a torch venv: on the CPU, and on the emulated
//! npu with the real `transfer_to_npu.py` of the paired torch-npu wheel (so code that picks `cuda`
//! when `torch.cuda.is_available()` runs on the npu; suites that never pick a device get
//! `torch.set_default_device("npu")`). The two outcomes of every test are compared, and each
//! difference must be classified by `conformance/classified.json` (a documented NPU restriction,
//! with its citation, or a nondeterministic test). Exit codes: 0 the goal is met and every
//! difference is classified, 1 not, 2 a setup error (manifest, download, venv, pytest). See
//! `conformance/README.md`.

mod classify;
pub(crate) mod report;
pub(crate) mod suite;

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::corpus::fetch::{Distribution, Kind};
use suite::Mode;

const EXAMPLES: &str = "\
Examples:
  cargo xtask conformance                         every project, on the test venv's torch (2.14)
  cargo xtask conformance --project roma          one project
  cargo xtask conformance --subset                the quick part `cargo xtask test` runs
  cargo xtask conformance --torch 2.6.0           on a torch-matrix venv (repeatable)
  cargo xtask conformance --format json > c.json  the report as JSON
  cargo xtask conformance --cached                judge the last runs again (classified.json edited)
  cargo xtask conformance --no-restrictions       the npu without its documented refusals

Exit codes: 0 the goal is met and every difference is classified; 1 a difference is not
classified, or the share of same outcomes is below the goal; 2 a setup error (manifest,
download, venv, pytest that wrote no results).";

#[derive(clap::Args, Debug, Default)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    #[command(flatten)]
    pub select: ProjectArgs,
    /// Run on the torch-matrix venv of this torch (repeatable); default: the test venv.
    #[arg(long = "torch", value_name = "X.Y.Z")]
    pub torch: Vec<String>,
    /// Only each project's `subset` tests (the part `cargo xtask test` runs).
    #[arg(long)]
    pub subset: bool,
    /// Run the npu with every restriction group of the emulator off (float64, numpy, ...): what
    /// differs then is how the emulated device computes, not what a real NPU refuses.
    #[arg(long)]
    pub no_restrictions: bool,
    /// Judge the results of the last runs again (after editing classified.json) without running
    /// pytest; a project with no results is a setup error.
    #[arg(long)]
    pub cached: bool,
}

/// Which projects of a manifest to run, and how to print the result: the options `cargo xtask
/// conformance` and `cargo xtask fix-check` share.
#[derive(clap::Args, Debug, Default)]
pub struct ProjectArgs {
    /// Only this project (a `name` of the manifest; repeatable).
    #[arg(long = "project", value_name = "NAME")]
    pub project: Vec<String>,
    /// Output format of the report on stdout.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Text,
    Json,
}

/// `conformance/manifest.json`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Manifest {
    #[allow(dead_code, reason = "documentation for readers of the manifest")]
    pub about: String,
    /// The least share of tests (percent) whose outcome on the npu is the CPU's.
    pub goal_percent: f64,
    pub projects: Vec<Project>,
}

/// One pinned project.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct Project {
    /// The `PyPI` name (`pytorch-kinematics`).
    pub name: String,
    pub version: String,
    /// What it is (robot kinematics, RL, 3D rotations).
    pub what: String,
    /// The sdist's file name, the last part of `url`.
    pub filename: String,
    pub url: String,
    pub sha256: String,
    /// Files of the extracted tree to delete (relative paths).
    #[serde(default)]
    pub remove: Vec<String>,
    /// Empty files to create in the extracted tree (a missing `tests/__init__.py`).
    #[serde(default)]
    pub create: Vec<String>,
    /// Folders of the tree put on `PYTHONPATH` (the project is imported from its tree).
    pub pythonpath: Vec<String>,
    /// Extra test dependencies pip installs into the project's venv (pinned).
    #[serde(default)]
    pub deps: Vec<String>,
    /// Extra environment variables of the pytest runs.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The suite never picks a device: `torch.set_default_device("npu")` on the npu.
    pub default_device: bool,
    /// pytest's arguments for the whole suite (paths, `--deselect`, `-k`).
    pub tests: Vec<String>,
    /// pytest's arguments for the quick part; empty: not in the subset.
    #[serde(default)]
    pub subset: Vec<String>,
    /// Seconds one test may run.
    #[serde(default = "default_test_timeout")]
    pub test_timeout_s: u32,
    /// Seconds one whole run may take.
    #[serde(default = "default_run_timeout")]
    pub run_timeout_s: u32,
}

fn default_test_timeout() -> u32 {
    120
}

fn default_run_timeout() -> u32 {
    2400
}

impl Project {
    pub(crate) fn dir_name(&self) -> String {
        format!("{}-{}", self.name, self.version)
    }

    pub(crate) fn distribution(&self) -> Distribution {
        Distribution {
            name: self.name.clone(),
            version: self.version.clone(),
            kind: Kind::Sdist,
            filename: self.filename.clone(),
            url: self.url.clone(),
            sha256: self.sha256.clone(),
            exclude: Vec::new(),
        }
    }
}

pub(crate) fn manifest_path() -> PathBuf {
    crate::project_root().join("conformance/manifest.json")
}

pub(crate) fn read_manifest(path: &Path) -> Result<Manifest> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let manifest: Manifest = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a valid conformance manifest", path.display()))?;
    let mut names = std::collections::BTreeSet::new();
    for p in &manifest.projects {
        if !names.insert(p.name.clone()) {
            bail!("{}: {} is listed twice", path.display(), p.name);
        }
        if p.sha256.len() != 64 || !p.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!("{}: {} has no valid sha256", path.display(), p.name);
        }
        if p.filename.contains(['/', '\\'])
            || p.filename.starts_with('.')
            || !p.url.ends_with(&p.filename)
            || !p.filename.ends_with(".tar.gz")
        {
            bail!(
                "{}: {} has a bad filename {:?} (an sdist .tar.gz, the last part of its url)",
                path.display(),
                p.name,
                p.filename
            );
        }
        if p.tests.is_empty() {
            bail!("{}: {} names no tests", path.display(), p.name);
        }
    }
    if !(0.0..=100.0).contains(&manifest.goal_percent) {
        bail!("{}: goal_percent must be 0..=100", path.display());
    }
    Ok(manifest)
}

/// `cargo xtask conformance`: the exit code (0, 1 or 2).
pub fn main(args: &Args) -> i32 {
    match run(args) {
        Ok(report) => {
            match args.select.format {
                Format::Text => print!("{}", report::render(&report)),
                Format::Json => match serde_json::to_string_pretty(&report) {
                    Ok(text) => println!("{text}"),
                    Err(e) => {
                        eprintln!("xtask: conformance: error: {e}");
                        return 2;
                    }
                },
            }
            i32::from(!report.goal_met())
        }
        Err(e) => {
            eprintln!("xtask: conformance: error: {e:#}");
            2
        }
    }
}

/// Run the selected projects on the selected torch venvs and compare the outcomes.
pub fn run(args: &Args) -> Result<report::Report> {
    let root = crate::project_root();
    let manifest = read_manifest(&manifest_path())?;
    let classified = classify::read(&root.join("conformance/classified.json"), &root)?;
    let projects: Vec<&Project> = if args.select.project.is_empty() {
        manifest.projects.iter().collect()
    } else {
        let mut chosen = Vec::new();
        for name in &args.select.project {
            let Some(p) = manifest.projects.iter().find(|p| &p.name == name) else {
                bail!(
                    "--project {name:?}: not in conformance/manifest.json (projects: {})",
                    manifest
                        .projects
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            };
            chosen.push(p);
        }
        chosen
    };
    let pythons = crate::conformance::test_venvs(&args.torch)?;
    let torch_npu_dir = crate::torch_npu::ensure_all()?;
    let cache = suite::cache_dir();
    let mut report = report::Report::new(manifest.goal_percent, args.subset);
    report.restrictions = !args.no_restrictions;
    for python in &pythons {
        let torch = torch_version(python)?;
        for project in &projects {
            let tests = if args.subset {
                if project.subset.is_empty() {
                    continue;
                }
                &project.subset
            } else {
                &project.tests
            };
            let measured = measure(&Measure {
                root: &root,
                cache: &cache,
                project,
                python,
                torch: &torch,
                tests,
                torch_npu_dir: &torch_npu_dir,
                cached: args.cached,
                restrictions: !args.no_restrictions,
                subset: args.subset,
            })?;
            report.add(classify::judge(measured, &classified));
        }
    }
    Ok(report)
}

/// The interpreters a run uses: the test venv, or one torch-matrix venv per `--torch` version.
pub(crate) fn test_venvs(torch: &[String]) -> Result<Vec<PathBuf>> {
    if torch.is_empty() {
        return Ok(vec![crate::venv::ensure(
            &crate::venv::default_requirements(),
        )?]);
    }
    torch
        .iter()
        .map(|v| crate::venv::ensure(&crate::venv::requirements_for_torch(v)?))
        .collect()
}

/// The torch version of a venv's interpreter (`2.14.0`, without a local `+cpu` part).
pub(crate) fn torch_version(python: &Path) -> Result<String> {
    let out = duct::cmd!(python, "-c", "import torch; print(torch.__version__)")
        .stdout_capture()
        .unchecked()
        .run()
        .with_context(|| format!("cannot run {}", python.display()))?;
    if !out.status.success() {
        bail!("{} cannot import torch", python.display());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text.trim().split('+').next().unwrap_or_default().to_owned())
}

struct Measure<'a> {
    root: &'a Path,
    cache: &'a Path,
    project: &'a Project,
    python: &'a Path,
    torch: &'a str,
    tests: &'a [String],
    torch_npu_dir: &'a Path,
    cached: bool,
    /// The emulator's restriction groups stay on.
    restrictions: bool,
    /// Only the project's `subset` tests run.
    subset: bool,
}

/// Both runs of one project, before classification.
pub(crate) struct Measured {
    pub project: Project,
    pub torch: String,
    pub transfer_to_npu: Option<String>,
    pub cpu: suite::Outcomes,
    pub npu: suite::Outcomes,
    pub secs: [f64; 2],
    /// Runs that ended before pytest's own finish (timeout, crash).
    pub incomplete: Vec<String>,
}

fn measure(m: &Measure) -> Result<Measured> {
    let p = m.project;
    let tree = suite::unpack(m.cache, &p.distribution(), &p.remove, &p.create)
        .with_context(|| format!("{}: cannot prepare its sources", p.name))?;
    let venv_name = format!("{}-torch{}", p.dir_name(), m.torch);
    let python = if m.cached {
        PathBuf::new() // no run: no venv
    } else {
        suite::ensure_venv(m.cache, &venv_name, m.python, m.torch, &p.deps)?
    };
    let results = m
        .cache
        .join("runs")
        .join(format!("torch-{}", m.torch))
        .join(p.dir_name());
    let mut runs = Vec::new();
    let mut secs = [0.0; 2];
    let mut incomplete = Vec::new();
    for (i, mode) in [Mode::Cpu, Mode::Npu].into_iter().enumerate() {
        // The subset and the unrestricted runs never replace the whole set's results.
        let file = results.join(format!(
            "{}{}{}.jsonl",
            if m.subset { "subset-" } else { "" },
            mode.name(),
            if mode == Mode::Npu && !m.restrictions {
                "-unrestricted"
            } else {
                ""
            }
        ));
        if m.cached {
            let outcomes = suite::read_outcomes(&file).with_context(|| {
                format!("{} ({}): no results of an earlier run", p.name, mode.name())
            })?;
            if !outcomes.finished {
                incomplete.push(format!("{}: the cached run did not finish", mode.name()));
            }
            runs.push(outcomes);
            continue;
        }
        eprintln!(
            "xtask: conformance: {} on torch {} ({}) ...",
            p.dir_name(),
            m.torch,
            mode.name()
        );
        let end = suite::run_pytest(&suite::PytestRun {
            python: &python,
            tree: &tree,
            args: m.tests,
            pythonpath: &p.pythonpath,
            env: &p.env,
            mode,
            default_device: p.default_device,
            plugin_dir: &m.root.join("conformance"),
            emulator_dir: &m.root.join("assets/emulator"),
            torch_npu_dir: m.torch_npu_dir,
            restrictions: m.restrictions,
            test_timeout: p.test_timeout_s,
            run_timeout: p.run_timeout_s,
            results: &file,
        })?;
        secs[i] = end.secs;
        let outcomes = suite::read_outcomes(&file)
            .with_context(|| format!("{} ({}): pytest wrote no results", p.name, mode.name()))?;
        if outcomes.session.is_none() {
            bail!(
                "{} ({}): pytest did not start the plugin's session (pytest exited {:?}): see {}",
                p.name,
                mode.name(),
                end.code,
                file.with_extension("log").display()
            );
        }
        if !outcomes.finished {
            incomplete.push(format!(
                "{}: {}",
                mode.name(),
                if end.timed_out {
                    format!("past the run timeout of {}s", p.run_timeout_s)
                } else {
                    format!("the interpreter died (exit {:?})", end.code)
                }
            ));
        }
        eprintln!(
            "xtask: conformance: {} ({}): {} tests in {:.0}s",
            p.dir_name(),
            mode.name(),
            outcomes.tests.len(),
            end.secs
        );
        runs.push(outcomes);
    }
    let npu = runs.pop().unwrap_or_default();
    let cpu = runs.pop().unwrap_or_default();
    let transfer_to_npu = npu
        .session
        .as_ref()
        .and_then(|s| s.get("transfer_to_npu"))
        .and_then(|v| v.as_str())
        .map(str::to_owned);
    Ok(Measured {
        project: p.clone(),
        torch: m.torch.to_owned(),
        transfer_to_npu,
        cpu,
        npu,
        secs,
        incomplete,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_manifest_is_valid_and_has_six_projects_and_a_subset() {
        let manifest = read_manifest(&manifest_path()).expect("manifest parses");
        assert!(manifest.projects.len() >= 6);
        assert!(manifest.projects.iter().any(|p| !p.subset.is_empty()));
        assert!(manifest.goal_percent >= 99.0);
    }

    #[test]
    fn a_manifest_with_a_bad_filename_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.json");
        std::fs::write(
            &path,
            r#"{"about": "", "goal_percent": 99, "projects": [{"name": "x", "version": "1",
            "what": "", "filename": "../x.tar.gz", "url": "https://h/../x.tar.gz",
            "sha256": "0000000000000000000000000000000000000000000000000000000000000000",
            "pythonpath": ["."], "default_device": true, "tests": ["t"]}]}"#,
        )
        .unwrap();
        let err = format!("{:#}", read_manifest(&path).err().unwrap());
        assert!(
            err.contains("m.json") && err.contains("bad filename"),
            "{err}"
        );
    }
}
