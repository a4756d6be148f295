//! Finding the scanned project on disk and reading a few lines of code around an issue.

use issue_model::Issue;
use serde::Serialize;
use std::fs;
use std::path::{Path, PathBuf};

/// Lines of context shown above and below an issue.
pub const CONTEXT: u32 = 3;
/// At most this many lines of a multi-line finding are marked; the rest are elided.
const MAX_MARKED: u32 = 10;

/// Where to look for the project: `root` from issues.json as given (absolute), else relative to
/// the current directory, else relative to the directory of issues.json, else that directory
/// itself (issues.json written at the project root by a scan given the project's path from its
/// parent, `npu-scan proj --output proj`, then read from anywhere).
pub fn root_candidates(root: &str, issues_json: &Path) -> Vec<PathBuf> {
    let root = Path::new(root);
    if root.is_absolute() {
        return vec![root.to_owned()];
    }
    let mut out = vec![root.to_owned()];
    if let Some(dir) = issues_json.parent() {
        let candidates = if dir.as_os_str().is_empty() {
            vec![PathBuf::from(".")]
        } else {
            vec![dir.join(root), dir.to_owned()]
        };
        for candidate in candidates {
            if !out.contains(&candidate) {
                out.push(candidate);
            }
        }
    }
    out
}

/// The project root holding `file` (relative to the root), if any candidate has it.
pub fn locate(root: &str, issues_json: &Path, file: &str) -> Option<(PathBuf, PathBuf)> {
    root_candidates(root, issues_json)
        .into_iter()
        .map(|r| {
            let path = r.join(file);
            (r, path)
        })
        .find(|(_, path)| path.is_file())
}

/// A few numbered lines of a source file, some of them marked.
#[derive(Debug, Clone, Serialize)]
pub struct Excerpt {
    /// The file as found on disk (relative to the current directory when the root is).
    pub path: String,
    pub lines: Vec<Line>,
    /// Set when the file changed since the scan: where the finding's code moved, or that it
    /// could not be found again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Line {
    pub number: u32,
    pub text: String,
    /// Part of the finding.
    pub marked: bool,
    /// For a one-line finding, the 1-based character columns it spans (end exclusive).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span: Option<(u32, u32)>,
}

/// Read the lines around `issue` from the project; the error says why they cannot be shown.
pub fn read(root: &str, issues_json: &Path, issue: &Issue) -> Result<Excerpt, String> {
    let Some((_, path)) = locate(root, issues_json, &issue.file) else {
        let looked: Vec<String> = root_candidates(root, issues_json)
            .iter()
            .map(|r| r.join(&issue.file).display().to_string())
            .collect();
        return Err(format!(
            "cannot find {} (looked at {})",
            issue.file,
            looked.join(", ")
        ));
    };
    let bytes = fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    let count = u32::try_from(all.len()).unwrap_or(u32::MAX);
    let (line, note) = match relocate(&all, issue) {
        Place::Unchanged => (issue.line, None),
        Place::Moved(line) => (
            line,
            Some(format!(
                "the file changed since the scan: this code was on line {}, it is on line {line} now (rescan with npu-scan to update)",
                issue.line
            )),
        ),
        Place::Lost => (
            issue.line,
            Some(format!(
                "the file changed since the scan: line {} no longer holds the scanned code (rescan with npu-scan)",
                issue.line
            )),
        ),
    };
    if line > count {
        return Err(format!(
            "{} has {count} lines, but the issue is on line {line}; the file changed since the scan (rescan with npu-scan)",
            path.display(),
        ));
    }
    let end_line = issue.end_line.max(issue.line) - issue.line + line;
    let first = line.saturating_sub(CONTEXT).max(1);
    let marked_end = end_line.clamp(line, line + MAX_MARKED - 1);
    let last = (marked_end + CONTEXT).min(count);
    let lines = (first..=last)
        .map(|number| {
            let marked = (line..=marked_end).contains(&number);
            let span = (marked && issue.end_line == issue.line && note.is_none())
                .then_some((issue.column, issue.end_column.max(issue.column + 1)));
            let index = usize::try_from(number - 1).unwrap_or(usize::MAX);
            Line {
                number,
                text: all.get(index).copied().unwrap_or("").to_owned(),
                marked,
                span,
            }
        })
        .collect();
    Ok(Excerpt {
        path: path.display().to_string(),
        lines,
        note,
    })
}

/// Where the finding's code is now, judged by the first line of its scanned snippet.
#[derive(Debug, PartialEq, Eq)]
enum Place {
    /// At the scanned line (or the snippet is unknown).
    Unchanged,
    /// The scanned line moved to this line (the nearest match).
    Moved(u32),
    /// Nowhere in the file any more.
    Lost,
}

fn relocate(lines: &[&str], issue: &Issue) -> Place {
    let Some(wanted) = issue
        .snippet
        .lines()
        .map(issue_model::normalize_snippet)
        .find(|l| !l.is_empty())
    else {
        return Place::Unchanged;
    };
    let holds = |index: usize| {
        lines
            .get(index)
            .is_some_and(|l| issue_model::normalize_snippet(l).contains(&wanted))
    };
    let scanned = usize::try_from(issue.line.max(1) - 1).unwrap_or(usize::MAX);
    if holds(scanned) {
        return Place::Unchanged;
    }
    let nearest = (0..lines.len())
        .filter(|&i| holds(i))
        .min_by_key(|&i| i.abs_diff(scanned));
    match nearest.and_then(|i| u32::try_from(i + 1).ok()) {
        Some(line) => Place::Moved(line),
        None => Place::Lost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers of the lines an excerpt marks.
    fn marked_lines(excerpt: &Excerpt) -> Vec<u32> {
        excerpt
            .lines
            .iter()
            .filter(|l| l.marked)
            .map(|l| l.number)
            .collect()
    }

    fn issue(file: &str, line: u32, end_line: u32) -> Issue {
        Issue {
            id: "RND-1".to_owned(),
            pattern: "P_RND".to_owned(),
            category: issue_model::Category::Device,
            severity: issue_model::Severity::Error,
            performance: false,
            file: file.to_owned(),
            line,
            column: 5,
            end_line,
            end_column: 9,
            symbol: None,
            message: String::new(),
            snippet: String::new(),
            related: vec![],
            fix_template: String::new(),
            fix: None,
            fingerprint: "f".to_owned(),
            status: issue_model::Status::Pending,
            reason: None,
            history: vec![],
            blocking: None,
            measured: None,
            measurement: None,
        }
    }

    #[test]
    fn candidates_are_cwd_then_beside_issues_json() {
        assert_eq!(
            root_candidates("proj", Path::new("out/issues.json")),
            [
                PathBuf::from("proj"),
                PathBuf::from("out/proj"),
                PathBuf::from("out")
            ]
        );
        assert_eq!(
            root_candidates("proj", Path::new("issues.json")),
            [PathBuf::from("proj"), PathBuf::from(".")]
        );
        assert_eq!(
            root_candidates("/abs/proj", Path::new("out/issues.json")),
            [PathBuf::from("/abs/proj")]
        );
    }

    #[test]
    fn excerpt_marks_the_line_and_clips_at_the_edges() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let text = (1..=10)
            .map(|n| format!("line {n}\r\n"))
            .collect::<Vec<_>>()
            .concat();
        std::fs::write(dir.path().join("a.py"), text).unwrap_or_else(|e| panic!("{e}"));
        let json = dir.path().join("issues.json");
        let root = dir.path().display().to_string();

        let excerpt = read(&root, &json, &issue("a.py", 2, 2)).unwrap_or_else(|e| panic!("{e}"));
        let numbers: Vec<u32> = excerpt.lines.iter().map(|l| l.number).collect();
        assert_eq!(numbers, [1, 2, 3, 4, 5]);
        let marked = marked_lines(&excerpt);
        assert_eq!(marked, [2]);
        assert_eq!(excerpt.lines[1].text, "line 2");
        assert_eq!(excerpt.lines[1].span, Some((5, 9)));

        let excerpt = read(&root, &json, &issue("a.py", 8, 9)).unwrap_or_else(|e| panic!("{e}"));
        let numbers: Vec<u32> = excerpt.lines.iter().map(|l| l.number).collect();
        assert_eq!(numbers, [5, 6, 7, 8, 9, 10]);
        assert!(excerpt.lines.iter().all(|l| l.span.is_none()));

        assert!(excerpt.note.is_none());

        let error = read(&root, &json, &issue("a.py", 11, 11))
            .err()
            .unwrap_or_default();
        assert!(error.contains("has 10 lines"), "{error}");
        let error = read(&root, &json, &issue("gone.py", 1, 1))
            .err()
            .unwrap_or_default();
        assert!(error.contains("cannot find gone.py"), "{error}");
    }

    #[test]
    fn code_is_found_beside_issues_json_whatever_the_root_was_relative_to() {
        // `npu-scan proj --output proj` run in the parent: root "proj", issues.json inside proj/;
        // npu-progress run from another directory with the file's full path.
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let project = dir.path().join("proj");
        std::fs::create_dir_all(project.join("pkg")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(project.join("pkg/step.py"), "a\nb\nc\n").unwrap_or_else(|e| panic!("{e}"));
        let json = project.join("issues.json");
        let (found, path) =
            locate("proj", &json, "pkg/step.py").unwrap_or_else(|| panic!("not found"));
        assert_eq!(found, project);
        assert_eq!(path, project.join("pkg/step.py"));
        let excerpt =
            read("proj", &json, &issue("pkg/step.py", 2, 2)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(marked_lines(&excerpt), [2]);
    }

    #[test]
    fn a_moved_finding_is_followed_and_a_lost_one_is_flagged() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let text = "import torch\n\n\nx = torch.randn(3)\ny = 1\n";
        std::fs::write(dir.path().join("a.py"), text).unwrap_or_else(|e| panic!("{e}"));
        let json = dir.path().join("issues.json");
        let root = dir.path().display().to_string();

        let mut moved = issue("a.py", 2, 2);
        moved.snippet = "x  =  torch.randn(3)".to_owned();
        let excerpt = read(&root, &json, &moved).unwrap_or_else(|e| panic!("{e}"));
        let marked = marked_lines(&excerpt);
        assert_eq!(marked, [4]);
        let note = excerpt.note.unwrap_or_default();
        assert!(note.contains("was on line 2, it is on line 4"), "{note}");

        let mut lost = issue("a.py", 4, 4);
        lost.snippet = "z = torch.zeros(3)".to_owned();
        let excerpt = read(&root, &json, &lost).unwrap_or_else(|e| panic!("{e}"));
        let note = excerpt.note.unwrap_or_default();
        assert!(note.contains("no longer holds the scanned code"), "{note}");

        let mut beyond = issue("a.py", 40, 40);
        beyond.snippet = "y = 1".to_owned();
        let excerpt = read(&root, &json, &beyond).unwrap_or_else(|e| panic!("{e}"));
        assert!(excerpt.lines.iter().any(|l| l.marked && l.number == 5));
    }
}
