//! The code inventory: what changed in the project since the port started, from git.

use super::records::Span;
use crate::error::{Error, Result};
use crate::install::MIGRATE_DIR;
use std::fs;
use std::io::Read;
use std::path::Path;
use std::process::Command;

/// git's well-known id of the empty tree: the base when the repository has no commit yet.
/// Git's empty tree: the base when the port began with the repository's first commit.
pub const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// Files the tools write while porting; they are records, not code changes.
const RECORDS: [&str; 5] = [
    "issues.json",
    "issues.json.lock",
    "migrate_to_cloudrobo/.npu-assets.json",
    "migrate_to_cloudrobo/ADAPTATION_SUMMARY.md",
    "migrate_to_cloudrobo/verify-report.json",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Added,
    Removed,
    Modified,
    Renamed,
    /// Not tracked by git yet.
    Untracked,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Added => "added",
            Kind::Removed => "removed",
            Kind::Modified => "modified",
            Kind::Renamed => "renamed",
            Kind::Untracked => "added (untracked)",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Relative to the project, `/`-separated; `old → new` for a rename.
    pub path: String,
    pub kind: Kind,
    /// Lines added and removed; `None` for binary files.
    pub added: Option<u64>,
    pub removed: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct Inventory {
    /// Short commit id (or `empty tree`).
    pub base: String,
    /// How the base was chosen, for the reader.
    pub base_why: String,
    /// Sorted by path.
    pub changes: Vec<Change>,
    /// Untracked files written while a training or verify run was going: its outputs
    /// (checkpoints, dumps), not code. Sorted.
    pub artifacts: Vec<String>,
    /// What `.gitignore` leaves out (folders as `dir/`), never counted. Sorted.
    pub ignored: Vec<String>,
}

/// The inventory of `project` against `base` (or the detected start of the port).
///
/// `Ok(Err(note))` when git cannot give one (no git, not a repository): the summary says why.
/// `Err` only for a `base` that does not name a commit, which the user must fix.
pub fn inventory(
    project: &Path,
    base: Option<&str>,
    runs: &[Span],
) -> Result<std::result::Result<Inventory, String>> {
    if let Err(e) = git(project, &["rev-parse", "--is-inside-work-tree"]) {
        return Ok(Err(format!("no git inventory: {e}")));
    }
    let (base, base_why) = match base {
        Some(rev) => {
            let spec = format!("{rev}^{{commit}}");
            let id = git(project, &["rev-parse", "--verify", "--quiet", &spec]).map_err(|_| {
                Error::Git {
                    args: format!("rev-parse {rev}"),
                    message: format!(
                        "`{rev}` is not a commit in this repository; pass --base with a commit, branch or tag"
                    ),
                }
            })?;
            (id.trim().to_owned(), format!("`--base {rev}`"))
        }
        None => detect_base(project),
    };
    let result = (|| -> std::result::Result<Inventory, String> {
        let numstat = git(
            project,
            &["diff", "--numstat", "-z", "-M", "--relative", &base, "--"],
        )?;
        let status = git(
            project,
            &[
                "diff",
                "--name-status",
                "-z",
                "-M",
                "--relative",
                &base,
                "--",
            ],
        )?;
        let mut changes = join(&parse_name_status(&status), &parse_numstat(&numstat));
        let untracked = git(
            project,
            &["ls-files", "--others", "--exclude-standard", "-z"],
        )?;
        let mut artifacts = Vec::new();
        for path in untracked.split('\0').filter(|p| !p.is_empty()) {
            if is_record(path) {
                continue;
            }
            if written_during(&project.join(path), runs) {
                artifacts.push(path.to_owned());
                continue;
            }
            let lines = count_lines(&project.join(path));
            changes.push(Change {
                path: path.to_owned(),
                kind: Kind::Untracked,
                added: lines,
                removed: lines.map(|_| 0),
            });
        }
        changes.retain(|c| !is_record(&c.path));
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        artifacts.sort();
        let ignored = git(
            project,
            &[
                "ls-files",
                "--others",
                "--ignored",
                "--exclude-standard",
                "--directory",
                "-z",
            ],
        )?;
        let mut ignored: Vec<String> = ignored
            .split('\0')
            .filter(|p| !p.is_empty() && !p.ends_with("__pycache__/"))
            .map(str::to_owned)
            .collect();
        ignored.sort();
        // A folder stands for everything in it (git may list both).
        let folders: Vec<String> = ignored
            .iter()
            .filter(|p| p.ends_with('/'))
            .cloned()
            .collect();
        ignored.retain(|p| {
            !folders
                .iter()
                .any(|f| p.len() > f.len() && p.starts_with(f.as_str()))
        });
        let short = if base == EMPTY_TREE {
            "empty tree".to_owned()
        } else {
            base.chars().take(12).collect()
        };
        Ok(Inventory {
            base: short,
            base_why: base_why.clone(),
            changes,
            artifacts,
            ignored,
        })
    })();
    Ok(result.map_err(|e| format!("no git inventory: {e}")))
}

/// How to choose another base, for the reader of the summary.
const OVERRIDE: &str = "another base: `npu-assets summary . --base REV`";

/// The text the NPU setup that `npu-scan --fix` inserts at entry points always holds.
const SETUP_MARKER: &str = "_NPU_PATCHER";

/// The last commit before the port began: the parent of the first commit (in HEAD's history)
/// that touched `migrate_to_cloudrobo/` or `issues.json`, or added the NPU setup at an entry
/// point; HEAD when no commit did (the port is not committed yet); the empty tree without
/// commits. With how it was chosen.
pub fn detect_base(project: &Path) -> (String, String) {
    let Ok(head) = git(project, &["rev-parse", "--verify", "--quiet", "HEAD"]) else {
        return (
            EMPTY_TREE.to_owned(),
            "the empty tree; the repository has no commit yet".to_owned(),
        );
    };
    let first = |args: &[&str]| -> Option<String> {
        let mut full = vec!["log", "--format=%H", "--reverse"];
        full.extend_from_slice(args);
        git(project, &full)
            .ok()
            .and_then(|out| out.lines().next().map(str::to_owned))
            .filter(|c| !c.is_empty())
    };
    let dir = format!("{MIGRATE_DIR}/");
    let pickaxe = format!("-S{SETUP_MARKER}");
    let candidates = [
        first(&["--", &dir, "issues.json"]),
        first(&[&pickaxe, "--", "."]),
    ];
    // The earlier of the two: the one the other descends from.
    let start = candidates.into_iter().flatten().reduce(|a, b| {
        let b_first = git(project, &["merge-base", "--is-ancestor", &b, &a]).is_ok() && a != b;
        if b_first { b } else { a }
    });
    let Some(start) = start else {
        return (
            head.trim().to_owned(),
            format!(
                "HEAD, since no commit touches `{MIGRATE_DIR}/`, issues.json or the NPU setup: the \
                 port is not committed, and the inventory is the working tree's changes ({OVERRIDE})"
            ),
        );
    };
    let short: String = start.chars().take(12).collect();
    let subject = git(project, &["log", "-1", "--format=%s", &start])
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let parent = format!("{start}^");
    let base = git(project, &["rev-parse", "--verify", "--quiet", &parent])
        .map_or_else(|_| EMPTY_TREE.to_owned(), |p| p.trim().to_owned());
    (
        base,
        format!(
            "the last commit before the port began: the parent of `{short}` (\"{subject}\"), the \
             first commit that touched `{MIGRATE_DIR}/`, issues.json or the NPU setup ({OVERRIDE})"
        ),
    )
}

fn git(project: &Path, args: &[&str]) -> std::result::Result<String, String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(project)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let first = stderr.lines().next().unwrap_or("").trim().to_owned();
        Err(if first.is_empty() {
            format!("git {} failed ({})", args.join(" "), out.status)
        } else {
            first
        })
    }
}

/// `git diff --name-status -z`: `M\0path\0`, `R100\0old\0new\0`.
fn parse_name_status(text: &str) -> Vec<(Kind, String)> {
    let mut fields = text.split('\0');
    let mut out = Vec::new();
    while let Some(code) = fields.next() {
        let Some(first) = code.chars().next() else {
            continue;
        };
        let kind = match first {
            'A' => Kind::Added,
            'D' => Kind::Removed,
            'R' | 'C' => Kind::Renamed,
            _ => Kind::Modified,
        };
        let Some(path) = fields.next() else { break };
        let path = if matches!(first, 'R' | 'C') {
            let new = fields.next().unwrap_or_default();
            format!("{path} → {new}")
        } else {
            path.to_owned()
        };
        out.push((kind, path));
    }
    out
}

/// `git diff --numstat -z`: `A\tD\tpath\0` or, for renames, `A\tD\t\0old\0new\0`; `-` for binary.
fn parse_numstat(text: &str) -> Vec<(String, Option<u64>, Option<u64>)> {
    let mut fields = text.split('\0');
    let mut out = Vec::new();
    while let Some(record) = fields.next() {
        let mut parts = record.splitn(3, '\t');
        let (Some(added), Some(removed), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = if path.is_empty() {
            let old = fields.next().unwrap_or_default();
            let new = fields.next().unwrap_or_default();
            format!("{old} → {new}")
        } else {
            path.to_owned()
        };
        out.push((path, added.parse().ok(), removed.parse().ok()));
    }
    out
}

fn join(status: &[(Kind, String)], numstat: &[(String, Option<u64>, Option<u64>)]) -> Vec<Change> {
    status
        .iter()
        .map(|(kind, path)| {
            let counts = numstat.iter().find(|(p, _, _)| p == path);
            Change {
                path: path.clone(),
                kind: *kind,
                added: counts.and_then(|c| c.1),
                removed: counts.and_then(|c| c.2),
            }
        })
        .collect()
}

fn is_record(path: &str) -> bool {
    RECORDS.contains(&path) || path.starts_with(&format!("{MIGRATE_DIR}/logs/"))
}

/// The file was last written while one of `runs` was going.
fn written_during(path: &Path, runs: &[Span]) -> bool {
    let Some(at) = fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| jiff::Timestamp::try_from(t).ok())
    else {
        return false;
    };
    runs.iter().any(|r| r.contains(at))
}

/// Lines of a text file; `None` for binary or very large files.
fn count_lines(path: &Path) -> Option<u64> {
    const LIMIT: u64 = 16 * 1024 * 1024;
    let file = fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    file.take(LIMIT + 1).read_to_end(&mut bytes).ok()?;
    if bytes.len() as u64 > LIMIT || bytes.iter().take(8192).any(|&b| b == 0) {
        return None;
    }
    let newlines = memchr::memchr_iter(b'\n', &bytes).count() as u64;
    let unterminated = u64::from(!bytes.is_empty() && !bytes.ends_with(b"\n"));
    Some(newlines + unterminated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_status_and_numstat_join_with_renames_and_binaries() {
        let status = [
            "M",
            "model/policy.py",
            "R087",
            "old.py",
            "new.py",
            "A",
            "img.png",
            "D",
            "gone.py",
            "",
        ]
        .join("\0");
        let numstat = [
            "3\t1\tmodel/policy.py",
            "2\t2\t",
            "old.py",
            "new.py",
            "-\t-\timg.png",
            "0\t9\tgone.py",
            "",
        ]
        .join("\0");
        let changes = join(&parse_name_status(&status), &parse_numstat(&numstat));
        assert_eq!(
            changes,
            [
                Change {
                    path: "model/policy.py".into(),
                    kind: Kind::Modified,
                    added: Some(3),
                    removed: Some(1)
                },
                Change {
                    path: "old.py → new.py".into(),
                    kind: Kind::Renamed,
                    added: Some(2),
                    removed: Some(2)
                },
                Change {
                    path: "img.png".into(),
                    kind: Kind::Added,
                    added: None,
                    removed: None
                },
                Change {
                    path: "gone.py".into(),
                    kind: Kind::Removed,
                    added: Some(0),
                    removed: Some(9)
                },
            ]
        );
    }

    #[test]
    fn records_are_not_code() {
        assert!(is_record("issues.json"));
        assert!(is_record(
            "migrate_to_cloudrobo/logs/train_20260101_000000.log"
        ));
        assert!(!is_record("migrate_to_cloudrobo/train.sh"));
    }
}
