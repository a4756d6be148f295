//! Helpers shared by the verify tests: the test interpreter, a prepared copy of a demo project
//! (or the `migrate_to_cloudrobo/` of any project), the `transfer_to_npu` a torch pairs with, and
//! a check of a report by name.

#![allow(
    dead_code,
    reason = "each test binary uses its own part of these helpers"
)]

use std::path::{Path, PathBuf};

pub fn python() -> PathBuf {
    let Some(py) = std::env::var_os("NPU_PATCHER_PYTHON") else {
        panic!(
            "NPU_PATCHER_PYTHON is not set: run `cargo xtask test`, or export \
             NPU_PATCHER_PYTHON=$(cargo xtask venv) before `cargo test -p verify`"
        );
    };
    PathBuf::from(py)
}

/// A copy of the tree `from` at `to`, without `__pycache__/` and `outputs/`.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "__pycache__" || name == "outputs" {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &to.join(&name));
        } else {
            std::fs::copy(entry.path(), to.join(&name)).unwrap();
        }
    }
}

/// A copy of `assets/demo/<name>` with `migrate_to_cloudrobo/` set up as the workflow's step 1 does.
pub fn demo(dir: &Path, name: &str) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../assets/demo")
        .join(name);
    let root = dir.join(name);
    copy_tree(&source, &root);
    set_up_migrate(&root);
    root
}

/// `<root>/migrate_to_cloudrobo/` with `env_npu.sh`, `train.sh` and `runtime_patches.py`, as the
/// workflow's step 1 writes them.
pub fn set_up_migrate(root: &Path) {
    let migrate = root.join("migrate_to_cloudrobo");
    std::fs::create_dir_all(&migrate).unwrap();
    for (asset, file) in [
        ("templates/env_npu.sh", "env_npu.sh"),
        ("templates/train.sh", "train.sh"),
        ("runtime_patches.py", "runtime_patches.py"),
    ] {
        let bytes =
            patch_assets::get(asset).unwrap_or_else(|| panic!("asset {asset} is not embedded"));
        std::fs::write(migrate.join(file), bytes).unwrap();
    }
}

/// The `transfer_to_npu` that `--emulate-npu` runs on torch `base` (no local suffix): the real
/// one of the pinned torch-npu wheel (`torch-npu/wheels.json`) that pairs with it, which
/// `cargo xtask test` extracts before the tests; the stand-in when no pinned wheel pairs with it.
pub fn transfer_source_for(base: &str) -> String {
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../torch-npu/wheels.json"))
            .unwrap(),
    )
    .unwrap();
    manifest["wheels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["torch"] == base)
        .map_or_else(
            || "stand-in".to_owned(),
            |w| {
                format!(
                    "torch-npu {} contrib/transfer_to_npu.py",
                    w["version"].as_str().unwrap()
                )
            },
        )
}

/// The torch-npu release whose kernel table the emulator uses on the test interpreter's torch: the
/// pinned wheel (`torch-npu/wheels.json`) that pairs with its base version, if any.
pub fn paired_torch_npu() -> Option<String> {
    let out = std::process::Command::new(python())
        .args(["-c", "import torch; print(torch.__version__.split('+')[0])"])
        .output()
        .unwrap();
    let base = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../torch-npu/wheels.json"))
            .unwrap(),
    )
    .unwrap();
    manifest["wheels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["torch"] == base.as_str())
        .map(|w| w["version"].as_str().unwrap().to_owned())
}

/// `npu-verify <root> --format json --python <test interpreter> <args>` with `env` set (and no
/// `ASCEND_RT_VISIBLE_DEVICES` from the caller): the exit code, the report and stderr.
pub fn verify_json(
    root: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, serde_json::Value, String) {
    let mut cmd = assert_cmd::Command::cargo_bin("npu-verify").unwrap();
    cmd.arg(root)
        .args(["--format", "json", "--python"])
        .arg(python())
        .args(args)
        .env_remove("ASCEND_RT_VISIBLE_DEVICES");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (
        out.status.code(),
        report,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The check `name` of a report (panics with the report when it is missing).
pub fn check<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {report:#}"))
}

/// The options of every `--parity` run of the tests: three steps on the emulated npu.
pub const PARITY: [&str; 6] = [
    "--parity",
    "--steps",
    "3",
    "--emulate-npu",
    "--timeout",
    "300",
];

/// `npu-verify <root> --parity --steps 3 --emulate-npu --timeout 300 <extra> -- python train.py`
/// with `env` set, as [`verify_json`] runs it.
pub fn parity(
    root: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, serde_json::Value, String) {
    let args = [&PARITY[..], extra, &["--", "python", "train.py"]].concat();
    verify_json(root, &args, env)
}

/// `git -C root <args>` as a fixed test author; panics with git's output when it fails.
pub fn git(root: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}
