//! `cargo xtask dist`: the release bundle, a drop-in skill directory.
//!
//! Layout under `target/dist/huawei-cloud-cloudrobo-npu-patcher/`:
//! `SKILL.md`, `scripts/{scan,progress,verify}.py` (shims that exec the bundled binaries),
//! `scripts/runtime_patches.py`, `bin/npu-*`, `references/fix-templates/*.md`,
//! `references/NPU-FACTS.md` (the Ascend facts the texts cite),
//! `templates/{env_npu.sh,train.sh,ADAPTATION_SUMMARY.md}`, `emulator/` (the emulated `npu`
//! device and stand-in `torch_npu`, for machines without an NPU); then a `.tar.gz` beside it and
//! its `.sha256`. Staging is removed and rebuilt every time. [`layout`] lists every file, so tidy
//! can check the shipped texts against it without building.

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
    for entry in layout(&root)? {
        let to = stage.join(&entry.path);
        match &entry.from {
            From::Asset(from) => copy(from, &to)?,
            From::Shim(binary) => write(&to, &shim(binary))?,
            From::Binary(binary) => copy(&bin_dir.join(binary), &to)?,
        }
        if entry.executable {
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

/// Where a bundle file comes from.
pub enum From {
    /// A file under `assets/`.
    Asset(PathBuf),
    /// A launcher script for this binary.
    Shim(&'static str),
    /// A built binary.
    Binary(&'static str),
}

/// One file of the bundle.
pub struct Entry {
    /// `/`-separated, relative to the bundle root.
    pub path: String,
    pub from: From,
    pub executable: bool,
}

/// Every file of the bundle, in the order they are written.
pub fn layout(root: &Path) -> Result<Vec<Entry>> {
    let assets = root.join("assets");
    let asset = |path: &str, from: PathBuf, executable: bool| Entry {
        path: path.to_owned(),
        from: From::Asset(from),
        executable,
    };
    let mut entries = vec![asset("SKILL.md", assets.join("SKILL.md"), false)];
    for (script, binary) in SHIMS {
        entries.push(Entry {
            path: format!("scripts/{script}"),
            from: From::Shim(binary),
            executable: true,
        });
    }
    entries.push(asset(
        "scripts/runtime_patches.py",
        assets.join("runtime_patches.py"),
        false,
    ));
    entries.push(asset(
        "references/NPU-FACTS.md",
        assets.join("references").join("NPU-FACTS.md"),
        false,
    ));
    for (_, binary) in BINARIES {
        entries.push(Entry {
            path: format!("bin/{binary}"),
            from: From::Binary(binary),
            executable: true,
        });
    }
    for template in fix_templates(root)? {
        entries.push(asset(
            &format!("references/fix-templates/{template}"),
            assets.join("fix-templates").join(&template),
            false,
        ));
    }
    for template in TEMPLATES {
        let executable = Path::new(template).extension().is_some_and(|e| e == "sh");
        entries.push(asset(
            &format!("templates/{template}"),
            assets.join("templates").join(template),
            executable,
        ));
    }
    for rel in emulator_files(&assets.join(EMULATOR))? {
        entries.push(asset(
            &format!("{EMULATOR}/{rel}"),
            assets.join(EMULATOR).join(&rel),
            false,
        ));
    }
    Ok(entries)
}

/// The emulator folder, in `assets/` and in the bundle.
pub const EMULATOR: &str = "emulator";

/// The emulator's files (`/`-separated, relative to `dir`), sorted, without byte-code caches.
fn emulator_files(dir: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(current) = stack.pop() {
        for entry in
            fs::read_dir(&current).with_context(|| format!("cannot list {}", current.display()))?
        {
            let entry = entry?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let cache = Path::new(&name)
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("pyc"));
            if name == "__pycache__" || cache {
                continue;
            }
            if entry.file_type()?.is_dir() {
                stack.push(path);
            } else if let Ok(rel) = path.strip_prefix(dir) {
                out.push(
                    rel.components()
                        .map(|c| c.as_os_str().to_string_lossy().into_owned())
                        .collect::<Vec<_>>()
                        .join("/"),
                );
            }
        }
    }
    if !out.iter().any(|p| p == "torch_npu/__init__.py") {
        bail!("{} holds no stand-in torch_npu", dir.display());
    }
    out.sort();
    Ok(out)
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
