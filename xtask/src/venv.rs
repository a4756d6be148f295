//! The cached Python test venv: CPU torch, numpy, pytest, `PyYAML`, pinned in `requirements-test.txt`.
//!
//! It lives outside the clone (`$NPU_PATCHER_VENV_DIR`, else `$XDG_CACHE_HOME/npu-patcher`, else
//! `~/.cache/npu-patcher`) under a name keyed by the requirements file's hash, so repeat runs
//! and fresh clones reuse it, and a changed pin builds a new one.

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// Create the venv if needed and return its Python interpreter.
pub fn ensure() -> Result<PathBuf> {
    let root = crate::project_root();
    let requirements = root.join("requirements-test.txt");
    let text = std::fs::read(&requirements)
        .with_context(|| format!("cannot read {}", requirements.display()))?;
    let hash = issue_model::ids::hex(&Sha256::digest(&text)[..6]);
    let venv = cache_dir().join(format!("venv-{hash}"));
    let python = venv.join("bin").join("python");
    let ready = venv.join(".complete");
    if ready.exists() && python.exists() {
        return Ok(python);
    }
    // Several processes may ask at once (parallel test runs): one builds, the others wait.
    std::fs::create_dir_all(cache_dir())?;
    let lock_path = cache_dir().join(format!("venv-{hash}.lock"));
    let lock = std::fs::File::create(&lock_path)
        .with_context(|| format!("cannot create {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("cannot lock {}", lock_path.display()))?;
    if ready.exists() && python.exists() {
        return Ok(python);
    }
    let base = find_base_python()?;
    eprintln!(
        "xtask: creating the test venv at {} (one time)",
        venv.display()
    );
    if venv.exists() {
        std::fs::remove_dir_all(&venv)
            .with_context(|| format!("cannot remove the incomplete venv {}", venv.display()))?;
    }
    duct::cmd!(&base, "-m", "venv", &venv)
        .run()
        .with_context(|| format!("`{} -m venv` failed", base.display()))?;
    duct::cmd!(
        &python,
        "-m",
        "pip",
        "install",
        "--quiet",
        "-r",
        &requirements
    )
    .run()
    .context("pip install of requirements-test.txt failed")?;
    std::fs::write(&ready, &text)?;
    Ok(python)
}

pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("NPU_PATCHER_VENV_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("npu-patcher");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".cache").join("npu-patcher")
}

fn find_base_python() -> Result<PathBuf> {
    for name in [
        "python3.11",
        "python3.12",
        "python3.13",
        "python3.10",
        "python3",
    ] {
        let probe = duct::cmd!(name, "-c", "import sys; print(sys.executable)")
            .stdout_capture()
            .stderr_null()
            .unchecked()
            .run();
        if let Ok(out) = probe
            && out.status.success()
        {
            let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if !path.is_empty() {
                return Ok(PathBuf::from(path));
            }
        }
    }
    bail!(
        "no Python 3.10+ interpreter found on PATH (looked for python3.11, python3.12, python3.13, python3.10, python3); install one"
    )
}
