//! `cargo xtask torch-npu-tests`: `torch_npu`'s own public tests of `transfer_to_npu` on the emulated npu.
//!
//! `conformance/torch_npu_tests.json` pins, per torch-npu release, the file
//! `test/contrib/test_transfer_to_npu.py` of github.com/Ascend/pytorch (commit, sha256). The file is
//! never committed: it is taken from the cache (`<conformance cache>/torch-npu-tests/downloads/`),
//! downloaded from GitHub when it is missing, or put there with `--from FILE` or `--git-dir MIRROR`
//! (checked against the pinned sha256). It runs under pytest with the conformance plugin on the
//! emulated npu twice: with the stand-in `transfer_to_npu` (what `npu-assets init --emulator` gives
//! offline) and with the real module of the paired wheel; `torch_npu.testing` (the harness the file
//! imports) comes from the wheel's Python layer. Prints each test's two outcomes and the counts.
//! Exit codes: 0 every test passed (or was skipped) in both runs, 1 not, 2 a setup error (the file
//! not cached and not downloadable, a venv, a pytest run that wrote no results).

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::conformance::suite::{self, Mode, Outcomes, PytestRun};
use crate::corpus::fetch::{self, Distribution, Kind};

const EXAMPLES: &str = "\
Examples:
  cargo xtask torch-npu-tests                          on the test venv's torch (2.14)
  cargo xtask torch-npu-tests --torch 2.1.0 --torch 2.6.0
  cargo xtask torch-npu-tests --git-dir /path/to/pytorch.git   take the pinned files from a clone
  cargo xtask torch-npu-tests --from test_transfer_to_npu.py   put one file in the cache (sha256-checked)

Exit codes: 0 every test passed or was skipped with both transfer_to_npu; 1 not; 2 a setup error
(the file is not cached and cannot be downloaded, a venv, pytest wrote no results).";

/// The pinned test harness dependency of `torch_npu.testing.testcase`.
const DEPS: &[&str] = &["expecttest==0.3.0"];

#[derive(clap::Args, Debug, Default)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// Run on the torch-matrix venv of this torch (repeatable); default: the test venv.
    #[arg(long = "torch", value_name = "X.Y.Z")]
    pub torch: Vec<String>,
    /// Put this file in the cache first; its sha256 must be one of the manifest's.
    #[arg(long, value_name = "FILE")]
    pub from: Vec<PathBuf>,
    /// Take the pinned files that are not cached from this git clone of Ascend/pytorch
    /// (`git --git-dir DIR show <commit>:<path>`).
    #[arg(long, value_name = "DIR")]
    pub git_dir: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `conformance/torch_npu_tests.json`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    #[allow(dead_code, reason = "documentation for readers of the manifest")]
    about: String,
    files: Vec<TestFile>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct TestFile {
    /// The torch-npu release of `torch-npu/wheels.json` whose tests these are.
    torch_npu: String,
    repo: String,
    #[allow(dead_code, reason = "documentation for readers of the manifest")]
    branch: String,
    commit: String,
    path: String,
    sha256: String,
}

impl TestFile {
    fn distribution(&self) -> Distribution {
        Distribution {
            name: "test_transfer_to_npu".into(),
            version: self.torch_npu.clone(),
            kind: Kind::Sdist,
            filename: format!("test_transfer_to_npu-{}.py", self.torch_npu),
            url: format!(
                "https://raw.githubusercontent.com/{}/{}/{}",
                self.repo, self.commit, self.path
            ),
            sha256: self.sha256.clone(),
            exclude: Vec::new(),
        }
    }
}

fn read_manifest(path: &Path) -> Result<Manifest> {
    let text =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let manifest: Manifest = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a valid manifest", path.display()))?;
    for f in &manifest.files {
        if f.sha256.len() != 64 || !f.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!(
                "{}: {}: sha256 must be 64 hex digits",
                path.display(),
                f.torch_npu
            );
        }
        if f.commit.len() != 40 {
            bail!(
                "{}: {}: commit must be 40 hex digits",
                path.display(),
                f.torch_npu
            );
        }
    }
    Ok(manifest)
}

fn sha256_hex(bytes: &[u8]) -> String {
    issue_model::ids::hex(&Sha256::digest(bytes))
}

/// Write `bytes` to `path` through a temporary file beside it.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let part = path.with_extension(format!("part-{}", std::process::id()));
    fs::write(&part, bytes).with_context(|| format!("cannot write {}", part.display()))?;
    fs::rename(&part, path).with_context(|| format!("cannot write {}", path.display()))
}

/// Put the files `--from` names and those a git clone has into the cache.
fn seed(cache: &Path, manifest: &Manifest, args: &Args) -> Result<()> {
    for file in &args.from {
        let bytes = fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
        let got = sha256_hex(&bytes);
        let Some(entry) = manifest.files.iter().find(|f| f.sha256 == got) else {
            bail!(
                "{}: sha256 {got} is not pinned in conformance/torch_npu_tests.json (take the file at a pinned commit)",
                file.display()
            );
        };
        write_atomic(
            &cache.join("downloads").join(entry.distribution().filename),
            &bytes,
        )?;
    }
    if let Some(git_dir) = &args.git_dir {
        for entry in &manifest.files {
            let target = cache.join("downloads").join(entry.distribution().filename);
            if target.is_file() {
                continue;
            }
            let out = duct::cmd!(
                "git",
                "--git-dir",
                git_dir,
                "show",
                format!("{}:{}", entry.commit, entry.path)
            )
            .stdout_capture()
            .stderr_capture()
            .unchecked()
            .run()
            .with_context(|| "cannot run git".to_owned())?;
            if !out.status.success() {
                eprintln!(
                    "xtask: torch-npu-tests: {} has no {}:{} ({})",
                    git_dir.display(),
                    entry.commit,
                    entry.path,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                continue;
            }
            if sha256_hex(&out.stdout) != entry.sha256 {
                bail!(
                    "{}: {}:{} does not have the pinned sha256",
                    git_dir.display(),
                    entry.commit,
                    entry.path
                );
            }
            write_atomic(&target, &out.stdout)?;
        }
    }
    Ok(())
}

/// One test's outcomes in the two runs.
#[derive(Serialize)]
struct Row {
    test: String,
    standin: String,
    real: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    standin_message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    real_message: Option<String>,
}

/// The result on one torch.
#[derive(Serialize)]
struct TorchReport {
    torch: String,
    torch_npu: String,
    commit: String,
    tests: usize,
    standin_passed: usize,
    real_passed: usize,
    /// What the plugin's session line says ran (`stand-in`, `torch-npu 2.14.0 contrib/transfer_to_npu.py`).
    standin_source: Option<String>,
    real_source: Option<String>,
    rows: Vec<Row>,
}

fn good(outcome: &str) -> bool {
    matches!(outcome, "passed" | "skipped")
}

fn source(outcomes: &Outcomes) -> Option<String> {
    outcomes
        .session
        .as_ref()?
        .get("transfer_to_npu")?
        .as_str()
        .map(str::to_owned)
}

fn short(nodeid: &str) -> String {
    nodeid.rsplit("::").next().unwrap_or(nodeid).to_owned()
}

fn compare(torch: &str, entry: &TestFile, standin: &Outcomes, real: &Outcomes) -> TorchReport {
    let mut ids: Vec<&String> = standin.tests.keys().chain(real.tests.keys()).collect();
    ids.sort();
    ids.dedup();
    let get = |o: &Outcomes, id: &str| {
        o.tests.get(id).map_or(("absent".to_owned(), None), |t| {
            (t.outcome.clone(), t.message.clone())
        })
    };
    let rows: Vec<Row> = ids
        .into_iter()
        .map(|id| {
            let (s, sm) = get(standin, id);
            let (r, rm) = get(real, id);
            Row {
                test: short(id),
                standin_message: (!good(&s)).then_some(sm).flatten(),
                real_message: (!good(&r)).then_some(rm).flatten(),
                standin: s,
                real: r,
            }
        })
        .collect();
    TorchReport {
        torch: torch.to_owned(),
        torch_npu: entry.torch_npu.clone(),
        commit: entry.commit.clone(),
        tests: rows.len(),
        standin_passed: rows.iter().filter(|r| good(&r.standin)).count(),
        real_passed: rows.iter().filter(|r| good(&r.real)).count(),
        standin_source: source(standin),
        real_source: source(real),
        rows,
    }
}

fn render(reports: &[TorchReport]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for r in reports {
        let _ = writeln!(
            out,
            "torch {} / torch-npu {} (Ascend/pytorch {} test/contrib/test_transfer_to_npu.py)",
            r.torch,
            r.torch_npu,
            &r.commit[..10]
        );
        let _ = writeln!(out, "  {:<52} {:<9} {:<9}", "test", "stand-in", "real");
        for row in &r.rows {
            let _ = writeln!(out, "  {:<52} {:<9} {:<9}", row.test, row.standin, row.real);
        }
        for row in &r.rows {
            for (which, msg) in [
                ("stand-in", &row.standin_message),
                ("real", &row.real_message),
            ] {
                if let Some(m) = msg {
                    let line: String = m
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .chars()
                        .take(220)
                        .collect();
                    let _ = writeln!(out, "  {} ({which}): {line}", row.test);
                }
            }
        }
        let _ = writeln!(
            out,
            "  passed: stand-in {}/{}, real module {}/{} ({})\n",
            r.standin_passed,
            r.tests,
            r.real_passed,
            r.tests,
            r.real_source.as_deref().unwrap_or("?")
        );
    }
    out
}

/// `cargo xtask torch-npu-tests`: the exit code.
pub fn main(args: &Args) -> i32 {
    match run(args) {
        Ok(reports) => {
            if args.json {
                match serde_json::to_string_pretty(&reports) {
                    Ok(t) => println!("{t}"),
                    Err(e) => {
                        eprintln!("xtask: torch-npu-tests: error: {e}");
                        return 2;
                    }
                }
            } else {
                print!("{}", render(&reports));
            }
            let all = reports
                .iter()
                .all(|r| r.standin_passed == r.tests && r.real_passed == r.tests);
            i32::from(!all)
        }
        Err(e) => {
            eprintln!("xtask: torch-npu-tests: error: {e:#}");
            2
        }
    }
}

fn run(args: &Args) -> Result<Vec<TorchReport>> {
    let root = crate::project_root();
    let manifest = read_manifest(&root.join("conformance/torch_npu_tests.json"))?;
    let cache = suite::cache_dir().join("torch-npu-tests");
    seed(&cache, &manifest, args)?;
    let wheels = crate::torch_npu::read_manifest(&crate::torch_npu::manifest_path())?.wheels;
    let pythons = crate::conformance::test_venvs(&args.torch)?;
    let torch_npu_dir = crate::torch_npu::ensure_all()?;
    let mut reports = Vec::new();
    for python in &pythons {
        let torch = crate::conformance::torch_version(python)?;
        let Some(wheel) = wheels.iter().find(|w| w.torch == torch) else {
            bail!("no torch-npu wheel of torch-npu/wheels.json pairs with torch {torch}");
        };
        let Some(entry) = manifest.files.iter().find(|f| f.torch_npu == wheel.version) else {
            bail!(
                "conformance/torch_npu_tests.json pins no test file for torch-npu {}",
                wheel.version
            );
        };
        let dist = entry.distribution();
        let file = fetch::download(&cache, &dist).with_context(|| {
            format!(
                "{} is not cached: put it there with `cargo xtask torch-npu-tests --from FILE` (the file at \
                 {}@{}:{}) or `--git-dir <clone of github.com/{}>`",
                dist.filename, entry.repo, entry.commit, entry.path, entry.repo
            )
        })?;
        let deps: Vec<String> = DEPS.iter().map(|d| (*d).to_owned()).collect();
        let venv_python = suite::ensure_venv(
            &suite::cache_dir(),
            &format!("torch-npu-tests-torch{torch}"),
            python,
            &torch,
            &deps,
        )?;
        let tree = cache.join("runs").join(format!("torch-{torch}"));
        fs::create_dir_all(&tree).with_context(|| format!("cannot create {}", tree.display()))?;
        let test_path = tree.join("test_transfer_to_npu.py");
        write_atomic(
            &test_path,
            &fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?,
        )?;
        let wheel_root = torch_npu_dir.join(&wheel.version);
        let mut outcomes = BTreeMap::new();
        for transfer in ["standin", "real"] {
            let env: BTreeMap<String, String> = [
                ("NPU_CONFORMANCE_TRANSFER".to_owned(), transfer.to_owned()),
                (
                    "NPU_CONFORMANCE_TORCH_NPU_TESTING".to_owned(),
                    wheel_root.display().to_string(),
                ),
            ]
            .into();
            let results = tree.join(format!("{transfer}.jsonl"));
            let test_args = vec!["test_transfer_to_npu.py".to_owned()];
            let end = suite::run_pytest(&PytestRun {
                python: &venv_python,
                tree: &tree,
                args: &test_args,
                pythonpath: &[],
                env: &env,
                mode: Mode::Npu,
                default_device: false,
                plugin_dir: &root.join("conformance"),
                emulator_dir: &root.join("assets/emulator"),
                torch_npu_dir: &torch_npu_dir,
                restrictions: true,
                test_timeout: 120,
                run_timeout: 900,
                results: &results,
            })?;
            eprintln!(
                "xtask: torch-npu-tests: torch {torch}, {transfer}: {:.0}s",
                end.secs
            );
            let got = suite::read_outcomes(&results)?;
            if got.tests.is_empty() {
                bail!(
                    "torch {torch}, {transfer}: pytest ran no test (see {})",
                    results.with_extension("log").display()
                );
            }
            outcomes.insert(transfer, got);
        }
        reports.push(compare(
            &torch,
            entry,
            &outcomes["standin"],
            &outcomes["real"],
        ));
    }
    Ok(reports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_manifest_pins_a_file_for_every_wheel_that_has_a_torch_venv() {
        let root = crate::project_root();
        let manifest = read_manifest(&root.join("conformance/torch_npu_tests.json")).unwrap();
        let wheels = crate::torch_npu::read_manifest(&crate::torch_npu::manifest_path())
            .unwrap()
            .wheels;
        for version in ["2.1.0.post17", "2.6.0.post5", "2.14.0"] {
            assert!(wheels.iter().any(|w| w.version == version), "{version}");
            assert!(
                manifest.files.iter().any(|f| f.torch_npu == version),
                "{version}"
            );
        }
    }

    #[test]
    fn a_file_from_outside_is_refused_unless_its_sha256_is_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let good_file = dir.path().join("good.py");
        let bad_file = dir.path().join("bad.py");
        fs::write(&good_file, b"print(1)\n").unwrap();
        fs::write(&bad_file, b"print(2)\n").unwrap();
        let manifest = Manifest {
            about: String::new(),
            files: vec![TestFile {
                torch_npu: "9.9.9".into(),
                repo: "o/r".into(),
                branch: "b".into(),
                commit: "0".repeat(40),
                path: "t.py".into(),
                sha256: sha256_hex(b"print(1)\n"),
            }],
        };
        let cache = dir.path().join("cache");
        let args = Args {
            from: vec![good_file],
            ..Args::default()
        };
        seed(&cache, &manifest, &args).unwrap();
        let cached = cache.join("downloads/test_transfer_to_npu-9.9.9.py");
        assert_eq!(fs::read(&cached).unwrap(), b"print(1)\n");
        // The cached file is what a run takes, without a download.
        assert_eq!(
            fetch::download(&cache, &manifest.files[0].distribution()).unwrap(),
            cached
        );
        let args = Args {
            from: vec![bad_file.clone()],
            ..Args::default()
        };
        let err = format!("{:#}", seed(&cache, &manifest, &args).unwrap_err());
        assert!(
            err.contains("bad.py") && err.contains("not pinned"),
            "{err}"
        );
    }

    #[test]
    fn outcomes_are_compared_per_test_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, lines: &str| {
            let p = dir.path().join(name);
            fs::write(&p, lines).unwrap();
            suite::read_outcomes(&p).unwrap()
        };
        let standin = write(
            "s.jsonl",
            "{\"kind\": \"session\", \"transfer_to_npu\": \"stand-in\"}\n\
             {\"kind\": \"outcome\", \"nodeid\": \"t.py::T::test_a\", \"outcome\": \"failed\", \"message\": \"boom\"}\n\
             {\"kind\": \"outcome\", \"nodeid\": \"t.py::T::test_b\", \"outcome\": \"passed\", \"message\": null}\n",
        );
        let real = write(
            "r.jsonl",
            "{\"kind\": \"outcome\", \"nodeid\": \"t.py::T::test_a\", \"outcome\": \"passed\", \"message\": null}\n",
        );
        let entry = TestFile {
            torch_npu: "9".into(),
            repo: "o/r".into(),
            branch: "b".into(),
            commit: "a".repeat(40),
            path: "t.py".into(),
            sha256: String::new(),
        };
        let r = compare("2.14.0", &entry, &standin, &real);
        assert_eq!((r.tests, r.standin_passed, r.real_passed), (2, 1, 1));
        assert_eq!(r.rows[1].real, "absent");
        assert_eq!(r.rows[0].standin_message.as_deref(), Some("boom"));
        assert_eq!(r.standin_source.as_deref(), Some("stand-in"));
        assert!(render(&[r]).contains("passed: stand-in 1/2, real module 1/2"));
    }
}
