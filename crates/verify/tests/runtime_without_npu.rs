//! `--runtime` without `--emulate-npu` on the test venv (CPU torch, no `torch_npu`): stand-in
//! `torch_npu` packages on `PYTHONPATH` reproduce the import failures of a real machine, which
//! verify must classify (CANN not sourced, a missing library, a build mismatch, not installed).
//!
//! Needs `NPU_PATCHER_PYTHON` (set by `cargo xtask test`; `cargo xtask venv` prints the path).

mod common;

use assert_cmd::Command;
use common::{check, python};
use std::path::{Path, PathBuf};

/// A project plus a folder holding a `torch_npu` package whose `__init__.py` is `init`.
fn setup(dir: &Path, init: Option<&str>) -> (PathBuf, PathBuf) {
    let root = dir.join("model");
    std::fs::create_dir_all(root.join("migrate_to_cloudrobo")).unwrap();
    let site = dir.join("site");
    std::fs::create_dir_all(site.join("torch_npu")).unwrap();
    if let Some(init) = init {
        std::fs::write(site.join("torch_npu/__init__.py"), init).unwrap();
    } else {
        std::fs::remove_dir(site.join("torch_npu")).unwrap();
    }
    (root, site)
}

fn runtime(root: &Path, site: &Path, env: &[(&str, &str)]) -> serde_json::Value {
    let mut cmd = Command::cargo_bin("npu-verify").unwrap();
    cmd.arg(root)
        .args(["--runtime", "--format", "json", "--python"])
        .arg(python())
        .env("PYTHONPATH", site)
        .env_remove("ASCEND_HOME_PATH")
        .env_remove("ASCEND_OPP_PATH")
        .env_remove("ASCEND_RT_VISIBLE_DEVICES");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

const MISSING_LIB: &str =
    "raise ImportError('libhccl.so: cannot open shared object file: No such file or directory')\n";

#[test]
fn a_missing_library_without_cann_means_cann_is_not_sourced() {
    let dir = tempfile::tempdir().unwrap();
    let (root, site) = setup(dir.path(), Some(MISSING_LIB));
    let report = runtime(&root, &site, &[]);
    let npu = check(&report, "runtime.torch_npu");
    assert_eq!(npu["status"], "fail");
    assert_eq!(npu["data"]["reason"], "cann-not-sourced", "{npu:#}");
    assert!(
        npu["remedy"].as_str().unwrap().contains("set_env.sh"),
        "{npu:#}"
    );
    assert_eq!(npu["emulated"], false);
    assert_eq!(check(&report, "runtime.python")["status"], "pass");
}

#[test]
fn a_missing_library_with_cann_sourced_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (root, site) = setup(dir.path(), Some(MISSING_LIB));
    let cann = dir.path().display().to_string();
    let report = runtime(
        &root,
        &site,
        &[("ASCEND_HOME_PATH", &cann), ("ASCEND_OPP_PATH", &cann)],
    );
    let npu = check(&report, "runtime.torch_npu");
    assert_eq!(npu["data"]["reason"], "missing-library", "{npu:#}");
    assert!(
        npu["detail"].as_str().unwrap().contains("libhccl.so"),
        "{npu:#}"
    );
}

#[test]
fn an_undefined_symbol_is_a_build_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let (root, site) = setup(
        dir.path(),
        Some("raise ImportError('torch_npu/_C.so: undefined symbol: _ZN3c104impl8GPUTrace')\n"),
    );
    let report = runtime(&root, &site, &[]);
    assert_eq!(
        check(&report, "runtime.torch_npu")["data"]["reason"],
        "version-mismatch"
    );
}

#[test]
fn no_torch_npu_at_all_says_how_to_get_it() {
    let dir = tempfile::tempdir().unwrap();
    let (root, site) = setup(dir.path(), None);
    let report = runtime(&root, &site, &[]);
    let npu = check(&report, "runtime.torch_npu");
    assert_eq!(npu["data"]["reason"], "not-installed", "{npu:#}");
    assert!(
        npu["remedy"].as_str().unwrap().contains("--emulate-npu"),
        "{npu:#}"
    );
}

#[test]
fn torch_npu_for_another_torch_fails_the_version_pairing() {
    let dir = tempfile::tempdir().unwrap();
    let (root, site) = setup(dir.path(), Some("__version__ = '2.1.0.post3'\n"));
    let report = runtime(&root, &site, &[]);
    assert_eq!(check(&report, "runtime.torch_npu")["status"], "pass");
    let versions = check(&report, "runtime.versions");
    assert_eq!(versions["status"], "fail");
    assert!(
        versions["detail"]
            .as_str()
            .unwrap()
            .contains("base versions 2.1.0 and"),
        "{versions:#}"
    );
    let cann = check(&report, "runtime.cann_env");
    assert_eq!(cann["status"], "fail");
    assert!(
        cann["detail"]
            .as_str()
            .unwrap()
            .contains("ASCEND_HOME_PATH is not set"),
        "{cann:#}"
    );
    assert_eq!(
        check(&report, "runtime.devices")["status"],
        "fail",
        "no torch.npu module, no device"
    );
}
