//! `init` (the project's `migrate_to_cloudrobo/` folder) and `extract` (every asset into a folder).
//!
//! A file the user changed is never overwritten without `force`. To tell "changed by the user"
//! from "an older copy we wrote", `init` records the SHA-256 of every file it writes in
//! `migrate_to_cloudrobo/.npu-assets.json`: a file still matching that record is ours and is
//! brought up to date; any other difference is the user's and is kept.

use crate::catalog::Source;
use crate::emulator;
use crate::error::{Error, Result};
use crate::write;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

pub use crate::MIGRATE_DIR;
/// The record of what `init` wrote, inside [`MIGRATE_DIR`].
pub const MANIFEST: &str = ".npu-assets.json";
/// What `init` installs: (asset path, file name inside [`MIGRATE_DIR`]).
pub const PROJECT_FILES: [(&str, &str); 3] = [
    ("templates/env_npu.sh", "env_npu.sh"),
    ("templates/train.sh", "train.sh"),
    ("runtime_patches.py", "runtime_patches.py"),
];

/// What happened to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// It did not exist and was written.
    Created,
    /// It already matched the shipped asset.
    Unchanged,
    /// It was an older copy written by us, untouched since, and was brought up to date.
    Updated,
    /// It differed from the shipped asset and `force` replaced it.
    Replaced,
    /// It differs from the shipped asset (changed by the user) and was left alone.
    Kept,
    /// This binary does not contain the asset.
    Missing,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Created => "created",
            Action::Unchanged => "unchanged",
            Action::Updated => "updated",
            Action::Replaced => "replaced",
            Action::Kept => "kept",
            Action::Missing => "missing",
        }
    }
}

/// One file's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// The asset path, e.g. `templates/train.sh`.
    pub asset: String,
    /// Where it was (or would have been) written.
    pub target: PathBuf,
    pub action: Action,
}

/// What `init` wrote to disk, recorded per file.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Manifest {
    /// When `init` first created the folder (RFC 3339): the start of the port.
    created_at: Option<String>,
    /// File name inside `migrate_to_cloudrobo/` → SHA-256 (hex) of what we last wrote.
    #[serde(default)]
    files: BTreeMap<String, String>,
}

/// Create or refresh `PROJECT/migrate_to_cloudrobo/` with the files of [`PROJECT_FILES`].
///
/// Writes every file it can; a missing asset is reported as [`Action::Missing`], not an error.
pub fn init(project: &Path, force: bool, source: &Source) -> Result<Vec<Outcome>> {
    let files: Vec<(String, String)> = PROJECT_FILES
        .iter()
        .map(|(asset, name)| ((*asset).to_owned(), (*name).to_owned()))
        .collect();
    let mut outcomes = install(project, &files, force, source)?;
    let ignore = project.join(MIGRATE_DIR).join(".gitignore");
    let action = place(&ignore, MIGRATE_GITIGNORE, 0o644, None, force)?;
    outcomes.push(Outcome {
        asset: ".gitignore".to_owned(),
        target: ignore,
        action,
    });
    Ok(outcomes)
}

/// What the tools write into `migrate_to_cloudrobo/` while a port runs (npu-verify's report, the
/// training logs): results of runs, not part of the port, so kept out of `git status`.
const MIGRATE_GITIGNORE: &[u8] =
    b"# Results of runs (npu-verify, train.sh / npu-train), not part of the port.\n\
verify-report.json\nlogs/\n";

/// Also copy the emulated `npu` device into `PROJECT/migrate_to_cloudrobo/emulator/`, for
/// `train.sh` with `NPU_PATCHER_EMULATE=1` on a machine without an NPU (see [`crate::emulator`]).
/// The copy carries a `.gitignore` of `*`: it is a tool of the run, never part of the port.
pub fn init_emulator(project: &Path, force: bool, source: &Source) -> Result<Vec<Outcome>> {
    let prefix = format!("{}/", emulator::FOLDER);
    let mut files: Vec<(String, String)> = source
        .list()?
        .into_iter()
        .filter(|p| p.starts_with(&prefix) && !emulator::is_cache(p))
        .map(|p| (p.clone(), p))
        .collect();
    if files.is_empty() {
        return Err(Error::MissingAsset { path: prefix });
    }
    files.sort();
    let mut outcomes = install(project, &files, force, source)?;
    let ignore = project
        .join(MIGRATE_DIR)
        .join(emulator::FOLDER)
        .join(".gitignore");
    let action = place(&ignore, EMULATOR_GITIGNORE, 0o644, None, force)?;
    outcomes.push(Outcome {
        asset: format!("{prefix}.gitignore"),
        target: ignore,
        action,
    });
    Ok(outcomes)
}

/// Keeps the emulator copy out of `git status`, so it never counts as a change of the port.
const EMULATOR_GITIGNORE: &[u8] =
    b"# The emulated npu device for pre-flight runs (npu-assets init --emulator); not part of the port.\n*\n";

/// Install `(asset, name inside migrate_to_cloudrobo/)` pairs, recording what was written.
fn install(
    project: &Path,
    files: &[(String, String)],
    force: bool,
    source: &Source,
) -> Result<Vec<Outcome>> {
    if !project.is_dir() {
        return Err(Error::NotADirectory {
            path: project.to_owned(),
        });
    }
    let dir = project.join(MIGRATE_DIR);
    let manifest_path = dir.join(MANIFEST);
    let mut manifest = read_manifest(&manifest_path);
    let mut outcomes = Vec::new();
    let mut wrote = false;
    for (asset, name) in files {
        let target = name.split('/').fold(dir.clone(), |p, part| p.join(part));
        let Some(shipped) = source.read(asset)? else {
            outcomes.push(Outcome {
                asset: asset.clone(),
                target,
                action: Action::Missing,
            });
            continue;
        };
        let recorded = manifest.files.get(name).map(String::as_str);
        let action = place(&target, &shipped, write::mode_for(asset), recorded, force)?;
        if matches!(
            action,
            Action::Created | Action::Updated | Action::Replaced | Action::Unchanged
        ) {
            let hash = sha256_hex(&shipped);
            if manifest.files.get(name) != Some(&hash) {
                manifest.files.insert(name.clone(), hash);
                wrote = true;
            }
        }
        outcomes.push(Outcome {
            asset: asset.clone(),
            target,
            action,
        });
    }
    if manifest.created_at.is_none() && dir.is_dir() {
        manifest.created_at = Some(issue_model::now_rfc3339());
        wrote = true;
    }
    if wrote {
        let mut text = serde_json::to_string_pretty(&manifest).unwrap_or_else(|e| {
            // Strings and a string-keyed map always serialize.
            unreachable!("manifest serialization failed: {e}")
        });
        text.push('\n');
        write::atomic(&manifest_path, text.as_bytes(), 0o644)?;
    }
    Ok(outcomes)
}

/// Write every asset of `source` under `dir`, keeping files that differ unless `force`.
pub fn extract(dir: &Path, force: bool, source: &Source) -> Result<Vec<Outcome>> {
    let mut outcomes = Vec::new();
    for asset in source.list()? {
        let target = asset
            .split('/')
            .fold(dir.to_owned(), |p, part| p.join(part));
        let Some(shipped) = source.read(&asset)? else {
            continue;
        };
        let action = place(&target, &shipped, write::mode_for(&asset), None, force)?;
        outcomes.push(Outcome {
            asset,
            target,
            action,
        });
    }
    Ok(outcomes)
}

/// When `init` first created `PROJECT/migrate_to_cloudrobo/`, if it recorded it.
pub fn created_at(project: &Path) -> Option<String> {
    read_manifest(&project.join(MIGRATE_DIR).join(MANIFEST)).created_at
}

fn read_manifest(path: &Path) -> Manifest {
    // A missing or unreadable record only means every differing file counts as the user's.
    fs::read(path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// Decide what to do with `target` and do it.
fn place(
    target: &Path,
    shipped: &[u8],
    mode: u32,
    recorded: Option<&str>,
    force: bool,
) -> Result<Action> {
    let existing = match fs::read(target) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(Error::Read {
                path: target.to_owned(),
                source,
            });
        }
    };
    let action = decide(existing.as_deref(), shipped, recorded, force);
    match action {
        Action::Created | Action::Updated | Action::Replaced => {
            write::atomic(target, shipped, mode)?;
        }
        Action::Unchanged => fix_mode(target, mode)?,
        Action::Kept | Action::Missing => {}
    }
    Ok(action)
}

/// The policy, apart from the file system.
fn decide(existing: Option<&[u8]>, shipped: &[u8], recorded: Option<&str>, force: bool) -> Action {
    match existing {
        None => Action::Created,
        Some(bytes) if bytes == shipped => Action::Unchanged,
        Some(bytes) if recorded == Some(sha256_hex(bytes).as_str()) => Action::Updated,
        Some(_) if force => Action::Replaced,
        Some(_) => Action::Kept,
    }
}

/// An unchanged script that lost its executable bit gets it back.
fn fix_mode(target: &Path, mode: u32) -> Result<()> {
    let err = |source| Error::Write {
        path: target.to_owned(),
        source,
    };
    let current = fs::metadata(target).map_err(err)?.permissions().mode() & 0o777;
    if mode & 0o111 != 0 && current & 0o100 == 0 {
        fs::set_permissions(target, fs::Permissions::from_mode(current | 0o111)).map_err(err)?;
    }
    Ok(())
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        use std::fmt::Write as _;
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decide_never_overwrites_a_user_change_without_force() {
        let ours_old = b"old";
        let old_hash = sha256_hex(ours_old);
        assert_eq!(decide(None, b"new", None, false), Action::Created);
        assert_eq!(decide(Some(b"new"), b"new", None, false), Action::Unchanged);
        assert_eq!(
            decide(Some(ours_old), b"new", Some(&old_hash), false),
            Action::Updated
        );
        assert_eq!(
            decide(Some(b"edited"), b"new", Some(&old_hash), false),
            Action::Kept
        );
        assert_eq!(decide(Some(b"edited"), b"new", None, false), Action::Kept);
        assert_eq!(
            decide(Some(b"edited"), b"new", None, true),
            Action::Replaced
        );
    }

    #[test]
    fn sha256_hex_is_the_standard_digest() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
