//! Loading and saving `issues.json`: validated reads, locked read-modify-write, atomic writes.
//!
//! Every write goes to a temporary file in the same directory and is renamed over the target,
//! under an exclusive advisory lock on a sibling `<name>.lock` file, so two processes updating
//! different issues both land and a reader never sees half a file. A file that does not load
//! cleanly is never written over.

use crate::error::{Error, Result};
use crate::schema::{Issue, IssuesFile, SCHEMA_VERSION, Scope, Summary, Tool, Unparsed};
use crate::validate::validate;
use serde::Serialize;
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long to wait for another process to release the lock before giving up.
const LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// Read and validate an `issues.json`.
pub fn load(path: &Path) -> Result<IssuesFile> {
    snapshot(path).map(|snapshot| snapshot.file)
}

/// A loaded `issues.json` with the bytes it was parsed from, so that [`update_from`] need not
/// parse the file again when it is unchanged by the time the lock is held.
pub struct Snapshot {
    bytes: Vec<u8>,
    pub file: IssuesFile,
}

/// Read and validate an `issues.json`, keeping its bytes (see [`Snapshot`]).
pub fn snapshot(path: &Path) -> Result<Snapshot> {
    let bytes = fs::read(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    let file = parse(path, &bytes)?;
    Ok(Snapshot { bytes, file })
}

/// Parse and validate the bytes of an `issues.json`; `path` is only used in errors.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<IssuesFile> {
    // Editors on some systems add a byte order mark; it is not part of the JSON.
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::Empty {
            path: path.to_owned(),
        });
    }
    // Checking the UTF-8 once, up front, is quicker than serde_json checking each string; a
    // file that is not UTF-8 goes through `from_slice` for its error's line and column.
    let typed = match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(bytes),
    };
    let file: IssuesFile = match typed {
        Ok(file) => file,
        Err(error) => return Err(explain(path, bytes, &error)),
    };
    if file.schema_version != SCHEMA_VERSION {
        return Err(Error::SchemaVersion {
            path: path.to_owned(),
            found: file.schema_version.to_string(),
        });
    }
    validate(path, bytes, &file)?;
    Ok(file)
}

/// Turn a failed typed parse into the most useful error: a file that is not ours or is from
/// another schema version says so rather than naming a field it happens to lack.
fn explain(path: &Path, bytes: &[u8], typed: &serde_json::Error) -> Error {
    let json_error = |e: &serde_json::Error| Error::Json {
        path: path.to_owned(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    };
    let value: serde_json::Value = match serde_json::from_slice(bytes) {
        Ok(value) => value,
        Err(syntax) => return json_error(&syntax),
    };
    let foreign = |why: &str| Error::Foreign {
        path: path.to_owned(),
        why: why.to_owned(),
    };
    let Some(object) = value.as_object() else {
        return foreign("the top level is not a JSON object");
    };
    match object.get("schema_version") {
        None => return foreign("it has no `schema_version` field"),
        Some(v) if v.as_u64() != Some(u64::from(SCHEMA_VERSION)) => {
            return Error::SchemaVersion {
                path: path.to_owned(),
                found: v.to_string(),
            };
        }
        Some(_) => {}
    }
    if !object.contains_key("issues") || !object.contains_key("tool") {
        return foreign("it has no `tool` or no `issues` field");
    }
    json_error(typed)
}

/// The serialized form, borrowing the data so saving a large file does not copy it, with the
/// summary recounted. Field order matches [`IssuesFile`].
#[derive(Serialize)]
struct Out<'a> {
    schema_version: u32,
    tool: &'a Tool,
    root: &'a str,
    scanned_at: &'a str,
    summary: Summary,
    issues: &'a [Issue],
    unparsed: &'a [Unparsed],
    #[serde(skip_serializing_if = "Option::is_none")]
    scope: Option<&'a Scope>,
}

/// Serialize with a recomputed summary, in the on-disk layout ([`crate::layout`]: each issue on
/// one line), with a trailing newline.
pub fn to_json(file: &IssuesFile) -> String {
    let out = Out {
        schema_version: file.schema_version,
        tool: &file.tool,
        root: &file.root,
        scanned_at: &file.scanned_at,
        summary: Summary::of(&file.issues),
        issues: &file.issues,
        unparsed: &file.unparsed,
        scope: file.scope.as_ref(),
    };
    let mut bytes = Vec::with_capacity(1024 * (file.issues.len() + 1));
    crate::layout::write(&mut bytes, &out).unwrap_or_else(|e| {
        // Writing to memory cannot fail, and our types serialize infallibly: only maps with
        // non-string keys can fail, and we have none.
        unreachable!("issues.json serialization failed: {e}")
    });
    bytes.push(b'\n');
    String::from_utf8(bytes).unwrap_or_else(|e| unreachable!("serde_json writes UTF-8: {e}"))
}

/// Hold the lock, then write `file` to `path` atomically (replacing whatever is there).
pub fn save(path: &Path, file: &IssuesFile) -> Result<()> {
    let path = resolve(path);
    let _lock = Lock::acquire(&path)?;
    let contents = to_json(file);
    write_atomic(&path, contents.as_bytes(), || Ok(()))
}

/// Locked read-modify-write: load `path` (or `None` if it does not exist), let `change` edit it,
/// and write the result atomically. `change` returns `Ok(None)` to write nothing.
///
/// An existing file that does not load (corrupt, foreign, another schema version) is an error
/// before `change` runs, so it is never written over. If the file changes on disk while `change`
/// runs (edited by a program that does not take the lock), nothing is written.
pub fn update<T>(
    path: &Path,
    change: impl FnOnce(Option<IssuesFile>) -> Result<(Option<IssuesFile>, T)>,
) -> Result<T> {
    update_from(path, None, change)
}

/// [`update`], given what an earlier unlocked read saw: when the file under the lock still has
/// exactly those bytes, `change` gets that parse instead of a new one.
pub fn update_from<T>(
    path: &Path,
    seen: Option<Snapshot>,
    change: impl FnOnce(Option<IssuesFile>) -> Result<(Option<IssuesFile>, T)>,
) -> Result<T> {
    let path = resolve(path);
    let path = path.as_path();
    let _lock = Lock::acquire(path)?;
    let original = read_if_there(path)?;
    let loaded = match (original.as_deref(), seen) {
        (Some(bytes), Some(seen)) if seen.bytes == bytes => Some(seen.file),
        (Some(bytes), _) => Some(parse(path, bytes)?),
        (None, _) => None,
    };
    let (new, value) = change(loaded)?;
    if let Some(new) = new {
        let contents = to_json(&new);
        // Someone may edit the file without taking our lock (an editor, `sed`): what we did
        // not read is never overwritten.
        write_atomic(path, contents.as_bytes(), || {
            if read_if_there(path)? == original {
                Ok(())
            } else {
                Err(Error::ChangedConcurrently {
                    path: path.to_owned(),
                })
            }
        })?;
    }
    Ok(value)
}

/// The bytes of `path`, or `None` if it does not exist.
fn read_if_there(path: &Path) -> Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Write through a symbolic link to its target, so the link survives.
fn resolve(path: &Path) -> PathBuf {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
        }
        _ => path.to_owned(),
    }
}

/// Write `contents` to a temporary file in the same directory, flush it to disk and rename it
/// over `path`, keeping the file's permissions. `ready` runs just before the rename and can
/// still stop it with an error (the temporary file is then removed). A read-only file is
/// refused.
pub fn write_atomic(
    path: &Path,
    contents: &[u8],
    ready: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let permissions = match fs::metadata(path) {
        Ok(meta) if meta.permissions().readonly() => {
            return Err(Error::ReadOnly {
                path: path.to_owned(),
            });
        }
        Ok(meta) => Some(meta.permissions()),
        Err(_) => None,
    };
    let dir = parent_dir(path);
    let write_err = |source| Error::Write {
        path: path.to_owned(),
        source,
    };
    let mut builder = tempfile::Builder::new();
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(path.file_name().unwrap_or_default());
    prefix.push(".");
    builder.prefix(&prefix).suffix(".tmp");
    #[cfg(unix)]
    if permissions.is_none() {
        // A new file gets the mode any new file gets (read-write for all, less the umask),
        // not the temporary file's owner-only mode.
        use std::os::unix::fs::PermissionsExt as _;
        builder.permissions(fs::Permissions::from_mode(0o666));
    }
    let mut tmp = builder.tempfile_in(&dir).map_err(write_err)?;
    tmp.write_all(contents).map_err(write_err)?;
    if let Some(permissions) = permissions {
        // Keep the file's mode: the temporary file is created owner-only.
        tmp.as_file()
            .set_permissions(permissions)
            .map_err(write_err)?;
    }
    tmp.as_file().sync_all().map_err(write_err)?;
    ready()?;
    // The data is on disk before the rename, so a crash leaves the old file or the new one,
    // never a mix.
    tmp.persist(path).map_err(|e| write_err(e.error))?;
    Ok(())
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// The lock file that guards `path`: `<name>.lock` next to it.
pub fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".lock");
    parent_dir(path).join(name)
}

/// An exclusive advisory lock on `<path>.lock`, released on drop (also when the process dies).
///
/// The lock file exists only while a tool holds it: the holder removes it before unlocking, so
/// no `issues.json.lock` is left beside `issues.json`. A process that opened the file before it
/// was removed finds, once it holds the lock, that the path no longer names its file, and starts
/// over; so two processes never hold the lock at once.
pub(crate) struct Lock {
    file: File,
    path: PathBuf,
    /// The file could be opened read-only only (another user's); it is not ours to remove.
    owned: bool,
}

impl Drop for Lock {
    fn drop(&mut self) {
        if self.owned {
            // Removed while still locked; then closing the file unlocks it.
            let _ = fs::remove_file(&self.path);
        }
        let _ = self.file.unlock();
    }
}

/// The open file is still the one at `path` (not removed or replaced by its last holder).
fn still_at(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (file.metadata(), fs::metadata(path)) {
        (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
        _ => false,
    }
}

impl Lock {
    pub(crate) fn acquire(path: &Path) -> Result<Lock> {
        let lock_path = lock_path(path);
        let started = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            let opened = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock_path);
            let (file, owned) = match opened {
                Ok(file) => (file, true),
                // A lock file made by another user may not be writable; locking needs only a handle.
                Err(source) => (
                    File::open(&lock_path).map_err(|_| Error::Lock {
                        path: lock_path.clone(),
                        source,
                    })?,
                    false,
                ),
            };
            match file.try_lock() {
                Ok(()) if still_at(&file, &lock_path) => {
                    return Ok(Lock {
                        file,
                        path: lock_path,
                        owned,
                    });
                }
                // The last holder removed the file after we opened it: open the current one.
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < LOCK_TIMEOUT => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(Error::Locked {
                        path: lock_path,
                        seconds: LOCK_TIMEOUT.as_secs(),
                    });
                }
                Err(std::fs::TryLockError::Error(source)) => {
                    return Err(Error::Lock {
                        path: lock_path,
                        source,
                    });
                }
            }
        }
    }
}
