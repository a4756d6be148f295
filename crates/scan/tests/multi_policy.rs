//! Porting one policy of a small multi-policy project (`tests/projects/multi_policy_port`: one launch,
//! two policies, tests and examples): the device allow-lists that stop the run are blocking and
//! listed first, `--fix` leaves tests and examples alone unless asked, and the fixed entry trains
//! on the emulated npu with `--device npu`.

use assert_cmd::Command;
use std::path::{Path, PathBuf};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/projects/multi_policy_port")
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A copy of the project under `dir`, with what `npu-assets init` puts there for `P_ENT`.
fn project(dir: &Path) -> PathBuf {
    let root = dir.join("proj");
    copy_dir(&fixture(), &root);
    let patches = root.join("migrate_to_cloudrobo/runtime_patches.py");
    std::fs::create_dir_all(patches.parent().unwrap()).unwrap();
    std::fs::copy(repo().join("assets/runtime_patches.py"), patches).unwrap();
    root
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// `npu-scan ROOT ARGS --no-progress`: (exit code, stdout, stderr).
fn scan(root: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::cargo_bin("npu-scan")
        .unwrap()
        .arg(root)
        .args(args)
        .arg("--no-progress")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// The places (`file:line`) of the blocking issues of a scan's JSON, in its order.
fn blocking(json: &str) -> Vec<String> {
    let doc: serde_json::Value = serde_json::from_str(json).unwrap();
    doc["issues"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i.get("blocking").is_some_and(serde_json::Value::is_string))
        .map(|i| format!("{}:{}", i["file"].as_str().unwrap(), i["line"]))
        .collect()
}

#[test]
fn device_allow_lists_on_the_training_path_are_blocking_and_listed_first() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path());
    let (code, json, stderr) = scan(&root, &["--no-write", "--format", "json"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(
        blocking(&json),
        [
            "mpp/configs.py:11",      // the enum `Accelerator` without an npu member
            "mpp/configs.py:19",      // `Literal["cuda", "cpu", "mps"]`
            "mpp/utils/device.py:7",  // `if device not in (...): raise`
            "mpp/utils/device.py:20", // the unknown-device raise of a dispatch
            "train.py:14",            // argparse `choices=`
        ],
        "{json}"
    );
    // The same allow-list in a test is reported, but does not block the run.
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let in_test = doc["issues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["file"] == "tests/test_act.py" && i["line"] == 11)
        .unwrap_or_else(|| panic!("no issue at tests/test_act.py:11: {json}"));
    assert!(in_test.get("blocking").is_none(), "{in_test}");

    // The listing starts with the five, each saying why it blocks, and the summary names them.
    let (_, text, _) = scan(&root, &["--no-write", "--format", "text"]);
    let heads: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with(' ') && l.contains(": P_"))
        .collect();
    for (n, head) in heads.iter().enumerate() {
        let is_blocking = n < 5;
        let block = text.split(head).nth(1).unwrap();
        let next_head = block.lines().nth(1).unwrap_or_default();
        assert_eq!(
            next_head.starts_with("  blocking: "),
            is_blocking,
            "finding {n} ({head}):\n{text}"
        );
    }
    assert!(heads.len() > 5, "{text}");
    let (_, summary, _) = scan(&root, &["--no-write"]);
    assert!(
        summary.contains("Blocking: 5 issues stop the run on the NPU before anything else does"),
        "{summary}"
    );
}

#[test]
fn fix_leaves_tests_and_examples_alone_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path());
    let test_file = root.join("tests/test_act.py");
    let example = root.join("examples/run_diffusion.py");
    let (test_before, example_before) = (read(&test_file), read(&example));
    let (_, stdout, stderr) = scan(&root, &["--fix", "--output", root.to_str().unwrap()]);
    assert_eq!(read(&test_file), test_before, "{stdout}{stderr}");
    assert_eq!(read(&example), example_before, "{stdout}{stderr}");
    // The training path was fixed.
    assert!(
        read(&root.join("train.py")).contains("_NPU_PATCHER"),
        "{stdout}"
    );
    assert!(
        read(&root.join("mpp/utils/device.py")).contains("(\"cuda\", \"npu\", \"cpu\", \"mps\")"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "Left alone: 3 fixes in 2 test or example files (examples/run_diffusion.py, \
             tests/test_act.py); a training run does not execute them. To fix them too: npu-scan "
        ) && stdout.contains(" --fix --fix-tests-examples"),
        "{stdout}"
    );

    let (_, stdout, stderr) = scan(
        &root,
        &[
            "--fix",
            "--fix-tests-examples",
            "--output",
            root.to_str().unwrap(),
        ],
    );
    assert!(
        read(&test_file).contains("in (\"cuda\", \"npu\")"),
        "{stdout}{stderr}"
    );
    assert!(read(&example).contains("_NPU_PATCHER"), "{stdout}{stderr}");
    assert!(!stdout.contains("Left alone"), "{stdout}");
}

#[test]
fn the_launch_entry_is_fixed_even_in_examples() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path());
    let (_, diff, stderr) = scan(
        &root,
        &["--diff", "--scope", "python examples/run_diffusion.py"],
    );
    assert!(
        diff.contains("+++ b/examples/run_diffusion.py"),
        "{diff}{stderr}"
    );
}

#[test]
fn fix_tests_examples_needs_fix() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path());
    let (code, _, stderr) = scan(&root, &["--fix-tests-examples"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--fix-tests-examples needs --fix or --diff"),
        "{stderr}"
    );
}

/// The python to run the ported project with: `NPU_PATCHER_PYTHON` (set by `cargo xtask test`)
/// or `python3`.
fn python() -> std::process::Command {
    std::process::Command::new(
        std::env::var_os("NPU_PATCHER_PYTHON").unwrap_or_else(|| "python3".into()),
    )
}

/// A python with torch to run the project with; without `NPU_PATCHER_PYTHON` (which `cargo xtask
/// test` always sets) a `python3` without torch skips the runs.
fn has_torch() -> bool {
    std::env::var_os("NPU_PATCHER_PYTHON").is_some()
        || python()
            .args(["-c", "import torch"])
            .output()
            .is_ok_and(|o| o.status.success())
}

/// Run `args` in `root` on the emulated npu (the bundle's emulator first on `PYTHONPATH`), with
/// `env` set too.
fn run_emulated(root: &Path, args: &[&str], env: &[(&str, &Path)]) -> std::process::Output {
    let mut cmd = python();
    cmd.args(args)
        .current_dir(root)
        .env("PYTHONPATH", repo().join("assets/emulator"))
        .env("CUDA_VISIBLE_DEVICES", "")
        .env("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
        .env("NPU_PATCHER_EMULATED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn the_fixed_entry_trains_on_the_emulated_npu_with_device_npu() {
    if !has_torch() {
        // No python with torch here (and no NPU_PATCHER_PYTHON): nothing to run the project with.
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path());
    let (_, stdout, stderr) = scan(
        &root,
        &[
            "--fix",
            "--unsafe-fixes",
            "--output",
            root.to_str().unwrap(),
        ],
    );
    let out = run_emulated(&root, &["train.py", "--device", "npu", "--steps", "2"], &[]);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("loss "),
        "{stdout}{stderr}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The lines `--diff` adds, of the `P_ENT` fixes (the NPU setup at entry points).
fn setup_lines(root: &Path) -> Vec<String> {
    let (_, diff, stderr) = scan(
        root,
        &["--diff", "--select", "P_ENT", "--fix-tests-examples"],
    );
    let added: Vec<String> = diff
        .lines()
        .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
        .map(|l| l[1..].to_owned())
        .collect();
    assert!(added.len() > 20, "{diff}{stderr}");
    added
}

#[test]
fn the_setup_block_stays_within_the_configured_line_length() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path());
    // pyproject.toml sets `[tool.ruff] line-length = 79`.
    for l in setup_lines(&root) {
        assert!(l.chars().count() <= 79, "{l:?}");
    }
    // Without a setting: the default, 88.
    std::fs::remove_file(root.join("pyproject.toml")).unwrap();
    std::fs::create_dir(root.join(".git")).unwrap();
    let lines = setup_lines(&root);
    for l in &lines {
        assert!(l.chars().count() <= 88, "{l:?}");
    }
    assert!(lines.iter().any(|l| l.chars().count() > 79), "{lines:#?}");
}

#[test]
fn an_installed_entry_finds_the_runtime_patcher_through_the_launchers_variable() {
    if !has_torch() {
        // No python with torch here (and no NPU_PATCHER_PYTHON): nothing to run the project with.
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path());
    let (_, stdout, stderr) = scan(
        &root,
        &[
            "--fix",
            "--unsafe-fixes",
            "--output",
            root.to_str().unwrap(),
        ],
    );
    // The ported code, installed elsewhere: no migrate_to_cloudrobo/ above it.
    let site = dir.path().join("site-packages");
    copy_dir(&root.join("mpp"), &site.join("mpp"));
    std::fs::copy(root.join("train.py"), site.join("train.py")).unwrap();
    let args = ["train.py", "--device", "npu", "--steps", "1"];
    let mig = root.join("migrate_to_cloudrobo");
    let out = run_emulated(&site, &args, &[("NPU_PATCHER_MIGRATE_DIR", &mig)]);
    assert!(
        out.status.success(),
        "{stdout}{stderr}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Without the variable the setup looks beside the entry, where there is nothing.
    let out = run_emulated(&site, &args, &[]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("runtime_patches"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An allow-list whose error says the code requires those devices gets an unsafe fix; one that
/// only names the devices it knows gets a safe one. Both block the run.
#[test]
fn an_allow_list_that_states_a_requirement_gets_an_unsafe_fix() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proj");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(
        root.join("share.py"),
        "def share(device):\n    if device not in (\"cpu\", \"cuda\"):\n        raise ValueError(\"sharing requires a CPU or CUDA device\")\n\n\ndef pick(device):\n    if device not in (\"cpu\", \"cuda\"):\n        raise ValueError(f\"unknown device {device}\")\n",
    )
    .unwrap();
    let (_, json, stderr) = scan(&root, &["--no-write", "--format", "json"]);
    let doc: serde_json::Value =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    let by_line = |line: u64| {
        doc["issues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["line"] == line)
            .unwrap_or_else(|| panic!("no issue at line {line}: {json}"))
            .clone()
    };
    let (share, pick) = (by_line(2), by_line(7));
    assert!(
        share["blocking"].is_string() && pick["blocking"].is_string(),
        "{json}"
    );
    assert_eq!(share["fix"]["applicability"], "unsafe", "{json}");
    assert_eq!(pick["fix"]["applicability"], "safe", "{json}");
}
