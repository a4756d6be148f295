//! Automatic fixes (`npu-scan --fix`): the edits a rule attaches to a finding, and applying
//! them to a file without ever corrupting it.
//!
//! A rule builds a [`Fix`] with [`replacement`] or [`edits`]; the engine stamps it with the
//! hash of the text it was made for. [`apply_to_file`] applies the fixes of one file: it skips
//! a file whose text no longer has that hash, applies the fixes that do not overlap (the others
//! wait for the next pass, after a rescan), re-parses the result and drops any fix that would
//! break parsing, keeps the encoding, byte order mark and line endings (`\n`, `\r\n`, `\r`, or a
//! mix: an inserted line break follows the line it is inserted in), and replaces the file as
//! [`write`] describes: atomically, with its permissions, never through or over a link, never
//! outside the scanned root, and not when another program writes to it meanwhile. The diff of
//! a change is bytes ([`diff`]), so `git apply` and `patch -p1` reproduce the fix exactly.

mod diff;
pub mod write;

pub use diff::unified_diff;

use crate::source::{self, TextRange};
use issue_model::{Applicability, Edit, Fix};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::path::Path;

/// The rule whose fix inserts the NPU setup, which imports the runtime patcher from
/// [`SETUP_ASSETS`] under the project root.
pub const SETUP_RULE: &str = "P_ENT";

/// Where the inserted NPU setup imports the runtime patcher from, relative to the project root
/// (`npu-assets init PROJECT` puts it there).
pub const SETUP_ASSETS: &str = "migrate_to_cloudrobo/runtime_patches.py";

/// Why the fixes of `rule` cannot be applied in the project at `root` (a directory, or the one
/// file scanned) as it is: for [`SETUP_RULE`], a missing [`SETUP_ASSETS`], which the inserted
/// setup imports. `shown_root` is how the user named the project, for the command to run.
pub fn missing_prerequisite(root: &Path, rule: &str, shown_root: &str) -> Option<String> {
    if rule != SETUP_RULE {
        return None;
    }
    let dir = if root.is_file() {
        root.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    } else {
        root
    };
    let needed = dir.join(SETUP_ASSETS);
    if needed.is_file() {
        return None;
    }
    let project = if root.is_file() || shown_root.is_empty() {
        dir.to_string_lossy().into_owned()
    } else {
        shown_root.to_owned()
    };
    Some(format!(
        "the inserted NPU setup imports {}, which does not exist; run `npu-assets init {project}` first, then fix again",
        needed.display()
    ))
}

/// A fix that replaces `range` of the file with `content`.
pub fn replacement(
    applicability: Applicability,
    message: impl Into<String>,
    range: TextRange,
    content: impl Into<String>,
) -> Fix {
    edits(applicability, message, vec![(range, content.into())])
}

/// A fix of several edits (in any order; they must not overlap).
pub fn edits(
    applicability: Applicability,
    message: impl Into<String>,
    mut edits: Vec<(TextRange, String)>,
) -> Fix {
    edits.sort_by_key(|(range, _)| (range.start(), range.end()));
    Fix {
        applicability,
        message: message.into(),
        source_hash: String::new(),
        edits: edits
            .into_iter()
            .map(|(range, content)| Edit {
                start: range.start().to_u32(),
                end: range.end().to_u32(),
                content,
            })
            .collect(),
    }
}

/// `new` in the quotes of the plain string literal `src` (`"..."` or `'...'`, no prefix), for an
/// edit that swaps one literal for another in the same style; `None` for any other source.
pub fn requote(src: &str, new: &str) -> Option<String> {
    let quote = src.chars().next().filter(|q| matches!(q, '"' | '\''))?;
    (src.len() >= 2 && src.ends_with(quote)).then(|| format!("{quote}{new}{quote}"))
}

/// The first 16 hex digits of the SHA-256 of `text`: what [`Fix::source_hash`] holds.
pub fn source_hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let mut hex = String::with_capacity(16);
    for byte in &digest[..8] {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

/// One fix to apply: a key that identifies it in the outcome (the issue's fingerprint), and
/// the fix.
#[derive(Debug, Clone, Copy)]
pub struct Planned<'a> {
    pub key: &'a str,
    pub fix: &'a Fix,
}

/// What happened to the fixes of one file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileOutcome {
    /// Relative `/` path.
    pub file: String,
    /// Keys of the fixes applied (with `write: false`: that would be applied).
    pub applied: Vec<String>,
    /// Keys of the fixes that overlap an applied one: they are tried again after a rescan.
    pub deferred: Vec<String>,
    /// Keys of the fixes not applied, and why.
    pub dropped: Vec<(String, String)>,
    /// The unified diff of the change, as bytes ([`unified_diff`]); empty when nothing changed.
    pub diff: Vec<u8>,
    /// The file's bytes before the change (empty when nothing changed).
    pub before: Vec<u8>,
    /// The file's bytes after the change (empty when nothing changed).
    pub after: Vec<u8>,
}

/// Apply `fixes` to `file` (a relative `/` path under `root`; `root` itself when it is a
/// file). With `write`, the file is replaced atomically; without it nothing is written and the
/// outcome says what would be done.
pub fn apply_to_file(root: &Path, file: &str, fixes: &[Planned<'_>], write: bool) -> FileOutcome {
    apply_to_file_with(root, file, fixes, write, &mut |_, _| {})
}

/// [`apply_to_file`], with `hook` run at each [`write::Stage`] of the write (tests act there as
/// another program writing to the file would).
#[doc(hidden)]
pub fn apply_to_file_with(
    root: &Path,
    file: &str,
    fixes: &[Planned<'_>],
    write: bool,
    hook: &mut dyn FnMut(write::Stage, &Path),
) -> FileOutcome {
    let mut out = FileOutcome {
        file: file.to_owned(),
        ..FileOutcome::default()
    };
    let drop_all = |out: &mut FileOutcome, fixes: &[Planned<'_>], why: &str| {
        out.dropped
            .extend(fixes.iter().map(|p| (p.key.to_owned(), why.to_owned())));
    };
    let path = if root.is_file() {
        root.to_owned()
    } else {
        root.join(file)
    };
    let mut opened = match write::open(root, &path) {
        Ok(opened) => opened,
        Err(why) => {
            drop_all(&mut out, fixes, &why);
            return out;
        }
    };
    let bytes = opened.bytes.clone();
    let decoded = source::decode(&bytes);
    if let Some(why) = &decoded.lossy {
        drop_all(&mut out, fixes, &format!("{why}; fix it by hand"));
        return out;
    }
    let text = decoded.text.as_str();
    if encode(&decoded, text).as_deref() != Some(bytes.as_slice()) {
        let why = format!(
            "the file's encoding ({}) does not round-trip exactly, so it is not rewritten; fix it by hand",
            decoded.encoding.name()
        );
        drop_all(&mut out, fixes, &why);
        return out;
    }

    let hash = source_hash(text);
    let mut candidates: Vec<Planned<'_>> = Vec::new();
    for planned in fixes {
        if planned.fix.source_hash != hash {
            out.dropped.push((
                planned.key.to_owned(),
                "the file changed since it was scanned; rescan and fix again".to_owned(),
            ));
        } else if !fits(text, planned.fix) {
            out.dropped.push((
                planned.key.to_owned(),
                "its edits do not fit the file (out of range or overlapping)".to_owned(),
            ));
        } else {
            candidates.push(*planned);
        }
    }
    candidates.sort_by_key(|p| (p.fix.edits.first().map_or(0, |e| e.start), p.key));
    let mut accepted: Vec<Planned<'_>> = Vec::new();
    // Fixes of two issues that make the very same edits (an unknown-device `raise` and the
    // `"cuda"` test of its dispatch): applying one applies both.
    let mut twins: Vec<Planned<'_>> = Vec::new();
    for planned in candidates {
        if accepted.iter().any(|a| a.fix.edits == planned.fix.edits) {
            twins.push(planned);
        } else if accepted.iter().any(|a| overlaps(a.fix, planned.fix)) {
            out.deferred.push(planned.key.to_owned());
        } else {
            accepted.push(planned);
        }
    }

    let mut new_text = compose(text, &accepted);
    if check(file, &new_text).is_err() {
        // Find the fixes that break parsing, one at a time.
        let mut kept: Vec<Planned<'_>> = Vec::new();
        for planned in accepted {
            let mut trial = kept.clone();
            trial.push(planned);
            match check(file, &compose(text, &trial)) {
                Ok(()) => kept = trial,
                Err(why) => out.dropped.push((
                    planned.key.to_owned(),
                    format!("the edit would make the file fail to parse ({why}); not applied"),
                )),
            }
        }
        accepted = kept;
        new_text = compose(text, &accepted);
    }
    if accepted.is_empty() {
        return out;
    }
    let Some(new_bytes) = encode(&decoded, &new_text) else {
        let why = format!(
            "the fixed text cannot be written in the file's encoding ({})",
            decoded.encoding.name()
        );
        drop_all(&mut out, &accepted, &why);
        return out;
    };
    if write && let Err(why) = write::replace(&mut opened, &new_bytes, hook) {
        drop_all(&mut out, &accepted, &why);
        return out;
    }
    out.before = bytes;
    out.applied = accepted
        .iter()
        .chain(
            twins
                .iter()
                .filter(|t| accepted.iter().any(|a| a.fix.edits == t.fix.edits)),
        )
        .map(|p| p.key.to_owned())
        .collect();
    out.diff = unified_diff(file, &out.before, &new_bytes);
    out.after = new_bytes;
    out
}

/// The bytes of `text` in the encoding (and with the byte order mark) of `decoded`, or `None`
/// when the encoding cannot hold it or cannot be written.
fn encode(decoded: &source::Decoded, text: &str) -> Option<Vec<u8>> {
    let (bytes, used, unmappable) = decoded.encoding.encode(text);
    if unmappable || used != decoded.encoding {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() + 3);
    if decoded.bom {
        out.extend_from_slice(b"\xef\xbb\xbf");
    }
    out.extend_from_slice(&bytes);
    Some(out)
}

/// The edits are in order, do not overlap, and start and end on character boundaries.
fn fits(text: &str, fix: &Fix) -> bool {
    let mut end = 0;
    fix.edits.iter().all(|e| {
        let ok = e.start >= end
            && e.start <= e.end
            && text.is_char_boundary(e.start as usize)
            && text.is_char_boundary(e.end as usize);
        end = e.end;
        ok
    })
}

/// Two fixes touch the same text (an insertion at the same place counts).
fn overlaps(a: &Fix, b: &Fix) -> bool {
    a.edits.iter().any(|x| {
        b.edits
            .iter()
            .any(|y| x.start < y.end && y.start < x.end || x.start == y.start)
    })
}

/// `text` with the edits of `fixes`; the line breaks an edit inserts are those of the line it
/// is in ([`line_ending_at`]).
fn compose(text: &str, fixes: &[Planned<'_>]) -> String {
    let mut edits: Vec<&Edit> = fixes.iter().flat_map(|p| &p.fix.edits).collect();
    edits.sort_by_key(|e| (e.start, e.end));
    let mut out = String::with_capacity(text.len() + 256);
    let mut at = 0;
    for edit in edits {
        out.push_str(&text[at..edit.start as usize]);
        let ending = line_ending_at(text, edit.start as usize);
        let content = edit.content.replace("\r\n", "\n").replace('\r', "\n");
        if ending == "\n" {
            out.push_str(&content);
        } else {
            out.push_str(&content.replace('\n', ending));
        }
        at = edit.end as usize;
    }
    out.push_str(&text[at..]);
    out
}

/// The line break of the line that holds byte `at` of `text` (`\n`, `\r\n` or `\r`): the first
/// one at or after `at`, else the last one before it, else `\n`.
fn line_ending_at(text: &str, at: usize) -> &'static str {
    let bytes = text.as_bytes();
    let kind = |i: usize| match bytes[i] {
        b'\r' if bytes.get(i + 1) == Some(&b'\n') => "\r\n",
        b'\r' => "\r",
        _ => "\n",
    };
    if let Some(i) = bytes[at..].iter().position(|&b| b == b'\n' || b == b'\r') {
        return kind(at + i);
    }
    match bytes[..at].iter().rposition(|&b| b == b'\n' || b == b'\r') {
        // A `\n` preceded by `\r` ends a CRLF line.
        Some(i) if bytes[i] == b'\n' && i > 0 && bytes[i - 1] == b'\r' => "\r\n",
        Some(i) => kind(i),
        None => "\n",
    }
}

/// The fixed text still parses (Python, JSON); YAML and TOML edits replace one scalar and
/// are not re-parsed.
fn check(file: &str, text: &str) -> Result<(), String> {
    let extension = Path::new(file)
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    match extension.as_deref() {
        Some("py") => source::parse(text, file).map(|_| ()).map_err(|e| e.message),
        Some("json") => serde_json::from_str::<serde_json::Value>(text)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::TextSize;

    fn range(start: u32, end: u32) -> TextRange {
        TextRange::new(TextSize::new(start), TextSize::new(end))
    }

    fn stamped(text: &str, mut fix: Fix) -> Fix {
        fix.source_hash = source_hash(text);
        fix
    }

    fn run(name: &str, bytes: &[u8], fixes: &[Fix]) -> (FileOutcome, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let keys: Vec<String> = (0..fixes.len()).map(|i| format!("f{i}")).collect();
        let planned: Vec<Planned<'_>> = fixes
            .iter()
            .zip(&keys)
            .map(|(fix, key)| Planned { key, fix })
            .collect();
        let outcome = apply_to_file(dir.path(), name, &planned, true);
        (outcome, std::fs::read(&path).unwrap())
    }

    #[test]
    fn applies_non_overlapping_fixes_and_defers_the_rest() {
        let text = "a = 'cuda'\nb = 'cuda'\n";
        let fixes = [
            stamped(
                text,
                replacement(Applicability::Safe, "x", range(5, 9), "npu"),
            ),
            stamped(
                text,
                replacement(Applicability::Safe, "y", range(4, 10), "'cpu'"),
            ),
            stamped(
                text,
                replacement(Applicability::Safe, "z", range(16, 20), "npu"),
            ),
        ];
        let (outcome, after) = run("m.py", text.as_bytes(), &fixes);
        assert_eq!(outcome.applied, ["f1", "f2"]);
        assert_eq!(outcome.deferred, ["f0"]);
        assert_eq!(after, b"a = 'cpu'\nb = 'npu'\n");
        assert_eq!(
            String::from_utf8(outcome.diff).unwrap(),
            "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n-a = 'cuda'\n-b = 'cuda'\n+a = 'cpu'\n+b = 'npu'\n"
        );
    }

    #[test]
    fn drops_an_edit_that_breaks_parsing_and_keeps_the_others() {
        let text = "x = f(1)\ny = g(2)\n";
        let fixes = [
            stamped(
                text,
                replacement(Applicability::Safe, "bad", range(4, 8), "f(1"),
            ),
            stamped(
                text,
                replacement(Applicability::Safe, "good", range(13, 17), "h(3)"),
            ),
        ];
        let (outcome, after) = run("m.py", text.as_bytes(), &fixes);
        assert_eq!(outcome.applied, ["f1"]);
        assert_eq!(outcome.dropped.len(), 1);
        assert!(
            outcome.dropped[0].1.contains("fail to parse"),
            "{:?}",
            outcome.dropped
        );
        assert_eq!(after, b"x = f(1)\ny = h(3)\n");
    }

    #[test]
    fn keeps_bom_crlf_and_a_declared_encoding() {
        let text = "x = 1\r\ny = 2\r\n";
        let mut bytes = b"\xef\xbb\xbf".to_vec();
        bytes.extend_from_slice(text.as_bytes());
        let fix = stamped(
            text,
            replacement(Applicability::Safe, "ins", range(7, 7), "import os\n"),
        );
        let (outcome, after) = run("m.py", &bytes, &[fix]);
        assert_eq!(outcome.applied, ["f0"]);
        assert_eq!(after, b"\xef\xbb\xbfx = 1\r\nimport os\r\ny = 2\r\n");

        // latin-1, declared by a coding line: `é` stays one byte.
        let latin = b"# -*- coding: latin-1 -*-\ns = '\xe9'\nd = 'cuda'\n";
        let decoded = source::decode(latin);
        let start = u32::try_from(decoded.text.find("cuda").unwrap()).unwrap();
        let fix = stamped(
            &decoded.text,
            replacement(Applicability::Safe, "npu", range(start, start + 4), "npu"),
        );
        let (outcome, after) = run("l.py", latin, &[fix]);
        assert_eq!(outcome.applied, ["f0"]);
        assert_eq!(after, b"# -*- coding: latin-1 -*-\ns = '\xe9'\nd = 'npu'\n");
    }

    #[test]
    fn refuses_a_changed_file_and_invalid_bytes() {
        let fix = stamped(
            "a = 1\n",
            replacement(Applicability::Safe, "x", range(4, 5), "2"),
        );
        let (outcome, after) = run("m.py", b"a = 3\n", std::slice::from_ref(&fix));
        assert!(outcome.applied.is_empty());
        assert!(
            outcome.dropped[0]
                .1
                .contains("changed since it was scanned")
        );
        assert_eq!(after, b"a = 3\n");

        let (outcome, after) = run("m.py", b"a = 1 # \xff\n", &[fix]);
        assert!(outcome.applied.is_empty());
        assert!(
            outcome.dropped[0].1.contains("invalid UTF-8"),
            "{:?}",
            outcome.dropped
        );
        assert_eq!(after, b"a = 1 # \xff\n");
    }

    #[cfg(unix)]
    #[test]
    fn keeps_the_mode_and_writes_nothing_without_write() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.py");
        let text = "a = 1\n";
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let fix = stamped(
            text,
            replacement(Applicability::Safe, "x", range(4, 5), "2"),
        );
        let planned = [Planned {
            key: "k",
            fix: &fix,
        }];
        let dry = apply_to_file(dir.path(), "run.py", &planned, false);
        assert_eq!(dry.applied, ["k"]);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        let done = apply_to_file(dir.path(), "run.py", &planned, true);
        assert_eq!(done.diff, dry.diff);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a = 2\n");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755);
    }

    #[test]
    fn another_writer_between_read_and_rename_keeps_its_data_and_the_fix_is_not_applied() {
        use std::io::Write as _;
        // AfterRename: the other program opened the file before the rename and writes after it
        // (into the old file), while a third appends to the new file.
        for stage in [
            write::Stage::BeforeCheck,
            write::Stage::BeforeRename,
            write::Stage::AfterRename,
        ] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("m.py");
            let text = "a = 1\n";
            std::fs::write(&path, text).unwrap();
            let fix = stamped(
                text,
                replacement(Applicability::Safe, "x", range(4, 5), "2"),
            );
            let planned = [Planned {
                key: "k",
                fix: &fix,
            }];
            let append = |file: &Path| std::fs::OpenOptions::new().append(true).open(file).unwrap();
            let mut held: Option<std::fs::File> = None;
            let mut hook = |at: write::Stage, file: &Path| match (stage, at) {
                (write::Stage::AfterRename, write::Stage::BeforeRename) => {
                    held = Some(append(file));
                }
                (write::Stage::AfterRename, write::Stage::AfterRename) => {
                    held.take().unwrap().write_all(b"b = 2\n").unwrap();
                    append(file).write_all(b"c = 3\n").unwrap();
                }
                _ if at == stage => append(file).write_all(b"b = 2\n").unwrap(),
                _ => {}
            };
            let outcome = apply_to_file_with(dir.path(), "m.py", &planned, true, &mut hook);
            assert!(outcome.applied.is_empty(), "{stage:?}: {outcome:?}");
            assert!(
                outcome.dropped[0]
                    .1
                    .contains("another program changed the file"),
                "{stage:?}: {:?}",
                outcome.dropped
            );
            let expected = if stage == write::Stage::AfterRename {
                "a = 1\nb = 2\nc = 3\n"
            } else {
                "a = 1\nb = 2\n"
            };
            assert_eq!(
                std::fs::read_to_string(&path).unwrap(),
                expected,
                "{stage:?}"
            );
            let left: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(left, ["m.py"], "{stage:?}: temporary files left");
        }
    }

    #[test]
    fn inserted_line_breaks_follow_the_line_they_go_into() {
        assert_eq!(line_ending_at("a\r\nb\n", 0), "\r\n");
        assert_eq!(line_ending_at("a\r\nb\n", 3), "\n");
        assert_eq!(line_ending_at("a\rb\r", 2), "\r");
        assert_eq!(line_ending_at("a\r\nb", 4), "\r\n");
        assert_eq!(line_ending_at("a\rb", 3), "\r");
        assert_eq!(line_ending_at("ab", 1), "\n");
        let text = "x = 1\ry = 2\r";
        let fix = stamped(
            text,
            replacement(
                Applicability::Safe,
                "ins",
                range(6, 6),
                "import os\nimport sys\n",
            ),
        );
        let (outcome, after) = run("m.py", text.as_bytes(), &[fix]);
        assert_eq!(outcome.applied, ["f0"]);
        assert_eq!(after, b"x = 1\rimport os\rimport sys\ry = 2\r");
    }
}
