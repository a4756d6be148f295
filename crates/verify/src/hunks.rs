//! The port's own changes, from git: the hunks of `git diff` against the start of the port (the
//! base `npu-assets summary` uses: the first commit that added `migrate_to_cloudrobo/`, else HEAD),
//! one hunk reverted in a text, and a copy of the project to run with a hunk reverted (the user's
//! tree is never written).

use patch_assets::summary::git::{EMPTY_TREE, detect_base};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One hunk of `git diff -U0`: lines `new_start..new_start + new_count` of the working tree
/// replaced `old_lines` of the base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// Relative to the project, `/`-separated.
    pub file: String,
    pub old_start: u64,
    pub old_lines: Vec<String>,
    /// 1-based; with `new_count == 0` the hunk removed lines after line `new_start`.
    pub new_start: u64,
    pub new_count: u64,
    pub new_lines: Vec<String>,
}

impl Hunk {
    /// The working tree's lines of the hunk, `first..=last` (for a removal, the line it follows).
    pub fn lines(&self) -> (u64, u64) {
        if self.new_count == 0 {
            (self.new_start, self.new_start)
        } else {
            (self.new_start, self.new_start + self.new_count - 1)
        }
    }

    /// `train.py:71` or `train.py:71-74`.
    pub fn at(&self) -> String {
        let (first, last) = self.lines();
        if first == last {
            format!("{}:{first}", self.file)
        } else {
            format!("{}:{first}-{last}", self.file)
        }
    }
}

fn git(project: &Path, args: &[&str]) -> Result<String, String> {
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
        Err(stderr
            .lines()
            .next()
            .unwrap_or("git failed")
            .trim()
            .to_owned())
    }
}

/// The base commit of the port and why it was chosen, or why there is none (not a repository).
pub fn base(project: &Path) -> Result<(String, String), String> {
    git(project, &["rev-parse", "--is-inside-work-tree"])
        .map_err(|e| format!("{} is not in a git repository ({e})", project.display()))?;
    let (base, why) = detect_base(project);
    // A port that began with the repository's first commit has the empty tree as its base, and
    // undoing a whole file deletes it: the working tree's changes are what can be undone.
    if base == EMPTY_TREE
        && let Ok(head) = git(project, &["rev-parse", "--verify", "--quiet", "HEAD"])
    {
        return Ok((
            head.trim().to_owned(),
            "HEAD: the port began with the repository's first commit, so the changes undone \
             are the working tree's (--reference-rev REV names another revision)"
                .to_owned(),
        ));
    }
    Ok((base, why))
}

/// The base for `--reference-rev REV`: the port's own changes are what separates the working tree
/// from the revision the reference ran, whatever the history says the port started from.
pub fn reference_base(project: &Path, rev: &str) -> Result<(String, String), String> {
    let spec = format!("{rev}^{{commit}}");
    let commit = git(project, &["rev-parse", "--verify", "--quiet", &spec])
        .map_err(|e| format!("{rev} is not a commit of {} ({e})", project.display()))?;
    Ok((
        commit.trim().to_owned(),
        format!("{rev}, the revision the reference ran (--reference-rev)"),
    ))
}

/// The hunks of `file` (relative to the project) in the working tree against `base`.
pub fn hunks(project: &Path, base: &str, file: &str) -> Result<Vec<Hunk>, String> {
    let text = git(
        project,
        &[
            "diff",
            "-U0",
            "--no-color",
            "--no-ext-diff",
            "--relative",
            base,
            "--",
            file,
        ],
    )?;
    Ok(parse(&text, file))
}

fn range(text: &str) -> Option<(u64, u64)> {
    let text = &text[1..];
    let mut parts = text.splitn(2, ',');
    let start = parts.next()?.parse().ok()?;
    let count = parts.next().map_or(Some(1), |c| c.parse().ok())?;
    Some((start, count))
}

/// Parse `git diff -U0` output into hunks (of `file`).
pub fn parse(text: &str, file: &str) -> Vec<Hunk> {
    let mut out: Vec<Hunk> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("@@ ") {
            let mut fields = rest.split_whitespace();
            let (Some(old), Some(new)) = (fields.next(), fields.next()) else {
                continue;
            };
            let (Some((old_start, _)), Some((new_start, new_count))) = (range(old), range(new))
            else {
                continue;
            };
            out.push(Hunk {
                file: file.to_owned(),
                old_start,
                old_lines: Vec::new(),
                new_start,
                new_count,
                new_lines: Vec::new(),
            });
            continue;
        }
        let Some(hunk) = out.last_mut() else {
            continue;
        };
        // The file header (`--- a/…`, `+++ b/…`) comes before the first `@@`: one file is diffed.
        if let Some(old) = line.strip_prefix('-') {
            hunk.old_lines.push(old.to_owned());
        } else if let Some(new) = line.strip_prefix('+') {
            hunk.new_lines.push(new.to_owned());
        }
    }
    out
}

/// `text` (the working tree's file) with `hunk` put back as the base had it.
pub fn revert(text: &str, hunk: &Hunk) -> String {
    let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_owned).collect();
    let old: Vec<String> = hunk.old_lines.iter().map(|l| format!("{l}\n")).collect();
    let start = usize::try_from(hunk.new_start).unwrap_or(usize::MAX);
    let count = usize::try_from(hunk.new_count).unwrap_or(0);
    if count == 0 {
        let at = start.min(lines.len());
        lines.splice(at..at, old);
    } else {
        let from = start.saturating_sub(1).min(lines.len());
        let to = (from + count).min(lines.len());
        lines.splice(from..to, old);
    }
    lines.concat()
}

/// Files bigger than this are linked, not copied, into a project copy (weights, data).
const COPY_LIMIT: u64 = 16 * 1024 * 1024;

/// A copy of `project` at `dest` to run with one file changed: the files git lists (tracked and
/// untracked, not ignored) copied, what `.gitignore` leaves out (data, checkpoints) and large
/// files linked; then `file` (relative) written with `text`. The user's tree is only read.
pub fn project_copy(
    project: &Path,
    dest: &Path,
    file: &str,
    text: &str,
) -> Result<PathBuf, String> {
    let listed = git(
        project,
        &[
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ],
    )?;
    let io = |what: &str, path: &Path, e: std::io::Error| format!("{what} {}: {e}", path.display());
    std::fs::create_dir_all(dest).map_err(|e| io("cannot create", dest, e))?;
    for rel in listed.split('\0').filter(|p| !p.is_empty()) {
        let from = project.join(rel);
        let to = dest.join(rel);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io("cannot create", parent, e))?;
        }
        let Ok(meta) = std::fs::symlink_metadata(&from) else {
            continue; // listed by git, deleted in the tree
        };
        if meta.file_type().is_symlink() {
            if let Ok(target) = std::fs::read_link(&from) {
                link(&target, &to).map_err(|e| io("cannot link", &to, e))?;
            }
        } else if meta.is_file() && meta.len() > COPY_LIMIT {
            link(&from, &to).map_err(|e| io("cannot link", &to, e))?;
        } else if meta.is_file() {
            std::fs::copy(&from, &to).map_err(|e| io("cannot copy", &from, e))?;
        }
    }
    link_ignored(project, dest)?;
    let target = dest.join(file);
    std::fs::write(&target, text).map_err(|e| io("cannot write", &target, e))?;
    Ok(dest.to_owned())
}

/// The project as it was at `rev`, extracted at `dest` (`git archive`: the repository's worktrees and
/// index are not touched), with what `.gitignore` leaves out in the working tree (data,
/// checkpoints) linked in; the full commit id.
pub fn checkout(project: &Path, rev: &str, dest: &Path) -> Result<String, String> {
    let spec = format!("{rev}^{{commit}}");
    let commit = git(project, &["rev-parse", "--verify", "--quiet", &spec])
        .map_err(|_| {
            format!(
                "`{rev}` is not a commit of the repository at {}",
                project.display()
            )
        })?
        .trim()
        .to_owned();
    std::fs::create_dir_all(dest).map_err(|e| format!("cannot create {}: {e}", dest.display()))?;
    let archive = dest.with_extension("tar");
    let archive_arg = archive.display().to_string();
    // Run in the project's folder, `git archive` takes that folder only, its paths relative to it.
    git(
        project,
        &["archive", "--format=tar", "-o", &archive_arg, &commit],
    )?;
    let out = Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(dest)
        .output()
        .map_err(|e| format!("cannot run tar: {e}"))?;
    let _ = std::fs::remove_file(&archive);
    if !out.status.success() {
        return Err(format!(
            "tar could not extract {rev}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    link_ignored(project, dest)?;
    Ok(commit)
}

/// Link what `.gitignore` leaves out of `project` (data, checkpoints) into `dest`.
fn link_ignored(project: &Path, dest: &Path) -> Result<(), String> {
    let ignored = git(
        project,
        &[
            "ls-files",
            "-z",
            "--others",
            "--ignored",
            "--exclude-standard",
            "--directory",
        ],
    )?;
    for rel in ignored.split('\0').filter(|p| !p.is_empty()) {
        let rel = rel.trim_end_matches('/');
        if rel.ends_with("__pycache__") {
            continue;
        }
        let to = dest.join(rel);
        if to.exists() {
            continue;
        }
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        link(&project.join(rel), &to).map_err(|e| format!("cannot link {}: {e}", to.display()))?;
    }
    Ok(())
}

#[cfg(unix)]
fn link(target: &Path, at: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, at)
}

#[cfg(not(unix))]
fn link(target: &Path, at: &Path) -> std::io::Result<()> {
    if target.is_dir() {
        std::os::windows::fs::symlink_dir(target, at)
    } else {
        std::fs::copy(target, at).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIFF: &str = "\
diff --git a/train.py b/train.py
index 1..2 100644
--- a/train.py
+++ b/train.py
@@ -3 +3 @@ import os
-a = 1
+a = 2
@@ -7,0 +8,2 @@ def f():
+    x = 1
+    y = 2
@@ -10,2 +11,0 @@ def g():
-    gone = 1
-    gone_too = 2
";

    #[test]
    fn hunks_parse_and_each_reverts_alone() {
        let hunks = parse(DIFF, "train.py");
        assert_eq!(hunks.len(), 3);
        assert_eq!(hunks[0].old_lines, ["a = 1"]);
        assert_eq!(hunks[0].new_lines, ["a = 2"]);
        assert_eq!(hunks[1].at(), "train.py:8-9");
        assert_eq!((hunks[2].new_start, hunks[2].new_count), (11, 0));
        let now = "l1\nl2\na = 2\nl4\nl5\nl6\nl7\n    x = 1\n    y = 2\nl10\nl11\n";
        assert_eq!(
            revert(now, &hunks[0]),
            "l1\nl2\na = 1\nl4\nl5\nl6\nl7\n    x = 1\n    y = 2\nl10\nl11\n"
        );
        assert_eq!(
            revert(now, &hunks[1]),
            "l1\nl2\na = 2\nl4\nl5\nl6\nl7\nl10\nl11\n"
        );
        assert_eq!(
            revert(now, &hunks[2]),
            "l1\nl2\na = 2\nl4\nl5\nl6\nl7\n    x = 1\n    y = 2\nl10\nl11\n    gone = 1\n    gone_too = 2\n"
        );
    }
}
