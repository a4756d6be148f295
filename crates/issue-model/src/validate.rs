//! Rules of the format that serde cannot express: unique ids and fingerprints, 1-based
//! positions, a reason for every skip, well-formed timestamps.
//!
//! A broken rule is reported at the line and column of the offending field in the file, found
//! by a small scan of the JSON text (only done when something is wrong).

use crate::error::{Error, Result};
use crate::schema::{Issue, IssuesFile, Status};
use foldhash::{HashMap, HashMapExt as _, HashSet, HashSetExt as _};
use std::path::Path;

/// Check `file` (parsed from `bytes`) against the rules of the format.
pub(crate) fn validate(path: &Path, bytes: &[u8], file: &IssuesFile) -> Result<()> {
    let problems = problems(file);
    let Some(first) = problems.first() else {
        return Ok(());
    };
    let offset = locate(bytes, first.place);
    let (line, column) = line_column(bytes, offset);
    let mut message = first.message.clone();
    if problems.len() > 1 {
        let more = problems.len() - 1;
        let noun = if more == 1 { "problem" } else { "problems" };
        message = format!("{message} (and {more} more {noun})");
    }
    Err(Error::Validation {
        path: path.to_owned(),
        line,
        column,
        message,
    })
}

/// Where a problem is: a top-level field, or a field of the issue at an index of `issues`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Top(&'static str),
    Issue { index: usize, key: &'static str },
}

#[derive(Debug)]
struct Problem {
    place: Place,
    message: String,
}

fn problems(file: &IssuesFile) -> Vec<Problem> {
    let mut out = Vec::new();
    // Keyed by text from the user's own file: foldhash, as SipHash's resistance to chosen keys
    // buys nothing here.
    // Most entries share a few timestamps (every `found` entry has the scan's): parse each once.
    let mut good_times: HashSet<&str> = HashSet::new();
    let mut top = |key: &'static str, message: String| {
        out.push(Problem {
            place: Place::Top(key),
            message,
        });
    };
    if file.root.is_empty() {
        top("root", "`root` is empty".to_owned());
    }
    if !is_timestamp(&file.scanned_at) {
        top(
            "scanned_at",
            format!(
                "`scanned_at` is `{}`, not an RFC 3339 time such as 2025-01-31T12:00:00Z",
                file.scanned_at
            ),
        );
    }
    for (k, entry) in file.unparsed.iter().enumerate() {
        if entry.file.is_empty() {
            top("unparsed", format!("unparsed[{k}] has an empty `file`"));
        }
        if entry.line == Some(0) || entry.column == Some(0) {
            top(
                "unparsed",
                format!("unparsed[{k}] has a line or column 0; they are 1-based"),
            );
        }
    }

    let mut ids: HashMap<&str, usize> = HashMap::with_capacity(file.issues.len());
    let mut fingerprints: HashMap<&str, usize> = HashMap::with_capacity(file.issues.len());
    for (index, issue) in file.issues.iter().enumerate() {
        let mut at = |key: &'static str, message: String| {
            out.push(Problem {
                place: Place::Issue { index, key },
                message,
            });
        };
        let who = Who { issue, index };
        if issue.id.is_empty() || issue.id.chars().any(char::is_whitespace) {
            at(
                "id",
                format!("issues[{index}] has id `{}`; an id is one word", issue.id),
            );
        } else if let Some(first) = ids.insert(&issue.id, index) {
            at(
                "id",
                format!(
                    "duplicate id {} (issues[{first}] and issues[{index}])",
                    issue.id
                ),
            );
        }
        if issue.fingerprint.is_empty() {
            at("fingerprint", format!("{who} has an empty `fingerprint`"));
        } else if let Some(first) = fingerprints.insert(&issue.fingerprint, index) {
            at(
                "fingerprint",
                format!(
                    "{who} has the same fingerprint as issues[{first}]; rescans match issues by fingerprint, so each must be unique"
                ),
            );
        }
        if !is_pattern(&issue.pattern) {
            at(
                "pattern",
                format!(
                    "{who} has pattern `{}`; a pattern looks like P_RND",
                    issue.pattern
                ),
            );
        }
        check_position(issue, &who, &mut at);
        if let Some(fix) = &issue.fix {
            let mut end = 0;
            for edit in &fix.edits {
                if edit.start > edit.end || edit.start < end {
                    at(
                        "fix",
                        format!(
                            "{who} has a fix whose edits are reversed or overlap (at bytes {}..{})",
                            edit.start, edit.end
                        ),
                    );
                    break;
                }
                end = edit.end;
            }
        }
        if issue.status == Status::Skipped && issue.reason.as_deref().is_none_or(is_blank) {
            let key = if issue.reason.is_some() {
                "reason"
            } else {
                "status"
            };
            at(
                key,
                format!("{who} is skipped without a reason; every skip needs one"),
            );
        }
        for (k, entry) in issue.history.iter().enumerate() {
            if good_times.contains(entry.at.as_str()) {
                continue;
            }
            if is_timestamp(&entry.at) {
                good_times.insert(&entry.at);
            } else {
                at(
                    "history",
                    format!(
                        "{who}: history[{k}].at is `{}`, not an RFC 3339 time",
                        entry.at
                    ),
                );
            }
        }
        for (k, related) in issue.related.iter().enumerate() {
            if related.line == 0 || related.column == 0 {
                at(
                    "related",
                    format!("{who}: related[{k}] has a line or column 0; they are 1-based"),
                );
            }
        }
    }
    out
}

fn check_position(issue: &Issue, who: &Who<'_>, at: &mut impl FnMut(&'static str, String)) {
    if issue.file.is_empty() {
        at("file", format!("{who} has an empty `file`"));
    } else if issue.file.starts_with('/') || issue.file.get(1..3) == Some(":\\") {
        at(
            "file",
            format!(
                "{who} has an absolute `file` ({}); files are relative to `root`",
                issue.file
            ),
        );
    }
    if issue.line == 0 {
        at("line", format!("{who} has line 0; lines are 1-based"));
    }
    if issue.column == 0 {
        at("column", format!("{who} has column 0; columns are 1-based"));
    }
    if issue.end_line < issue.line {
        at(
            "end_line",
            format!(
                "{who} ends (line {}) before it starts (line {})",
                issue.end_line, issue.line
            ),
        );
    } else if issue.end_column == 0
        || (issue.end_line == issue.line && issue.end_column < issue.column)
    {
        at(
            "end_column",
            format!(
                "{who} ends (column {}) before it starts (column {})",
                issue.end_column, issue.column
            ),
        );
    }
}

/// How a problem names its issue: by id, or by index when the id is empty. Formatted only
/// when there is a problem to report.
struct Who<'a> {
    issue: &'a Issue,
    index: usize,
}

impl std::fmt::Display for Who<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.issue.id.is_empty() {
            write!(f, "issues[{}]", self.index)
        } else {
            write!(f, "issue {}", self.issue.id)
        }
    }
}

fn is_blank(s: &str) -> bool {
    s.trim().is_empty()
}

fn is_timestamp(s: &str) -> bool {
    s.parse::<jiff::Timestamp>().is_ok()
}

fn is_pattern(s: &str) -> bool {
    s.strip_prefix("P_").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Container {
    Object,
    Array,
    IssuesArray,
}

/// The byte offset of `place` in the JSON text: the key of the field, or failing that the start
/// of the issue's object, or failing that the start of the file.
fn locate(bytes: &[u8], place: Place) -> usize {
    let mut stack: Vec<Container> = Vec::new();
    let mut top_key: &[u8] = b"";
    let mut issue_index: Option<usize> = None;
    let mut issue_start = None;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                let content = &bytes[start + 1..i.min(bytes.len())];
                let mut j = i + 1;
                while j < bytes.len() && bytes[j].is_ascii_whitespace() {
                    j += 1;
                }
                if bytes.get(j) == Some(&b':') {
                    match (place, stack.as_slice()) {
                        (Place::Top(key), [Container::Object]) => {
                            if content == key.as_bytes() {
                                return start;
                            }
                            top_key = content;
                        }
                        (
                            Place::Issue { index, key },
                            [Container::Object, Container::IssuesArray, Container::Object],
                        ) if issue_index == Some(index) && content == key.as_bytes() => {
                            return start;
                        }
                        (_, [Container::Object]) => top_key = content,
                        _ => {}
                    }
                }
            }
            b'{' => {
                if stack.as_slice() == [Container::Object, Container::IssuesArray] {
                    let index = issue_index.map_or(0, |n| n + 1);
                    issue_index = Some(index);
                    if matches!(place, Place::Issue { index: wanted, .. } if wanted == index) {
                        issue_start = Some(i);
                    }
                }
                stack.push(Container::Object);
            }
            b'[' => {
                let issues = stack.as_slice() == [Container::Object] && top_key == b"issues";
                stack.push(if issues {
                    Container::IssuesArray
                } else {
                    Container::Array
                });
            }
            b'}' | b']' => {
                stack.pop();
            }
            _ => {}
        }
        i += 1;
    }
    issue_start.unwrap_or(0)
}

/// 1-based line and character column of a byte offset.
fn line_column(bytes: &[u8], offset: usize) -> (usize, usize) {
    let offset = offset.min(bytes.len());
    let before = &bytes[..offset];
    let line = before.split(|&b| b == b'\n').count();
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issue(index: usize, key: &'static str) -> Place {
        Place::Issue { index, key }
    }

    const TEXT: &str = r#"{
  "schema_version": 1,
  "scanned_at": "x",
  "issues": [
    {"id": "A-1", "note": "say \"id\": here", "line": 1},
    {
      "history": [{"id": "nested"}],
      "id": "A-2",
      "line": 0
    }
  ]
}"#;

    #[test]
    fn falls_back_to_the_issue_then_the_file() {
        let offset = locate(TEXT.as_bytes(), issue(1, "reason"));
        assert_eq!(line_column(TEXT.as_bytes(), offset), (6, 5));
        let offset = locate(TEXT.as_bytes(), issue(7, "id"));
        assert_eq!(offset, 0);
    }
}
