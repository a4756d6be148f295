//! Helpers shared by the emulated verify tests: the test interpreter, a prepared copy of a demo
//! project, and a check of a report by name.

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

fn copy_tree(from: &Path, to: &Path) {
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
    let migrate = root.join("migrate_to_cloudrobo");
    std::fs::create_dir_all(&migrate).unwrap();
    for (asset, file) in [
        ("templates/env_npu.sh", "env_npu.sh"),
        ("templates/train.sh", "train.sh"),
        ("runtime_patches.py", "runtime_patches.py"),
    ] {
        std::fs::write(migrate.join(file), patch_assets::get(asset).unwrap()).unwrap();
    }
    root
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
