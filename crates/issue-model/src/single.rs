//! Changing one issue of a large file without waiting for the whole file to be parsed.
//!
//! `npu-progress --fixed`, `--skip` and `--reopen` change one issue, and what they decide
//! depends, almost always, on that issue alone. In a large file in the one-issue-per-line
//! layout ([`crate::layout`]), that issue's line is found by its id and parsed by itself; the
//! new file is then written (the other issues' lines copied, the header's summary adjusted for
//! the one change) while the whole file is parsed and validated on other threads. The new file
//! replaces the old one only after that parse has shown that the file loads cleanly, that the
//! lines written around are exactly its issues, and that the summary written is the one a whole
//! write would give. When any of that fails, the early write is thrown away and the file is
//! written (or refused) exactly as [`crate::update_with`] would.

use crate::error::{Error, Result};
use crate::lines::{IssueLines, LARGE, Splice};
use crate::schema::{Issue, IssuesFile, SCHEMA_VERSION, Summary};
use crate::store::{self, Lock};
use std::cell::{OnceCell, RefCell};
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::thread::ScopedJoinHandle;

/// What the change given to [`update_issue`] reads the file through.
pub struct Reading<'s> {
    original: &'s [u8],
    /// The issue lines and the rest of the file, when the file allows reading an issue alone.
    early: Option<&'s Early>,
    /// The whole file, parsed and validated on another thread.
    parse: RefCell<Option<ScopedJoinHandle<'s, Result<IssuesFile>>>>,
    parsed: OnceCell<Result<IssuesFile>>,
}

impl Reading<'_> {
    /// The issue with exactly this id, and its index; from its own line when the file allows
    /// it, without waiting for the rest of the file. `None` when no issue has this id, or the
    /// file does not load (see [`Reading::file`]).
    pub fn issue(&self, id: &str) -> Option<(usize, Issue)> {
        if let Some(early) = self.early
            && self.parsed.get().is_none()
            && let Some(index) = early.lines.position(self.original, id)
            && let Some(issue) = early.issue(self.original, index)
        {
            return Some((index, issue));
        }
        let file = self.file()?;
        let index = file.issues.iter().position(|i| i.id == id)?;
        Some((index, file.issues[index].clone()))
    }

    /// The file's `root`.
    pub fn root(&self) -> Option<&str> {
        match self.early {
            Some(early) if self.parsed.get().is_none() => Some(&early.skeleton.root),
            _ => self.file().map(|file| file.root.as_str()),
        }
    }

    /// The whole file, once it is parsed and validated; `None` when it does not load cleanly,
    /// in which case [`update_issue`] returns that error, whatever the change returns.
    pub fn file(&self) -> Option<&IssuesFile> {
        self.wait().as_ref().ok()
    }

    fn wait(&self) -> &Result<IssuesFile> {
        self.parsed.get_or_init(|| {
            let handle = self.parse.borrow_mut().take();
            match handle.map(ScopedJoinHandle::join) {
                Some(Ok(result)) => result,
                Some(Err(_)) | None => Err(Error::Invalid(
                    "internal error: parsing the file failed".to_owned(),
                )),
            }
        })
    }

    fn into_parsed(self) -> Result<IssuesFile> {
        self.wait();
        self.parsed
            .into_inner()
            .unwrap_or_else(|| unreachable!("`wait` has set it"))
    }
}

/// A large file's issue lines and the rest of it, parsed.
struct Early {
    lines: IssueLines,
    /// The file without its issues.
    skeleton: IssuesFile,
}

impl Early {
    /// `None` unless the file is large, in the layout, and can be parsed on another thread
    /// while this one writes.
    fn new(original: &[u8]) -> Option<Early> {
        let parallel = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        if parallel < 2 {
            return None;
        }
        let lines = IssueLines::find(original)?;
        if lines.lines.len() < LARGE {
            return None;
        }
        let skeleton = lines.parse_skeleton(original)?;
        (skeleton.schema_version == SCHEMA_VERSION).then_some(Early { lines, skeleton })
    }

    /// The issue on line `index`, parsed by itself.
    fn issue(&self, original: &[u8], index: usize) -> Option<Issue> {
        let line = self.lines.lines.get(index)?;
        crate::lines::parse_issue(std::str::from_utf8(&original[line.text.clone()]).ok()?)
    }
}

/// Locked read-modify-write of one issue: `change` reads the file through a [`Reading`] and
/// returns the issue's index and new value (or `None` to write nothing), and a value for the
/// caller. Returns that value and the file as it is now (changed, or as read).
///
/// The guarantees are those of [`crate::update_with`]: a file that does not load cleanly is
/// an error and is never written over, even if `change` did not need the whole file; a file
/// edited on disk meanwhile is not overwritten; the write is atomic.
pub fn update_issue<T>(
    path: &Path,
    change: impl FnOnce(&Reading<'_>) -> Result<(Option<(usize, Issue)>, T)>,
) -> Result<(T, IssuesFile)> {
    let path = store::resolve(path);
    let path = path.as_path();
    let _lock = Lock::acquire(path)?;
    let original = fs::read(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    let original = original.as_slice();
    let early = Early::new(original);
    std::thread::scope(|scope| {
        let reading = Reading {
            original,
            early: early.as_ref(),
            parse: RefCell::new(Some(scope.spawn(|| store::parse(path, original)))),
            parsed: OnceCell::new(),
        };
        let (changed, value) = change(&reading)?;
        let Some((index, new)) = changed else {
            return Ok((value, reading.into_parsed()?));
        };
        let early_old = early
            .as_ref()
            .filter(|_| reading.parsed.get().is_none())
            .and_then(|early| Some((early, early.issue(original, index)?)));
        let mut file = match early_old {
            Some((early, old)) => {
                let write = EarlyWrite {
                    path,
                    original,
                    early,
                    index,
                    old: &old,
                    new: &new,
                };
                match write.run(reading)? {
                    Ok(written) => return Ok((value, written)),
                    Err(parsed) => parsed,
                }
            }
            None => reading.into_parsed()?,
        };
        let Some(slot) = file.issues.get_mut(index) else {
            return Err(Error::Invalid(format!(
                "internal error: no issue at index {index} to change"
            )));
        };
        *slot = new;
        store::commit(path, Some(original), &file, Some(vec![index]))?;
        Ok((value, file))
    })
}

/// Issue `index` of `original` changed from `old` (as read from its line) to `new`.
struct EarlyWrite<'a> {
    path: &'a Path,
    original: &'a [u8],
    early: &'a Early,
    index: usize,
    old: &'a Issue,
    new: &'a Issue,
}

impl EarlyWrite<'_> {
    /// Write the changed file while `reading` still parses the whole file, and replace the
    /// original with it only if the parse confirms it. Returns the new file, or, when the
    /// early write was thrown away, the file as parsed (the caller then writes as usual); an
    /// error when the file does not load or cannot be written.
    fn run(&self, reading: Reading<'_>) -> Result<Result<IssuesFile, IssuesFile>> {
        let path = self.path;
        let summary = adjusted(&self.early.skeleton.summary, self.old, self.new);
        let skeleton = store::skeleton_bytes(&self.early.skeleton, summary.clone());
        let ranges = self.early.lines.lines.iter().map(|line| line.text.clone());
        let Some(splice) = skeleton.and_then(|s| Splice::with_ranges(ranges.collect(), s)) else {
            return reading.into_parsed().map(Err);
        };
        let changed = [(self.index, self.new)];
        let mut outcome = None;
        let mut reading = Some(reading);
        let confirm = || {
            let Some(reading) = reading.take() else {
                return Err(Error::Invalid("internal error: read twice".to_owned()));
            };
            let mut file = reading.into_parsed()?;
            // The change was decided on the issue as read from its line: it must be the
            // file's issue there.
            if file.issues.get(self.index) != Some(self.old) {
                return Err(Error::Invalid(format!(
                    "internal error: issue {} read differently from its line and from the whole file; nothing was written",
                    self.old.id
                )));
            }
            // The lines copied are the file's issues, and the summary written counts the
            // new file; otherwise the file is written as usual.
            if !self.early.lines.hold(self.original, &file.issues) {
                outcome = Some(Err(file));
                return Ok(false);
            }
            let old = std::mem::replace(&mut file.issues[self.index], self.new.clone());
            if Summary::of(&file.issues) != summary {
                file.issues[self.index] = old;
                outcome = Some(Err(file));
                return Ok(false);
            }
            file.summary = summary.clone();
            debug_assert!(
                store::splice_holds(path, &splice, self.original, &changed, &file),
                "an early write must hold exactly the changed file"
            );
            outcome = Some(Ok(file));
            Ok(true)
        };
        let written = store::write_checked(
            path,
            Some(self.original),
            |writer| splice.write(writer, self.original, &changed),
            confirm,
        );
        #[cfg(test)]
        if matches!(written, Ok(true)) {
            tests::EARLY_WRITES.set(tests::EARLY_WRITES.get() + 1);
        }
        if let Err(error) = written {
            // A file that does not load says so, before any trouble writing the new one.
            return match reading.map(Reading::into_parsed) {
                Some(Err(parse_error)) => Err(parse_error),
                _ => Err(error),
            };
        }
        outcome.ok_or_else(|| {
            Error::Invalid("internal error: the early write did not finish".to_owned())
        })
    }
}

/// `summary` with one issue changed from `old` to `new`: counts a whole write would give, if
/// `summary` counted the file's issues correctly (which the caller checks).
fn adjusted(summary: &Summary, old: &Issue, new: &Issue) -> Summary {
    let mut summary = summary.clone();
    let take = |counts: &mut BTreeMap<String, usize>, key: &str| {
        if let Some(count) = counts.get_mut(key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(key);
            }
        }
    };
    take(&mut summary.by_status, old.status.as_str());
    *summary
        .by_status
        .entry(new.status.as_str().to_owned())
        .or_default() += 1;
    if let Some(counts) = summary.by_pattern.get_mut(&old.pattern) {
        take(counts, old.status.as_str());
        if counts.is_empty() {
            summary.by_pattern.remove(&old.pattern);
        }
    }
    *summary
        .by_pattern
        .entry(new.pattern.clone())
        .or_default()
        .entry(new.status.as_str().to_owned())
        .or_default() += 1;
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{HistoryEntry, HistoryStatus, Status};
    use std::cell::Cell;

    thread_local! {
        /// Early writes that replaced the file, on this thread.
        pub(super) static EARLY_WRITES: Cell<usize> = const { Cell::new(0) };
    }

    fn cpus() -> usize {
        std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
    }

    /// A directory with a large issues.json in the layout.
    fn large_file() -> (tempfile::TempDir, std::path::PathBuf, IssuesFile, String) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("issues.json");
        let (file, text) = crate::lines::large_sample();
        fs::write(&path, &text).unwrap_or_else(|e| panic!("{e}"));
        (dir, path, file, text)
    }

    /// `issue` marked fixed, as `npu-progress --fixed` marks it.
    fn fixed(mut issue: Issue) -> Issue {
        issue.status = Status::Fixed;
        issue.reason = Some("a \"quoted\" reason".to_owned());
        issue.history.push(HistoryEntry {
            at: "2026-02-03T04:05:06Z".to_owned(),
            status: HistoryStatus::Fixed,
            note: None,
        });
        issue
    }

    /// Mark the issue with `id` fixed through `update_issue`; the number of early writes.
    fn mark_fixed(path: &Path, id: &str) -> Result<(IssuesFile, usize)> {
        let before = EARLY_WRITES.get();
        let ((), file) = update_issue(path, |reading| {
            let (index, issue) = reading
                .issue(id)
                .unwrap_or_else(|| panic!("{id} is in the file"));
            Ok((Some((index, fixed(issue))), ()))
        })?;
        Ok((file, EARLY_WRITES.get() - before))
    }

    fn expected(file: &IssuesFile, index: usize) -> IssuesFile {
        let mut expected = file.clone();
        expected.issues[index] = fixed(expected.issues[index].clone());
        expected
    }

    #[test]
    fn a_large_file_is_written_early_and_exactly_as_a_whole_write() {
        let (_dir, path, file, _) = large_file();
        for index in [0, 1, file.issues.len() / 2, file.issues.len() - 1] {
            let id = file.issues[index].id.clone();
            let before = crate::store::load(&path).unwrap_or_else(|e| panic!("{e}"));
            let (after, early) = mark_fixed(&path, &id).unwrap_or_else(|e| panic!("{e}"));
            let expected = expected(&before, index);
            assert_eq!(
                fs::read_to_string(&path).unwrap_or_default(),
                crate::store::to_json(&expected),
                "issue {index}"
            );
            assert!(after.issues == expected.issues, "issue {index}");
            assert_eq!(after.summary, Summary::of(&expected.issues));
            assert_eq!(early, usize::from(cpus() >= 2), "issue {index}");
        }
    }

    #[test]
    fn a_stale_summary_is_written_afresh() {
        let (_dir, path, file, text) = large_file();
        // Another tool left a wrong count in the header.
        let stale = text.replacen("\"total\": ", "\"total\": 1", 1);
        assert_ne!(stale, text);
        fs::write(&path, &stale).unwrap_or_else(|e| panic!("{e}"));
        let (_, early) = mark_fixed(&path, &file.issues[5].id).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(early, 0, "the early write must be thrown away");
        assert_eq!(
            fs::read_to_string(&path).unwrap_or_default(),
            crate::store::to_json(&expected(&file, 5))
        );
    }

    /// A problem anywhere in the file stops the write, though the issue changed was read
    /// from its own line; nothing is left behind.
    #[test]
    fn a_file_that_does_not_load_is_never_written() {
        let (dir, path, file, text) = large_file();
        let last = file.issues.len() - 1;
        let broken = [
            // A bad timestamp in another issue (validation).
            text.replacen("2025-", "2025/", 1),
            // Another issue's id repeated (validation).
            text.replacen(&file.issues[last].id, &file.issues[last - 1].id, 1),
            // Broken JSON in another issue's line.
            text.replacen("\"line\": 3,", "\"line\": 3,,", 1),
            // Another issue's field of the wrong type.
            text.replacen("\"performance\": false", "\"performance\": 0", 1),
        ];
        for (n, broken) in broken.iter().enumerate() {
            assert_ne!(broken, &text, "case {n} edits the file");
            fs::write(&path, broken).unwrap_or_else(|e| panic!("{e}"));
            let result = mark_fixed(&path, &file.issues[7].id);
            assert!(result.is_err(), "case {n} must fail");
            assert_eq!(&fs::read_to_string(&path).unwrap_or_default(), broken);
            let left: Vec<_> = fs::read_dir(dir.path())
                .map(|entries| {
                    entries
                        .filter_map(std::result::Result::ok)
                        .map(|e| e.file_name())
                        .collect()
                })
                .unwrap_or_default();
            assert_eq!(
                left.len(),
                2,
                "case {n}: only the file and its lock: {left:?}"
            );
        }
    }

    #[test]
    fn a_read_only_file_is_refused_and_a_broken_one_says_what_is_wrong() {
        use std::os::unix::fs::PermissionsExt as _;
        let (_dir, path, file, text) = large_file();
        let read_only = |path: &Path| {
            fs::set_permissions(path, fs::Permissions::from_mode(0o444))
                .unwrap_or_else(|e| panic!("{e}"));
        };
        read_only(&path);
        let result = mark_fixed(&path, &file.issues[2].id);
        assert!(matches!(result, Err(Error::ReadOnly { .. })), "{result:?}");
        // Broken as well: the problem with the file comes first.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644))
            .unwrap_or_else(|e| panic!("{e}"));
        let broken = text.replacen("2025-", "2025/", 1);
        fs::write(&path, &broken).unwrap_or_else(|e| panic!("{e}"));
        read_only(&path);
        let result = mark_fixed(&path, &file.issues[2].id);
        assert!(
            matches!(result, Err(Error::Validation { .. })),
            "{result:?}"
        );
        assert!(fs::read_to_string(&path).is_ok_and(|now| now == broken));
    }

    #[test]
    fn a_file_edited_meanwhile_is_not_overwritten() {
        let (_dir, path, file, text) = large_file();
        let edited = text.replacen("\"message\": \"", "\"message\": \"edited: ", 1);
        let result = update_issue(&path, |reading| {
            let (index, issue) = reading
                .issue(&file.issues[3].id)
                .unwrap_or_else(|| panic!("the issue is there"));
            fs::write(&path, &edited).unwrap_or_else(|e| panic!("{e}"));
            Ok((Some((index, fixed(issue))), ()))
        });
        assert!(
            matches!(result, Err(Error::ChangedConcurrently { .. })),
            "{result:?}"
        );
        assert_eq!(fs::read_to_string(&path).unwrap_or_default(), edited);
    }

    #[test]
    fn reading_falls_back_to_the_whole_file() {
        let (_dir, path, file, text) = large_file();
        let id = &file.issues[9].id;
        // No issue has the id in upper case; the whole file finds it ignoring case.
        let ((), after) = update_issue(&path, |reading| {
            assert!(reading.issue(&id.to_uppercase()).is_none());
            let whole = reading.file().unwrap_or_else(|| panic!("the file loads"));
            assert!(
                whole.issues.iter().any(|i| i.id.eq_ignore_ascii_case(id)),
                "found ignoring case"
            );
            assert_eq!(reading.root(), Some(whole.root.as_str()));
            Ok((None, ()))
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(after.issues == file.issues, "the file as read");
        assert!(fs::read_to_string(&path).is_ok_and(|now| now == text));
        // After the whole file is read, a change is written the usual way.
        let before = EARLY_WRITES.get();
        update_issue(&path, |reading| {
            let index = reading.file().map_or(0, |f| f.issues.len() - 1);
            let (_, issue) = reading
                .issue(&file.issues[index].id)
                .unwrap_or_else(|| panic!("the issue is there"));
            Ok((Some((index, fixed(issue))), ()))
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(EARLY_WRITES.get(), before);
        assert_eq!(
            fs::read_to_string(&path).unwrap_or_default(),
            crate::store::to_json(&expected(&file, file.issues.len() - 1))
        );
    }

    #[test]
    fn a_small_file_is_read_whole() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("issues.json");
        let text = include_str!("../tests/golden/full.json");
        let file = crate::store::parse(&path, text.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        fs::write(&path, crate::store::to_json(&file)).unwrap_or_else(|e| panic!("{e}"));
        let (_, early) = mark_fixed(&path, &file.issues[1].id).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(early, 0);
        assert_eq!(
            fs::read_to_string(&path).unwrap_or_default(),
            crate::store::to_json(&expected(&file, 1))
        );
    }

    #[test]
    fn a_missing_file_is_a_read_error() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let result = update_issue(&dir.path().join("issues.json"), |_| Ok((None, ())));
        assert!(
            matches!(&result, Err(Error::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound),
            "{result:?}"
        );
    }

    #[test]
    fn one_change_adjusts_the_summary_as_a_recount_does() {
        let (file, _) = crate::lines::large_sample();
        let summary = Summary::of(&file.issues);
        for index in 0..8 {
            let old = &file.issues[index];
            let mut changes = vec![fixed(old.clone())];
            let mut other_pattern = fixed(old.clone());
            other_pattern.pattern = "P_NEW".to_owned();
            changes.push(other_pattern);
            let mut same = old.clone();
            same.history.clear();
            changes.push(same);
            for new in changes {
                let mut issues = file.issues.clone();
                issues[index] = new.clone();
                assert_eq!(adjusted(&summary, old, &new), Summary::of(&issues));
            }
        }
    }
}
