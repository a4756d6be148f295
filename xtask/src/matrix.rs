//! The torch matrix of `cargo xtask test`: the runtime-patch suite, the emulator and harness suites,
//! and the emulated `npu-verify --runtime --pipeline` of the demo on torch versions other than the
//! default venv's ([`crate::venv::MATRIX`], or `--torch X.Y.Z`), each in its own cached venv.
//!
//! Each version leaves `tests/torch-matrix/results/torch-<version>.json`: what the suites ran
//! (counts, every skip with its reason) and what `tests/torch-matrix/probe.py` found (patch states,
//! the round trip, each patch's self-test and each emulator restriction on the emulated npu). The
//! support tables are rendered from those files (`cargo xtask support-table`). Timings are printed,
//! never written there: they differ between runs.

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The folder of the committed results, one file per torch version.
pub const RESULTS_DIR: &str = "tests/torch-matrix/results";

/// How one step went: its name, whether it passed, how long it took.
pub struct Step {
    pub name: String,
    pub ok: bool,
    pub secs: f64,
}

/// What the caller's environment gives every child: the torch-npu wheels and the target folder.
pub struct Env<'a> {
    pub cargo: &'a str,
    pub wheels: &'a Path,
    pub path_tail: Option<std::ffi::OsString>,
}

/// Run the matrix steps for every version; each step is reported through `report` as it ends.
pub fn run(versions: &[String], env: &Env<'_>, report: &mut dyn FnMut(Step)) {
    for version in versions {
        run_version(version, env, report);
    }
}

fn timed(name: String, started: Instant, ok: bool, report: &mut dyn FnMut(Step)) -> bool {
    report(Step {
        name,
        ok,
        secs: started.elapsed().as_secs_f64(),
    });
    ok
}

fn run_version(version: &str, env: &Env<'_>, report: &mut dyn FnMut(Step)) {
    let root = crate::project_root();
    let t = Instant::now();
    let python =
        crate::venv::requirements_for_torch(version).and_then(|req| crate::venv::ensure(&req));
    let python = match python {
        Ok(python) => python,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            timed(format!("torch {version}: venv"), t, false, report);
            return;
        }
    };
    timed(format!("torch {version}: venv"), t, true, report);
    let path = path_with(&python, env.path_tail.as_ref());
    let scratch = std::env::temp_dir().join(format!("npu-patcher-matrix-{version}"));
    let _ = std::fs::create_dir_all(&scratch);

    let mut suites = serde_json::Map::new();
    for (label, dirs) in [
        ("runtime-patch suite", &["tests/python/patches"][..]),
        (
            "emulator and harness suites",
            &["tests/python/emulator", "tests/python/harness"][..],
        ),
    ] {
        let t = Instant::now();
        let record = scratch.join(format!("{}.json", label.replace(' ', "-")));
        let _ = std::fs::remove_file(&record);
        let mut args: Vec<String> = vec!["-m".into(), "pytest".into(), "-q".into()];
        args.extend(dirs.iter().map(|d| (*d).to_owned()));
        let ok = duct::cmd(&python, &args)
            .dir(&root)
            .env("NPU_PATCHER_TORCH_NPU_DIR", env.wheels)
            .env("NPU_PATCHER_PYTHON", &python)
            .env("PATH", &path)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("NPU_PATCHER_MATRIX_RESULTS", &record)
            .stdin_null()
            .unchecked()
            .run()
            .is_ok_and(|o| o.status.success());
        timed(format!("torch {version}: {label}"), t, ok, report);
        if let Some(Value::Object(found)) =
            read_json(&record).and_then(|v| v.get("suites").cloned())
        {
            suites.extend(found);
        }
    }

    let t = Instant::now();
    let demo_ok = duct::cmd!(
        env.cargo,
        "test",
        "-p",
        "verify",
        "--test",
        "demo_emulated",
        "--locked"
    )
    .dir(&root)
    .env("NPU_PATCHER_TORCH_NPU_DIR", env.wheels)
    .env("NPU_PATCHER_PYTHON", &python)
    .env("PATH", &path)
    .env("PYTHONDONTWRITEBYTECODE", "1")
    .stdin_null()
    .unchecked()
    .run()
    .is_ok_and(|o| o.status.success());
    timed(
        format!("torch {version}: demo npu-verify --runtime --pipeline --emulate-npu"),
        t,
        demo_ok,
        report,
    );

    let t = Instant::now();
    let written = probe(&python, &path).and_then(|mut found| {
        print_timing(version, &found);
        if let Value::Object(map) = &mut found {
            map.remove("timing");
            map.insert("suites".into(), Value::Object(suites));
            map.insert(
                "demo_verify".into(),
                json!(if demo_ok { "passes" } else { "fails" }),
            );
        }
        write_result(&root, version, &found)
    });
    if let Err(e) = &written {
        eprintln!("xtask: error: {e:#}");
    }
    timed(
        format!("torch {version}: probe and results"),
        t,
        written.is_ok(),
        report,
    );
}

/// Run `tests/torch-matrix/probe.py` with `python` and parse its JSON.
pub fn probe(python: &Path, path: &std::ffi::OsStr) -> Result<Value> {
    let root = crate::project_root();
    let out = duct::cmd!(python, "tests/torch-matrix/probe.py")
        .dir(&root)
        .env("PATH", path)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdout_capture()
        .stdin_null()
        .unchecked()
        .run()
        .with_context(|| format!("cannot run {}", python.display()))?;
    if !out.status.success() {
        bail!("tests/torch-matrix/probe.py failed ({})", out.status);
    }
    serde_json::from_slice(&out.stdout).context("tests/torch-matrix/probe.py did not print JSON")
}

/// The results of the default venv's torch: its pytest record and the probe.
pub fn record_default(python: &Path, path: &std::ffi::OsStr, record: &Path, demo_ok: bool) {
    let root = crate::project_root();
    let written = probe(python, path).and_then(|mut found| {
        let version = found["torch"].as_str().unwrap_or("unknown").to_owned();
        print_timing(&version, &found);
        let suites = read_json(record)
            .and_then(|v| v.get("suites").cloned())
            .unwrap_or_else(|| json!({}));
        let keep: serde_json::Map<String, Value> = suites
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| ["patches", "emulator", "harness"].contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        if let Value::Object(map) = &mut found {
            map.remove("timing");
            map.insert("suites".into(), Value::Object(keep));
            map.insert(
                "demo_verify".into(),
                json!(if demo_ok { "passes" } else { "fails" }),
            );
        }
        write_result(&root, &version, &found)
    });
    if let Err(e) = written {
        eprintln!("xtask: error: the default torch's matrix record: {e:#}");
    }
}

fn print_timing(version: &str, found: &Value) {
    if let Some(timing) = found.get("timing") {
        eprintln!("xtask: torch {version}: emulator timing {timing}");
    }
}

fn write_result(root: &Path, version: &str, found: &Value) -> Result<()> {
    // Suites in name order, however they were collected: the file is committed and diffed.
    let mut found = found.clone();
    if let Some(Value::Object(suites)) = found.get_mut("suites") {
        let sorted: std::collections::BTreeMap<String, Value> =
            std::mem::take(suites).into_iter().collect();
        suites.extend(sorted);
    }
    let found = &found;
    let dir = root.join(RESULTS_DIR);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join(format!("torch-{version}.json"));
    let text = serde_json::to_string_pretty(found)? + "\n";
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
}

fn read_json(path: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn path_with(python: &Path, tail: Option<&std::ffi::OsString>) -> std::ffi::OsString {
    let mut dirs: Vec<PathBuf> = python.parent().map(Path::to_path_buf).into_iter().collect();
    if let Some(tail) = tail {
        dirs.extend(std::env::split_paths(tail));
    }
    std::env::join_paths(dirs).unwrap_or_default()
}
