//! Loading and saving `issues.json`: validated reads, locked read-modify-write, atomic writes.
//!
//! Every write goes to a temporary file in the same directory and is renamed over the target,
//! under an exclusive advisory lock on a sibling `<name>.lock` file, so two processes updating
//! different issues both land and a reader never sees half a file. A file that does not load
//! cleanly is never written over.

use crate::error::{Error, Result};
use crate::lines::Splice;
use crate::schema::{Issue, IssuesFile, SCHEMA_VERSION, Summary, Tool, Unparsed};
use crate::validate::validate;
use serde::Serialize;
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long to wait for another process to release the lock before giving up.
const LOCK_TIMEOUT: Duration = Duration::from_secs(30);

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
        Ok(text) => {
            crate::lines::parse_parallel(text).map_or_else(|| serde_json::from_str(text), Ok)
        }
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

/// The serialized form, borrowing the data so saving a large file does not copy it.
/// Field order matches [`IssuesFile`].
#[derive(Serialize)]
struct Out<'a> {
    schema_version: u32,
    tool: &'a Tool,
    root: &'a str,
    scanned_at: &'a str,
    summary: Summary,
    issues: &'a [Issue],
    unparsed: &'a [Unparsed],
}

impl<'a> Out<'a> {
    fn of(file: &'a IssuesFile) -> Out<'a> {
        Out {
            schema_version: file.schema_version,
            tool: &file.tool,
            root: &file.root,
            scanned_at: &file.scanned_at,
            summary: Summary::of(&file.issues),
            issues: &file.issues,
            unparsed: &file.unparsed,
        }
    }

    /// The on-disk form: [`crate::layout`] and a trailing newline.
    fn write_to(&self, writer: &mut dyn Write) -> std::io::Result<()> {
        crate::layout::write(&mut *writer, self)?;
        writer.write_all(b"\n")
    }
}

/// Serialize with a recomputed summary, in the on-disk layout (each issue on one line), with a
/// trailing newline.
pub fn to_json(file: &IssuesFile) -> String {
    let mut bytes = Vec::new();
    Out::of(file).write_to(&mut bytes).unwrap_or_else(|e| {
        // Writing to memory cannot fail, and our types serialize infallibly: only maps with
        // non-string keys can fail, and we have none.
        unreachable!("issues.json serialization failed: {e}")
    });
    String::from_utf8(bytes).unwrap_or_else(|e| unreachable!("serde_json writes UTF-8: {e}"))
}

/// Hold the lock, then write `file` to `path` atomically (replacing whatever is there).
pub fn save(path: &Path, file: &IssuesFile) -> Result<()> {
    let path = resolve(path);
    let _lock = Lock::acquire(&path)?;
    write_atomic(&path, |writer| Out::of(file).write_to(writer), || Ok(true)).map(drop)
}

/// What a change made of the loaded file, for [`update_with`].
#[derive(Debug)]
pub enum Save {
    /// Write nothing.
    Nothing,
    /// Write this file.
    Whole(IssuesFile),
    /// Write this file, which differs from the one loaded only in the issues at these indices
    /// (the same issues in the same order otherwise; the header may differ too). A large file
    /// in the on-disk layout is then written by copying the other issues' lines unchanged.
    Issues(IssuesFile, Vec<usize>),
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
    update_with(path, |file| {
        let (new, value) = change(file)?;
        Ok((new.map_or(Save::Nothing, Save::Whole), value))
    })
}

/// [`update`], with `change` saying what it changed so that a change to a few issues of a large
/// file does not re-serialize the rest.
pub fn update_with<T>(
    path: &Path,
    change: impl FnOnce(Option<IssuesFile>) -> Result<(Save, T)>,
) -> Result<T> {
    let path = resolve(path);
    let path = path.as_path();
    let _lock = Lock::acquire(path)?;
    let original = match fs::read(path) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(Error::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    let loaded = original
        .as_deref()
        .map(|bytes| parse(path, bytes))
        .transpose()?;
    let (save, value) = change(loaded)?;
    let (new, changed) = match save {
        Save::Nothing => return Ok(value),
        Save::Whole(new) => (new, None),
        Save::Issues(new, changed) => (new, Some(changed)),
    };
    commit(path, original.as_deref(), &new, changed)?;
    free_in_background(new, original);
    Ok(value)
}

/// Write `new` over `path`, which held `original` (`None`: did not exist) when it was read
/// under the lock held now. With `changed` (the indices of the issues that differ from the
/// original's), a file in the on-disk layout is written by copying the other issues' lines.
pub(crate) fn commit(
    path: &Path,
    original: Option<&[u8]>,
    new: &IssuesFile,
    changed: Option<Vec<usize>>,
) -> Result<()> {
    let plan = changed.zip(original).and_then(|(mut changed, original)| {
        changed.sort_unstable();
        changed.dedup();
        let changed: Vec<(usize, &Issue)> = changed
            .into_iter()
            .filter_map(|n| Some((n, new.issues.get(n)?)))
            .collect();
        Some((plan_splice(original, new)?, changed, original))
    });
    if let Some((plan, changed, original)) = &plan {
        debug_assert!(
            splice_holds(path, plan, original, changed, new),
            "a spliced write must hold exactly the changed file"
        );
    }
    let confirmed = || Ok(true);
    match &plan {
        Some((plan, changed, original)) => write_checked(
            path,
            Some(original),
            |writer| plan.write(writer, original, changed),
            confirmed,
        ),
        None => write_checked(
            path,
            original,
            |writer| Out::of(new).write_to(writer),
            confirmed,
        ),
    }
    .map(drop)
}

/// Whether `plan` writes exactly `file` (with its summary recomputed) from `original` and
/// `changed`: the check of every spliced write in debug builds.
pub(crate) fn splice_holds(
    path: &Path,
    plan: &Splice,
    original: &[u8],
    changed: &[(usize, &Issue)],
    file: &IssuesFile,
) -> bool {
    let mut bytes = Vec::new();
    plan.write(&mut bytes, original, changed).is_ok() && same_file(path, &bytes, file)
}

/// [`write_atomic`], never over a file that no longer holds `original` (`None`: did not
/// exist), and only if `confirm` returns `true` once the new file is written.
///
/// Someone may edit the file without taking our lock (an editor, `sed`): what we did not read
/// is never overwritten. The comparison reads the file again, so it runs while the new file is
/// written, and the rename waits for it.
pub(crate) fn write_checked(
    path: &Path,
    original: Option<&[u8]>,
    contents: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    confirm: impl FnOnce() -> Result<bool>,
) -> Result<bool> {
    std::thread::scope(|scope| {
        let check = scope.spawn(|| unchanged(path, original));
        write_atomic(path, contents, || {
            if !confirm()? {
                return Ok(false);
            }
            joined_unchanged(path, check).map(|()| true)
        })
    })
}

/// The result of an [`unchanged`] check run on its own thread: an error unless the file is
/// as it was read.
fn joined_unchanged(
    path: &Path,
    check: std::thread::ScopedJoinHandle<'_, Result<bool>>,
) -> Result<()> {
    match check.join() {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => Err(Error::ChangedConcurrently {
            path: path.to_owned(),
        }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::Read {
            path: path.to_owned(),
            source: std::io::Error::other("comparing the file with what was read failed"),
        }),
    }
}

/// Drop `file` (and the bytes it was read from) without waiting: freeing a large parsed file
/// takes milliseconds that a short-lived tool need not spend, so a large one is dropped on a
/// thread of its own, which a process that exits first does not wait for. A small one is
/// dropped here.
pub fn free_in_background(file: IssuesFile, bytes: Option<Vec<u8>>) {
    if file.issues.len() >= crate::lines::LARGE {
        // If no thread can be made, the values are dropped here, with the error.
        let _ = std::thread::Builder::new()
            .name("issues-free".to_owned())
            .spawn(move || drop((file, bytes)));
    }
}

/// The plan for writing `new` by copying from `original` the issues that did not change.
pub(crate) fn plan_splice(original: &[u8], new: &IssuesFile) -> Option<Splice> {
    let skeleton = skeleton_bytes(new, Summary::of(&new.issues))?;
    Splice::plan(original, &new.issues, skeleton)
}

/// `file` serialized without its issues, with `summary` as its summary.
pub(crate) fn skeleton_bytes(file: &IssuesFile, summary: Summary) -> Option<Vec<u8>> {
    let out = Out {
        summary,
        issues: &[],
        schema_version: file.schema_version,
        tool: &file.tool,
        root: &file.root,
        scanned_at: &file.scanned_at,
        unparsed: &file.unparsed,
    };
    let mut bytes = Vec::with_capacity(4096);
    out.write_to(&mut bytes).ok()?;
    Some(bytes)
}

/// Whether `bytes` load as `file` with its summary recomputed (a check of spliced writes).
fn same_file(path: &Path, bytes: &[u8], file: &IssuesFile) -> bool {
    let Ok(written) = parse(path, bytes) else {
        return false;
    };
    let expected = IssuesFile {
        summary: Summary::of(&file.issues),
        ..file.clone()
    };
    written == expected
}

/// Whether `path` still holds exactly `original` (`None`: does not exist), compared in chunks
/// so a large file is not read into memory twice.
fn unchanged(path: &Path, original: Option<&[u8]>) -> Result<bool> {
    let read_err = |source| Error::Read {
        path: path.to_owned(),
        source,
    };
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(original.is_none()),
        Err(source) => return Err(read_err(source)),
    };
    let Some(mut rest) = original else {
        return Ok(false);
    };
    let mut buffer = vec![0u8; 256 * 1024];
    loop {
        let n = match file.read(&mut buffer) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(source) => return Err(read_err(source)),
        };
        if n == 0 {
            return Ok(rest.is_empty());
        }
        let Some((head, tail)) = rest.split_at_checked(n) else {
            return Ok(false);
        };
        if head != &buffer[..n] {
            return Ok(false);
        }
        rest = tail;
    }
}

/// Write through a symbolic link to its target, so the link survives.
pub(crate) fn resolve(path: &Path) -> PathBuf {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
        }
        _ => path.to_owned(),
    }
}

/// Write through a temporary file renamed over `path`; `ready` runs just before the rename and
/// can still stop it, with an error or by returning `false` (the temporary file is then
/// removed). Returns whether the file was replaced.
pub(crate) fn write_atomic(
    path: &Path,
    contents: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ready: impl FnOnce() -> Result<bool>,
) -> Result<bool> {
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
    builder.prefix(".issues.json.").suffix(".tmp");
    #[cfg(unix)]
    if permissions.is_none() {
        // A new file gets the mode any new file gets (read-write for all, less the umask),
        // not the temporary file's owner-only mode.
        use std::os::unix::fs::PermissionsExt as _;
        builder.permissions(fs::Permissions::from_mode(0o666));
    }
    let tmp = builder.tempfile_in(&dir).map_err(write_err)?;
    {
        let mut writer = BufWriter::with_capacity(256 * 1024, Writeback::new(tmp.as_file()));
        contents(&mut writer).map_err(write_err)?;
        writer.flush().map_err(write_err)?;
    }
    if let Some(permissions) = permissions {
        // Keep the file's mode: the temporary file is created owner-only.
        tmp.as_file()
            .set_permissions(permissions)
            .map_err(write_err)?;
    }
    tmp.as_file().sync_all().map_err(write_err)?;
    if !ready()? {
        return Ok(false);
    }
    tmp.persist(path).map_err(|e| write_err(e.error))?;
    // Make the rename itself durable; a failure here loses nothing already written.
    if let Ok(dir) = File::open(&dir) {
        let _ = dir.sync_all();
    }
    Ok(true)
}

/// A file being written that has its pages sent to the disk as it goes, a megabyte at a time,
/// so that the `fsync` before the rename has little left to wait for: on a 12 MB file that
/// `fsync` went from about 7 ms to under 1 ms, the whole write from about 12 ms to 8 ms.
struct Writeback<'f> {
    file: &'f File,
    written: u64,
    /// Where the part not yet sent to the disk starts.
    sent: u64,
}

impl<'f> Writeback<'f> {
    const STEP: u64 = 1 << 20;

    fn new(file: &'f File) -> Writeback<'f> {
        Writeback {
            file,
            written: 0,
            sent: 0,
        }
    }
}

impl Write for Writeback<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // At most a step at a time, so a large slice is sent to the disk as it is written.
        let step = usize::try_from(Self::STEP).unwrap_or(usize::MAX);
        let n = (&mut &*self.file).write(&buf[..buf.len().min(step)])?;
        self.written += n as u64;
        if self.written - self.sent >= Self::STEP {
            start_writeback(self.file, self.sent, self.written - self.sent);
            self.sent = self.written;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        (&mut &*self.file).flush()
    }
}

/// Start writing `len` bytes of `file` from `offset` to the disk, without waiting.
///
/// On Linux, `posix_fadvise(POSIX_FADV_DONTNEED)` first starts the write-back of the range's
/// modified pages, then frees only the pages that are already clean, which pages just written
/// are not (`man 2 posix_fadvise`; Kerrisk, *The Linux Programming Interface*, §13.5). It is a
/// hint: nothing depends on it, and the `fsync` that follows still waits for every byte.
#[cfg(target_os = "linux")]
fn start_writeback(file: &File, offset: u64, len: u64) {
    use nix::fcntl::{PosixFadviseAdvice, posix_fadvise};
    use nix::libc::off_t;
    if let (Ok(offset), Ok(len)) = (off_t::try_from(offset), off_t::try_from(len)) {
        let _ = posix_fadvise(file, offset, len, PosixFadviseAdvice::POSIX_FADV_DONTNEED);
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &File, _offset: u64, _len: u64) {}

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
pub(crate) struct Lock {
    _file: File,
}

impl Lock {
    pub(crate) fn acquire(path: &Path) -> Result<Lock> {
        let lock_path = lock_path(path);
        let opened = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path);
        let file = match opened {
            Ok(file) => file,
            // A lock file made by another user may not be writable; locking needs only a handle.
            Err(source) => File::open(&lock_path).map_err(|_| Error::Lock {
                path: lock_path.clone(),
                source,
            })?,
        };
        let started = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(Lock { _file: file }),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_to_some_issues_writes_what_a_whole_write_writes() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("issues.json");
        let golden = include_bytes!("../tests/golden/full.json");
        let file = parse(Path::new("full.json"), golden).unwrap_or_else(|e| panic!("{e}"));
        let mut expected = file.clone();
        expected.issues[1].status = crate::schema::Status::Fixed;
        expected.issues[1].reason = Some("done".to_owned());
        // In the layout (spliced), pretty-printed by another tool (written whole).
        let layouts = [
            to_json(&file),
            serde_json::to_string_pretty(&file).unwrap_or_default(),
        ];
        for original in layouts {
            fs::write(&path, &original).unwrap_or_else(|e| panic!("{e}"));
            update_with(&path, |loaded| {
                let mut loaded = loaded.unwrap_or_else(|| panic!("the file exists"));
                loaded.issues[1].status = crate::schema::Status::Fixed;
                loaded.issues[1].reason = Some("done".to_owned());
                Ok((Save::Issues(loaded, vec![1, 1]), ()))
            })
            .unwrap_or_else(|e| panic!("{e}"));
            let written = fs::read_to_string(&path).unwrap_or_default();
            assert_eq!(written, to_json(&expected));
        }
    }

    #[test]
    fn unchanged_compares_every_byte() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("f.json");
        let text: Vec<u8> = (0..600_000u32)
            .map(|n| b"abcdefgh"[(n % 8) as usize])
            .collect();
        fs::write(&path, &text).unwrap_or_else(|e| panic!("{e}"));
        assert!(unchanged(&path, Some(&text)).unwrap_or(false));
        assert!(!unchanged(&path, Some(&text[..text.len() - 1])).unwrap_or(true));
        assert!(!unchanged(&path, None).unwrap_or(true));
        let mut longer = text.clone();
        longer.push(b'x');
        assert!(!unchanged(&path, Some(&longer)).unwrap_or(true));
        let mut flipped = text.clone();
        flipped[500_000] = b'z';
        assert!(!unchanged(&path, Some(&flipped)).unwrap_or(true));
        fs::remove_file(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(unchanged(&path, None).unwrap_or(false));
        assert!(!unchanged(&path, Some(&text)).unwrap_or(true));
    }
}
