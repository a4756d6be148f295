//! Loading and saving `issues.json`: validated reads, locked read-modify-write, atomic writes.
//!
//! Every write goes to a temporary file in the same directory and is renamed over the target,
//! under an exclusive advisory lock on a sibling `<name>.lock` file, so two processes updating
//! different issues both land and a reader never sees half a file.

use crate::error::{Error, Result};
use crate::schema::{IssuesFile, SCHEMA_VERSION, Summary};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Read and validate an `issues.json`.
pub fn load(path: &Path) -> Result<IssuesFile> {
    let bytes = fs::read(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(path, &bytes)
}

/// Parse and validate the bytes of an `issues.json`; `path` is only used in errors.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<IssuesFile> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::Empty {
            path: path.to_owned(),
        });
    }
    // Look at the envelope first, so a file that is not ours or from a newer version gets
    // that error rather than a confusing field error.
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| Error::Json {
        path: path.to_owned(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let Some(object) = value.as_object() else {
        return Err(Error::Foreign {
            path: path.to_owned(),
            why: "the top level is not a JSON object".to_owned(),
        });
    };
    match object.get("schema_version") {
        None => {
            return Err(Error::Foreign {
                path: path.to_owned(),
                why: "it has no `schema_version` field".to_owned(),
            });
        }
        Some(v) if v.as_u64() != Some(u64::from(SCHEMA_VERSION)) => {
            return Err(Error::SchemaVersion {
                path: path.to_owned(),
                found: v.to_string(),
            });
        }
        Some(_) => {}
    }
    serde_json::from_slice(bytes).map_err(|e| Error::Json {
        path: path.to_owned(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })
}

/// Serialize with a recomputed summary, pretty-printed, with a trailing newline.
pub fn to_json(file: &IssuesFile) -> String {
    let mut file = file.clone();
    file.summary = Summary::of(&file.issues);
    let mut text = serde_json::to_string_pretty(&file).unwrap_or_else(|e| {
        // Our types serialize infallibly: only maps with non-string keys can fail, and we have none.
        unreachable!("issues.json serialization failed: {e}")
    });
    text.push('\n');
    text
}

/// Hold the lock, then write `file` to `path` atomically.
pub fn save(path: &Path, file: &IssuesFile) -> Result<()> {
    let _lock = Lock::acquire(path)?;
    write_atomic(path, to_json(file).as_bytes())
}

/// Locked read-modify-write: load `path` (or `None` if it does not exist), let `change` edit it,
/// and write the result atomically. `change` returns `Ok(None)` to write nothing.
pub fn update<T>(
    path: &Path,
    change: impl FnOnce(Option<IssuesFile>) -> Result<(Option<IssuesFile>, T)>,
) -> Result<T> {
    let _lock = Lock::acquire(path)?;
    let current = match fs::read(path) {
        Ok(bytes) => Some((parse(path, &bytes)?, bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(Error::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    let (original_bytes, loaded) = match current {
        Some((file, bytes)) => (Some(bytes), Some(file)),
        None => (None, None),
    };
    let (new, value) = change(loaded)?;
    if let Some(new) = new {
        // Someone may have edited the file without taking our lock (an editor, `sed`):
        // never overwrite what we did not read.
        let now_bytes = fs::read(path).ok();
        if now_bytes != original_bytes {
            return Err(Error::ChangedConcurrently {
                path: path.to_owned(),
            });
        }
        write_atomic(path, to_json(&new).as_bytes())?;
    }
    Ok(value)
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Ok(meta) = fs::metadata(path)
        && meta.permissions().readonly()
    {
        return Err(Error::ReadOnly {
            path: path.to_owned(),
        });
    }
    let dir = parent_dir(path);
    let write_err = |source| Error::Write {
        path: path.to_owned(),
        source,
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".issues.json.")
        .suffix(".tmp")
        .tempfile_in(&dir)
        .map_err(write_err)?;
    tmp.write_all(bytes).map_err(write_err)?;
    tmp.as_file().sync_all().map_err(write_err)?;
    tmp.persist(path).map_err(|e| write_err(e.error))?;
    Ok(())
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// An exclusive advisory lock on `<path>.lock`, released on drop.
struct Lock {
    _file: File,
}

impl Lock {
    fn acquire(path: &Path) -> Result<Lock> {
        let mut name = path.file_name().unwrap_or_default().to_owned();
        name.push(".lock");
        let lock_path = parent_dir(path).join(name);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|source| Error::Lock {
                path: lock_path.clone(),
                source,
            })?;
        file.lock().map_err(|source| Error::Lock {
            path: lock_path,
            source,
        })?;
        Ok(Lock { _file: file })
    }
}
