//! `cargo xtask dist`: the release bundle, a drop-in skill directory.
//!
//! Layout under `target/dist/huawei-cloud-cloudrobo-npu-patcher/`:
//! `SKILL.md`, `scripts/{scan,progress,verify}.py` (shims that exec the bundled binaries),
//! `scripts/runtime_patches.py`, `bin/npu-*`, `references/fix-templates/*.md`,
//! `templates/{env_npu.sh,train.sh,ADAPTATION_SUMMARY.md}`; then a `.tar.gz` beside it and its
//! `.sha256`. Staging is removed and rebuilt every time.

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::fs;
use std::path::{Path, PathBuf};

/// The bundle's directory name, which is also the skill's name.
pub const BUNDLE_NAME: &str = "huawei-cloud-cloudrobo-npu-patcher";

/// Binaries in the bundle: (cargo package, binary name).
pub const BINARIES: [(&str, &str); 5] = [
    ("scan", "npu-scan"),
    ("progress", "npu-progress"),
    ("verify", "npu-verify"),
    ("train-wrap", "npu-train"),
    ("patch-assets", "npu-assets"),
];

/// The seed's script names and the binary each one runs.
pub const SHIMS: [(&str, &str); 3] = [
    ("scan.py", "npu-scan"),
    ("progress.py", "npu-progress"),
    ("verify.py", "npu-verify"),
];

/// The templates copied to `templates/`.
pub const TEMPLATES: [&str; 3] = ["env_npu.sh", "train.sh", "ADAPTATION_SUMMARY.md"];

#[derive(clap::Args, Default)]
pub struct Args {
    /// Bundle debug binaries (quicker; used by `cargo xtask test`).
    #[arg(long)]
    pub debug: bool,
    /// Do not write the .tar.gz and .sha256.
    #[arg(long)]
    pub no_archive: bool,
}

/// Build the bundle and return its directory.
pub fn run(args: &Args) -> Result<PathBuf> {
    let root = crate::project_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut build: Vec<String> = vec!["build".into(), "--locked".into()];
    if !args.debug {
        build.push("--release".into());
    }
    for (package, _) in BINARIES {
        build.push("-p".into());
        build.push(package.into());
    }
    duct::cmd(&cargo, &build)
        .dir(&root)
        .run()
        .context("building the binaries failed")?;
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let bin_dir = target.join(if args.debug { "debug" } else { "release" });

    let dist = root.join("target").join("dist");
    let stage = dist.join(BUNDLE_NAME);
    if stage.exists() {
        fs::remove_dir_all(&stage).with_context(|| format!("cannot clean {}", stage.display()))?;
    }
    let assets = root.join("assets");
    copy(&assets.join("SKILL.md"), &stage.join("SKILL.md"))?;
    for (script, binary) in SHIMS {
        let path = stage.join("scripts").join(script);
        write(&path, &shim(binary))?;
        make_executable(&path)?;
    }
    copy(
        &assets.join("runtime_patches.py"),
        &stage.join("scripts").join("runtime_patches.py"),
    )?;
    for (_, binary) in BINARIES {
        let to = stage.join("bin").join(binary);
        copy(&bin_dir.join(binary), &to)?;
        make_executable(&to)?;
    }
    for template in fix_templates(&root)? {
        copy(
            &assets.join("fix-templates").join(&template),
            &stage
                .join("references")
                .join("fix-templates")
                .join(&template),
        )?;
    }
    for template in TEMPLATES {
        let to = stage.join("templates").join(template);
        copy(&assets.join("templates").join(template), &to)?;
        if Path::new(template).extension().is_some_and(|e| e == "sh") {
            make_executable(&to)?;
        }
    }

    if !args.no_archive {
        let archive = dist.join(format!("{BUNDLE_NAME}.tar.gz"));
        write_archive(&stage, &archive)?;
        let digest = issue_model::ids::hex(&Sha256::digest(fs::read(&archive)?));
        write(
            &dist.join(format!("{BUNDLE_NAME}.tar.gz.sha256")),
            &format!("{digest}  {BUNDLE_NAME}.tar.gz\n"),
        )?;
        eprintln!("xtask: wrote {} (sha256 {digest})", archive.display());
    }
    eprintln!("xtask: bundle at {}", stage.display());
    Ok(stage)
}

/// The fix templates shipped in `assets/fix-templates/`, sorted.
pub fn fix_templates(root: &Path) -> Result<Vec<String>> {
    let dir = root.join("assets").join("fix-templates");
    let mut names = Vec::new();
    for entry in fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.starts_with("P_") && Path::new(&name).extension().is_some_and(|e| e == "md") {
            names.push(name);
        }
    }
    names.sort();
    if names.is_empty() {
        bail!("no fix templates (P_*.md) in {}", dir.display());
    }
    Ok(names)
}

/// A Python shim: runs `bin/<binary>` next to the scripts folder with the same arguments and
/// exit code. Works with Python 3.8+; the binaries themselves need no Python.
fn shim(binary: &str) -> String {
    format!(
        r#"#!/usr/bin/env python3
"""Runs the bundled `{binary}` with the same arguments; its exit code is this script's."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BINARY = os.path.join(os.path.dirname(HERE), "bin", "{binary}")


def main():
    if not os.path.isfile(BINARY):
        sys.stderr.write(
            "{binary}: error: the bundled binary is missing: %s\n"
            "  reinstall the skill bundle (it ships bin/{binary})\n" % BINARY
        )
        return 2
    argv = [BINARY] + sys.argv[1:]
    # The tool's hints then show the command the user actually typed.
    os.environ.setdefault("NPU_PATCHER_INVOKED_AS", "python " + sys.argv[0])
    if os.name == "posix":
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(BINARY, argv)
    return subprocess.call(argv)


if __name__ == "__main__":
    sys.exit(main())
"#
    )
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::copy(from, to)
        .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut perms = fs::metadata(path)?.permissions();
    perms.set_mode(0o755);
    fs::set_permissions(path, perms)?;
    Ok(())
}

fn write_archive(stage: &Path, archive: &Path) -> Result<()> {
    let file = fs::File::create(archive)
        .with_context(|| format!("cannot create {}", archive.display()))?;
    let encoder = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut tar = tar::Builder::new(encoder);
    tar.mode(tar::HeaderMode::Deterministic);
    tar.append_dir_all(BUNDLE_NAME, stage)?;
    tar.into_inner()?.finish()?;
    Ok(())
}
