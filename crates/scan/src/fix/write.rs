//! Reading a file to fix and replacing it with the fixed bytes, safely.
//!
//! - **Inside the scanned root only.** Every path is resolved (symbolic links followed) and must
//!   stay under the resolved root; a file reached through a symbolic link to a directory outside
//!   the root is refused.
//! - **Links are kept.** A file that is itself a symbolic link is not rewritten (the rename would
//!   replace the link by a regular file): its target is fixed where a scan of its own project
//!   finds it. A file with more than one hard link is not rewritten either (the rename would split
//!   the names into two files).
//! - **Atomic.** The fixed bytes go to a temporary file in the same directory, with the file's
//!   permissions, flushed to disk, then renamed over the file: a crash leaves the old file or the
//!   new one, never a mix.
//! - **No lost concurrent write.** The file read stays open. Just before the rename the file must
//!   still be the same one with the same bytes; a second name (a hard link) keeps the old file
//!   through the rename, and after the rename (and again a moment later, for a program that
//!   opened it before the rename and writes after) the old file must still hold what was read.
//!   If another program wrote to it meanwhile, the old file, with that program's data (and what
//!   was appended to the new file in between), is put back and the fix is reported as not
//!   applied.

use std::fs::{self, File};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

/// The points of [`replace`] where tests can act as another program would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The fixed bytes are in the temporary file; the file has not been checked yet.
    BeforeCheck,
    /// The file was checked; the rename comes next.
    BeforeRename,
    /// The fixed file has replaced the old one, which is still open.
    AfterRename,
}

/// How long after the rename the old file is watched for a write by a program that opened it
/// before.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(20);

/// A file opened for fixing: where it really is, and the bytes read from it.
#[derive(Debug)]
pub struct Opened {
    /// The resolved path (under the resolved root).
    pub path: PathBuf,
    /// The file as read (kept open, so its content can be compared after the rename).
    file: File,
    /// Its bytes when read.
    pub bytes: Vec<u8>,
}

/// Resolve `path` (the file `file` under `root`), check that it may be rewritten, and read it.
/// The error says why the file is left alone, in words for the user.
pub fn open(root: &Path, path: &Path) -> Result<Opened, String> {
    let root_dir = if root.is_file() {
        root.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    } else {
        root
    };
    let root_real = fs::canonicalize(root_dir).map_err(|e| {
        format!(
            "cannot resolve the scanned root {}: {e}",
            root_dir.display()
        )
    })?;
    let meta = fs::symlink_metadata(path).map_err(|e| format!("cannot read the file: {e}"))?;
    if meta.file_type().is_symlink() {
        let target = fs::read_link(path)
            .map(|t| format!(" to {}", t.display()))
            .unwrap_or_default();
        return Err(format!(
            "it is a symbolic link{target}; a link is never replaced by a file, so it is not fixed here \
             (fix the file it points to: scan the project that holds it)"
        ));
    }
    let real = fs::canonicalize(path).map_err(|e| format!("cannot resolve the file: {e}"))?;
    if !real.starts_with(&root_real) {
        return Err(format!(
            "it resolves to {}, outside the scanned root {} (through a symbolic link), so it is not written",
            real.display(),
            root_real.display()
        ));
    }
    if !meta.is_file() {
        return Err("it is not a regular file".to_owned());
    }
    let links = hard_links(&meta);
    if links > 1 {
        return Err(format!(
            "it has {links} hard links; replacing it would split them into separate files, so it is not \
             rewritten (fix it by hand, or copy it to break the link first)"
        ));
    }
    let mut file = File::open(&real).map_err(|e| format!("cannot read the file: {e}"))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the file: {e}"))?;
    Ok(Opened {
        path: real,
        file,
        bytes,
    })
}

/// Why [`replace`] did not write.
const CHANGED: &str = "another program changed the file while it was being fixed; its content is kept \
                       and the fix is not applied (rescan and fix again)";

/// Replace the file of `opened` with `contents`; `hook` runs at each [`Stage`].
pub fn replace(
    opened: &mut Opened,
    contents: &[u8],
    hook: &mut dyn FnMut(Stage, &Path),
) -> Result<(), String> {
    let path = opened.path.clone();
    let meta = opened
        .file
        .metadata()
        .map_err(|e| format!("cannot read the file: {e}"))?;
    if meta.permissions().readonly() {
        return Err("the file is read-only, so it is not rewritten".to_owned());
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let write_err = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(path.file_name().unwrap_or_default());
    prefix.push(".");
    let mut tmp = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(write_err)?;
    tmp.write_all(contents).map_err(write_err)?;
    tmp.as_file()
        .set_permissions(meta.permissions())
        .map_err(write_err)?;
    tmp.as_file().sync_all().map_err(write_err)?;

    hook(Stage::BeforeCheck, &path);
    if !same_file_same_bytes(&path, &meta, &opened.bytes) {
        return Err(CHANGED.to_owned());
    }
    // A second name for the old file, so that it can be put back if another program writes to it
    // between this point and the rename (a file system without hard links goes without).
    let keep = keep_name(&path).filter(|name| fs::hard_link(&path, name).is_ok());
    hook(Stage::BeforeRename, &path);
    if let Err(e) = tmp.persist(&path) {
        if let Some(keep) = &keep {
            let _ = fs::remove_file(keep);
        }
        return Err(write_err(e.error));
    }
    hook(Stage::AfterRename, &path);
    // A program that opened the old file before the rename may write to it a moment later:
    // look again after a short while.
    let mut old_now = read_from_start(&mut opened.file);
    if old_now.as_deref() == Some(opened.bytes.as_slice()) {
        std::thread::sleep(SETTLE);
        old_now = read_from_start(&mut opened.file);
    }
    if old_now.as_deref() == Some(opened.bytes.as_slice()) {
        if let Some(keep) = &keep {
            let _ = fs::remove_file(keep);
        }
        return Ok(());
    }
    // Someone wrote to the old file after the check: put it back, with what they wrote. What was
    // appended to the new file meanwhile goes at its end; any other change to the new file leaves
    // both for the user.
    let new_now = fs::read(&path).unwrap_or_default();
    let Some(appended) = new_now.strip_prefix(contents) else {
        return Err(format!(
            "another program wrote to the file while it was being fixed{}; check it by hand",
            keep.as_ref()
                .map(|k| format!(" (its earlier content is kept in {})", k.display()))
                .unwrap_or_default()
        ));
    };
    if let Some(keep) = &keep {
        fs::rename(keep, &path).map_err(write_err)?;
        if !appended.is_empty() {
            fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .and_then(|mut f| f.write_all(appended))
                .map_err(write_err)?;
        }
    } else {
        let mut restored = old_now.unwrap_or_else(|| opened.bytes.clone());
        restored.extend_from_slice(appended);
        issue_model::write_atomic(&path, &restored, || Ok(())).map_err(|e| e.to_string())?;
    }
    Err(CHANGED.to_owned())
}

/// `path` still names the file `meta` describes, with one link, and holds `bytes`.
fn same_file_same_bytes(path: &Path, meta: &fs::Metadata, bytes: &[u8]) -> bool {
    let Ok(now) = fs::symlink_metadata(path) else {
        return false;
    };
    same_inode(meta, &now) && hard_links(&now) == 1 && fs::read(path).ok().as_deref() == Some(bytes)
}

fn read_from_start(file: &mut File) -> Option<Vec<u8>> {
    file.seek(SeekFrom::Start(0)).ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// A name next to `path` that does not exist yet, for the second link to the old file.
fn keep_name(path: &Path) -> Option<PathBuf> {
    let dir = path.parent()?;
    let name = path.file_name()?.to_string_lossy();
    (0..16).find_map(|n| {
        let candidate = dir.join(format!(".{name}.{}.{n}.orig", std::process::id()));
        (!candidate.exists()).then_some(candidate)
    })
}

#[cfg(unix)]
fn hard_links(meta: &fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    meta.nlink()
}

#[cfg(not(unix))]
fn hard_links(_meta: &fs::Metadata) -> u64 {
    1
}

#[cfg(unix)]
fn same_inode(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    a.dev() == b.dev() && a.ino() == b.ino() && !b.file_type().is_symlink()
}

#[cfg(not(unix))]
fn same_inode(_a: &fs::Metadata, b: &fs::Metadata) -> bool {
    b.is_file()
}
