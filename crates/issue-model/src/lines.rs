//! Using the one-issue-per-line layout of [`crate::layout`] to read and write large files
//! quickly.
//!
//! Each issue sits on its own line inside the `"issues": [` array, so the issues of a large file
//! can be parsed on several threads, and a command that changes a few issues (a status, a
//! history entry) can copy every other issue's line instead of re-serializing it. Both only
//! apply when the file demonstrably has that layout, and both give exactly what the plain path
//! gives; anything else returns `None` and the caller parses or serializes the whole document.

use crate::layout;
use crate::schema::{Issue, IssuesFile};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// A file with this many issues or more is large: its issue lines are parsed on several
/// threads, and its parsed form is freed in the background.
pub(crate) const LARGE: usize = 2048;
/// The most threads a parse uses.
const MAX_THREADS: usize = 4;
/// Chunks of issue lines per thread.
const CHUNKS_PER_THREAD: usize = 8;

/// The line that opens the issues array in the layout; JSON strings cannot hold a raw newline,
/// so in a file in this layout it occurs once, at the top level.
const OPEN: &[u8] = b"\n  \"issues\": [\n";
/// An empty issues array in the layout, as a serialized file without issues shows it.
const EMPTY: &[u8] = b"\n  \"issues\": []";
const ISSUE_INDENT: &[u8] = b"    ";
const ID_PREFIX: &[u8] = b"{\"id\": \"";

/// Where the first issue line starts, after the line that opens the issues array.
fn issue_lines_start(bytes: &[u8]) -> Option<usize> {
    Some(memchr::memmem::find(bytes, OPEN)? + OPEN.len())
}

/// `text` parsed line by line, its issue lines split between threads (one per CPU, up to
/// four); `None` when the file is small, not in the layout, or anything in it does not parse
/// (the caller then parses the whole document, which also gives the error its position).
///
/// The result equals a whole-document parse: every field of the format denies unknown fields,
/// so a skeleton (the file with its issue lines removed) that parses with no issues proves that
/// the lines removed were the members of the top-level `issues` array, and each line holds
/// exactly one of them.
pub(crate) fn parse_parallel(text: &str) -> Option<IssuesFile> {
    let found = IssueLines::find(text.as_bytes())?;
    if found.lines.len() < LARGE {
        return None;
    }
    // The rest of the file first: it is small, and if it is not ours the issue lines need no
    // parsing here at all.
    let mut file = found.parse_skeleton(text.as_bytes())?;
    let lines: Vec<&str> = found
        .lines
        .iter()
        .map(|line| text.get(line.text.clone()))
        .collect::<Option<_>>()?;
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(MAX_THREADS);
    // Small chunks handed out on demand keep every thread busy to the end; the calling thread
    // takes chunks too.
    let chunk = lines.len().div_ceil(threads * CHUNKS_PER_THREAD);
    let chunks: Vec<&[&str]> = lines.chunks(chunk).collect();
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let work = || {
        let mut done: Vec<(usize, Vec<Issue>)> = Vec::new();
        loop {
            let n = next.fetch_add(1, Ordering::Relaxed);
            let Some(part) = chunks.get(n) else {
                return done;
            };
            if failed.load(Ordering::Relaxed) {
                return done;
            }
            match parse_lines(part) {
                Some(issues) => done.push((n, issues)),
                None => failed.store(true, Ordering::Relaxed),
            }
        }
    };
    let mut parsed: Vec<(usize, Vec<Issue>)> = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        let mut all = work();
        for helper in helpers {
            match helper.join() {
                Ok(done) => all.extend(done),
                Err(_) => failed.store(true, Ordering::Relaxed),
            }
        }
        all
    });
    if failed.load(Ordering::Relaxed) || parsed.len() != chunks.len() {
        return None;
    }
    parsed.sort_unstable_by_key(|(n, _)| *n);
    file.issues.reserve_exact(lines.len());
    for (_, issues) in parsed {
        file.issues.extend(issues);
    }
    Some(file)
}

/// The JSON texts of issue lines.
fn parse_lines(lines: &[&str]) -> Option<Vec<Issue>> {
    // Sized up front: growing a vector of large structs copies them and leaves memory behind.
    let mut issues = Vec::with_capacity(lines.len());
    for line in lines {
        issues.push(parse_issue(line)?);
    }
    Some(issues)
}

/// One issue's JSON text: read by [`crate::fast`] when it is in the layout's exact form, by
/// `serde_json` otherwise.
pub(crate) fn parse_issue(text: &str) -> Option<Issue> {
    crate::fast::issue(text).or_else(|| serde_json::from_str(text).ok())
}

/// One issue line of the layout: where the issue's JSON text is, and where its id is (the
/// id's characters between its quotes, free of escapes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IssueLine {
    pub(crate) text: Range<usize>,
    pub(crate) id: Range<usize>,
}

/// The issue lines of a file in the layout.
#[derive(Debug)]
pub(crate) struct IssueLines {
    /// Where the first issue line starts.
    pub(crate) start: usize,
    /// Where the line that closes the issues array (`  ]`) starts.
    pub(crate) end: usize,
    pub(crate) lines: Vec<IssueLine>,
}

impl IssueLines {
    /// `None` unless every line of the issues array has the layout's form: indented by four
    /// spaces, opening with the issue's `"id"`, ending with `}` and, but for the last, a comma.
    /// The JSON of the lines is not checked; parsing the file does that.
    pub(crate) fn find(original: &[u8]) -> Option<IssueLines> {
        let start = issue_lines_start(original)?;
        let mut pos = start;
        let mut lines = Vec::new();
        loop {
            let end = pos + memchr::memchr(b'\n', &original[pos..])?;
            let line = original[pos..end].strip_prefix(ISSUE_INDENT)?;
            let (text, more) = match line.strip_suffix(b",") {
                Some(text) => (text, true),
                None => (line, false),
            };
            let id = text.strip_prefix(ID_PREFIX)?;
            let id_len = memchr::memchr(b'"', id)?;
            if id[..id_len].contains(&b'\\') || !text.ends_with(b"}") {
                return None;
            }
            let text_start = pos + ISSUE_INDENT.len();
            let id_start = text_start + ID_PREFIX.len();
            lines.push(IssueLine {
                text: text_start..text_start + text.len(),
                id: id_start..id_start + id_len,
            });
            pos = end + 1;
            let closes = original[pos..].starts_with(b"  ]");
            if closes == more {
                // A comma before the close, or none before another line.
                return None;
            }
            if closes {
                return Some(IssueLines {
                    start,
                    end: pos,
                    lines,
                });
            }
        }
    }

    /// The file with its issue lines left out: the rest of the document, with an empty issues
    /// array.
    fn skeleton(&self, original: &[u8]) -> Vec<u8> {
        let mut skeleton = Vec::with_capacity(self.start + (original.len() - self.end));
        skeleton.extend_from_slice(&original[..self.start]);
        skeleton.extend_from_slice(&original[self.end..]);
        skeleton
    }

    /// The rest of the file, parsed; `None` unless it parses as an issues file with an empty
    /// `issues` array.
    pub(crate) fn parse_skeleton(&self, original: &[u8]) -> Option<IssuesFile> {
        let file: IssuesFile = serde_json::from_slice(&self.skeleton(original)).ok()?;
        file.issues.is_empty().then_some(file)
    }

    /// The index of the line of the issue with this id.
    pub(crate) fn position(&self, original: &[u8], id: &str) -> Option<usize> {
        self.lines
            .iter()
            .position(|line| &original[line.id.clone()] == id.as_bytes())
    }

    /// Whether the lines are those of `issues`: as many, each with its issue's id.
    pub(crate) fn hold(&self, original: &[u8], issues: &[Issue]) -> bool {
        self.lines.len() == issues.len()
            && self
                .lines
                .iter()
                .zip(issues)
                .all(|(line, issue)| &original[line.id.clone()] == issue.id.as_bytes())
    }
}

/// The byte range of each issue's JSON text in `original`, or `None` when the file does not
/// have exactly one line per issue of `issues`, in order, each starting with its id.
pub(crate) fn issue_ranges(original: &[u8], issues: &[Issue]) -> Option<Vec<Range<usize>>> {
    let found = IssueLines::find(original)?;
    found
        .hold(original, issues)
        .then(|| found.lines.into_iter().map(|line| line.text).collect())
}

/// How to write a file that differs from `original` in a few issues by copying the other
/// issues' lines.
pub(crate) struct Splice {
    /// The new file serialized with an empty issues array.
    skeleton: Vec<u8>,
    /// Where `skeleton` shows its empty issues array.
    at: usize,
    /// The byte range of each issue's JSON text in the original file.
    ranges: Vec<Range<usize>>,
}

impl Splice {
    /// `None` when `original` is not in the one-issue-per-line layout with `issues`, or
    /// `skeleton` (the new file serialized with an empty issues array) does not show that
    /// array in the layout's form.
    pub(crate) fn plan(original: &[u8], issues: &[Issue], skeleton: Vec<u8>) -> Option<Splice> {
        Splice::with_ranges(issue_ranges(original, issues)?, skeleton)
    }

    /// The plan for issue lines already found ([`IssueLines::find`]): `ranges` are their
    /// texts.
    pub(crate) fn with_ranges(ranges: Vec<Range<usize>>, skeleton: Vec<u8>) -> Option<Splice> {
        if ranges.is_empty() {
            return None;
        }
        let at = memchr::memmem::find(&skeleton, EMPTY)?;
        Some(Splice {
            skeleton,
            at,
            ranges,
        })
    }

    /// Write the new file: issue `n` is serialized from the issue paired with `n` in `changed`
    /// (sorted by `n`), and copied from the original otherwise. Runs of unchanged issues are
    /// copied as one slice: [`IssueLines::find`] has checked that the bytes between them are
    /// exactly the layout's separators. `original` is the file the plan was made for.
    pub(crate) fn write<W: std::io::Write + ?Sized>(
        &self,
        writer: &mut W,
        original: &[u8],
        changed: &[(usize, &Issue)],
    ) -> std::io::Result<()> {
        let (Some(first), Some(last)) = (self.ranges.first(), self.ranges.last()) else {
            return Err(std::io::Error::other("a spliced write needs issues"));
        };
        writer.write_all(&self.skeleton[..self.at])?;
        writer.write_all(OPEN)?;
        writer.write_all(ISSUE_INDENT)?;
        // Where the next slice of `original` to copy starts.
        let mut copy_from = first.start;
        for &(n, issue) in changed {
            let Some(range) = self.ranges.get(n) else {
                continue;
            };
            writer.write_all(&original[copy_from..range.start])?;
            layout::write_member(&mut *writer, issue)?;
            copy_from = range.end;
        }
        writer.write_all(&original[copy_from..last.end])?;
        writer.write_all(b"\n  ]")?;
        writer.write_all(&self.skeleton[self.at + EMPTY.len()..])
    }
}

/// The golden file with its issues repeated past the parallel threshold, and its text in the
/// layout.
#[cfg(test)]
pub(crate) fn large_sample() -> (IssuesFile, String) {
    let text = include_str!("../tests/golden/full.json");
    let mut file = crate::store::parse(std::path::Path::new("full.json"), text.as_bytes())
        .unwrap_or_else(|e| panic!("{e}"));
    let base = file.issues.clone();
    file.issues = (0..LARGE + 7)
        .map(|n| {
            let mut issue = base[n % base.len()].clone();
            issue.id = format!("{}-{n}", issue.id);
            issue.fingerprint = format!("{}-{n}", issue.fingerprint);
            let span = issue.end_line - issue.line;
            issue.line = u32::try_from(n + 1).unwrap_or(u32::MAX);
            issue.end_line = issue.line + span;
            issue
        })
        .collect();
    let text = crate::store::to_json(&file);
    (file, text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{HistoryEntry, HistoryStatus, Status};

    fn sample() -> IssuesFile {
        let text = include_str!("../tests/golden/full.json");
        crate::store::parse(std::path::Path::new("full.json"), text.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn splice(original: &[u8], file: &IssuesFile, changed: &[usize]) -> Vec<u8> {
        let plan = crate::store::plan_splice(original, file)
            .unwrap_or_else(|| panic!("the file is in the layout"));
        let mut out = Vec::new();
        let changed: Vec<(usize, &Issue)> = changed.iter().map(|&n| (n, &file.issues[n])).collect();
        plan.write(&mut out, original, &changed)
            .unwrap_or_else(|e| panic!("{e}"));
        out
    }

    /// Whatever is changed, the spliced bytes are those of a full serialization with the
    /// recomputed summary.
    #[test]
    fn splice_equals_full_serialization() {
        let original_file = sample();
        assert!(
            original_file.issues.len() >= 2,
            "the golden file has issues"
        );
        let original = crate::store::to_json(&original_file).into_bytes();
        for n in 0..original_file.issues.len() {
            let mut file = original_file.clone();
            file.issues[n].status = Status::Fixed;
            file.issues[n].history.push(HistoryEntry {
                at: "2026-01-01T00:00:00Z".to_owned(),
                status: HistoryStatus::Fixed,
                note: Some("a \"quoted\" note\nwith a newline".to_owned()),
            });
            let spliced = splice(&original, &file, &[n]);
            let full = crate::store::to_json(&file);
            assert_eq!(String::from_utf8_lossy(&spliced), full, "issue {n}");
        }
        // Several at once, unsorted indices as the store sorts them first.
        let mut file = original_file.clone();
        let last = file.issues.len() - 1;
        file.issues[0].reason = Some("first".to_owned());
        file.issues[last].reason = Some("last".to_owned());
        let spliced = splice(&original, &file, &[0, last]);
        assert_eq!(
            String::from_utf8_lossy(&spliced),
            crate::store::to_json(&file)
        );
        // A change the caller did not declare is not written: this is why the store checks
        // spliced writes in debug builds.
        let spliced = splice(&original, &file, &[0]);
        assert_ne!(
            String::from_utf8_lossy(&spliced),
            crate::store::to_json(&file)
        );
    }

    #[test]
    fn parallel_parse_equals_whole_document_parse() {
        let (_, text) = large_sample();
        let whole: IssuesFile = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        let parallel = parse_parallel(&text);
        assert!(
            parallel.is_some_and(|parallel| parallel == whole),
            "a large file in the layout is read by lines, as the whole document reads"
        );
        // Too small: the caller's plain parse.
        let small = crate::store::to_json(&sample());
        assert!(parse_parallel(&small).is_none());
    }

    #[test]
    fn parallel_parse_never_differs_from_whole_document_parse() {
        let (_, text) = large_sample();
        let start = text.find("\"issues\": [").unwrap_or(0);
        let mut cases: Vec<String> = Vec::new();
        // Byte edits across the issues (some keep the JSON valid, most do not).
        for at in (start..text.len()).step_by(text.len() / 20) {
            for with in [" ", ",", "\n", "}", "\"", "7", "\n  ]"] {
                let mut edited = text.clone();
                if edited.is_char_boundary(at) {
                    edited.insert_str(at, with);
                    cases.push(edited);
                }
            }
        }
        // Layout changes that keep the same data.
        cases.push(text.replacen("},\n    {", "}, {", 1));
        cases.push(text.replacen("},\n    {", "},\n\n    {", 1));
        cases.push(text.replacen("},\n    {", "}\n    ,{", 1));
        cases.push(text.replace('\n', "\r\n"));
        // Another `issues` key, nested and at the top level.
        cases.push(text.replacen(
            "\"root\"",
            "\"tool2\": {\n  \"issues\": [\n  ]},\n  \"root\"",
            1,
        ));
        cases.push(text.replacen("\"root\"", "\"issues\": [],\n  \"root\"", 1));
        let mut in_parallel = 0;
        for (n, case) in cases.iter().enumerate() {
            let whole = serde_json::from_str::<IssuesFile>(case).ok();
            let parallel = parse_parallel(case);
            assert!(
                parallel.is_none() || parallel == whole,
                "case {n}: the parallel parse gave what the whole-document parse does not"
            );
            in_parallel += usize::from(parallel.is_some());
        }
        // Edits inside strings keep the layout: those cases must have taken the parallel path.
        assert!(in_parallel > 10, "{in_parallel} cases parsed in parallel");
    }

    #[test]
    fn refuses_files_not_in_the_layout() {
        let file = sample();
        let canonical = crate::store::to_json(&file);
        assert!(issue_ranges(canonical.as_bytes(), &file.issues).is_some());
        // Pretty-printed by another tool: issues span several lines.
        let pretty = serde_json::to_string_pretty(&file).unwrap_or_default();
        assert!(issue_ranges(pretty.as_bytes(), &file.issues).is_none());
        // CRLF line endings.
        let crlf = canonical.replace('\n', "\r\n");
        assert!(issue_ranges(crlf.as_bytes(), &file.issues).is_none());
        // Two issues swapped: the ids no longer match their lines.
        let mut swapped = file.clone();
        swapped.issues.swap(0, 1);
        assert!(issue_ranges(canonical.as_bytes(), &swapped.issues).is_none());
        // One issue fewer in the model than lines in the file.
        assert!(issue_ranges(canonical.as_bytes(), &file.issues[1..]).is_none());
        assert!(issue_ranges(canonical.as_bytes(), &file.issues[..1]).is_none());
        // An id that is a prefix of the line's id.
        let mut prefix = file.clone();
        prefix.issues[0].id.pop();
        assert!(issue_ranges(canonical.as_bytes(), &prefix.issues).is_none());
    }
}
