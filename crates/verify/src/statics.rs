//! Checks that need no Python: the `migrate_to_cloudrobo/` folder, the copy of
//! `runtime_patches.py` against the shipped one, the entry point applying the patcher (from
//! scan's facts), and `issues.json` having nothing pending.

use crate::report::Check;
use scan::blocks::top_level_blocks;
use std::path::{Path, PathBuf};

pub const MIGRATE_DIR: &str = "migrate_to_cloudrobo";
pub const MIGRATE_FILES: [&str; 3] = ["env_npu.sh", "train.sh", "runtime_patches.py"];

const INIT_REMEDY: &str = "create it with `npu-assets init PROJECT` (or copy templates/env_npu.sh, \
templates/train.sh and scripts/runtime_patches.py from the skill bundle into PROJECT/migrate_to_cloudrobo/)";

/// `migrate_to_cloudrobo/` holds the three files.
pub fn migrate_dir(root: &Path) -> Check {
    let dir = root.join(MIGRATE_DIR);
    let missing: Vec<&str> = MIGRATE_FILES
        .iter()
        .copied()
        .filter(|f| !dir.join(f).is_file())
        .collect();
    if missing.is_empty() {
        Check::pass(
            "static.migrate_dir",
            format!("{MIGRATE_DIR}/ holds {}", MIGRATE_FILES.join(", ")),
        )
    } else if !dir.is_dir() {
        Check::fail(
            "static.migrate_dir",
            format!("{} does not exist", dir.display()),
            INIT_REMEDY,
        )
    } else {
        Check::fail(
            "static.migrate_dir",
            format!("{MIGRATE_DIR}/ lacks {}", missing.join(", ")),
            INIT_REMEDY,
        )
    }
}

/// How a copy of `runtime_patches.py` differs from the shipped one.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PatchDiff {
    pub changed: Vec<String>,
    pub missing: Vec<String>,
    pub added: Vec<String>,
    /// The copy defines `build_vla_patcher` or `build_npu_patcher`.
    pub has_builder: bool,
}

/// Compare the top-level blocks ([`scan::blocks::top_level_blocks`]) of two versions of
/// `runtime_patches.py`; `Err` says why the copy (or the shipped file) does not parse.
pub fn diff_patches(shipped: &str, copy: &str) -> Result<PatchDiff, String> {
    let a = top_level_blocks(shipped).map_err(|e| format!("the shipped version, {e}"))?;
    let b = top_level_blocks(copy)?;
    let mut diff = PatchDiff::default();
    for (name, body) in &a {
        match b.get(name) {
            None => diff.missing.push(name.clone()),
            Some(other) if other != body => diff.changed.push(name.clone()),
            Some(_) => {}
        }
    }
    diff.added = b.keys().filter(|k| !a.contains_key(*k)).cloned().collect();
    diff.has_builder = ["build_vla_patcher", "build_npu_patcher"]
        .iter()
        .any(|name| b.contains_key(*name));
    Ok(diff)
}

/// The project's `runtime_patches.py` equals the shipped one, or which patches differ.
pub fn runtime_patches(root: &Path, shipped: Option<&[u8]>) -> Check {
    const NAME: &str = "static.runtime_patches";
    let path = root.join(MIGRATE_DIR).join("runtime_patches.py");
    let Ok(copy) = std::fs::read(&path) else {
        return Check::fail(NAME, format!("{} is missing", path.display()), INIT_REMEDY);
    };
    let Some(shipped) = shipped else {
        return Check::warn(
            NAME,
            "this npu-verify build carries no runtime_patches.py to compare with",
            "use a release build of npu-verify",
        );
    };
    if copy == shipped {
        return Check::pass(NAME, "runtime_patches.py is the shipped version");
    }
    let copy = String::from_utf8_lossy(&copy);
    let shipped = String::from_utf8_lossy(shipped);
    let diff = match diff_patches(&shipped, &copy) {
        Ok(diff) => diff,
        Err(why) => {
            return Check::fail(
                NAME,
                format!("runtime_patches.py does not parse: {why}"),
                "restore the shipped runtime_patches.py: `npu-assets init PROJECT --force`",
            );
        }
    };
    let has_builder = diff.has_builder;
    let mut parts = Vec::new();
    if !diff.changed.is_empty() {
        parts.push(format!("changed: {}", diff.changed.join(", ")));
    }
    if !diff.missing.is_empty() {
        parts.push(format!("missing: {}", diff.missing.join(", ")));
    }
    if !diff.added.is_empty() {
        parts.push(format!("added: {}", diff.added.join(", ")));
    }
    if parts.is_empty() {
        parts.push("only whitespace or comments differ".to_owned());
    }
    let detail = format!(
        "runtime_patches.py differs from the shipped version ({})",
        parts.join("; ")
    );
    let data =
        serde_json::json!({"changed": diff.changed, "missing": diff.missing, "added": diff.added});
    if has_builder {
        Check::warn(
            NAME,
            detail,
            "compare with `npu-assets show runtime_patches.py | diff - migrate_to_cloudrobo/runtime_patches.py`; \
             `npu-assets init PROJECT` updates an untouched older copy, `--force` replaces an edited one; keep \
             edits only on purpose and note them in ADAPTATION_SUMMARY.md",
        )
        .with_data(data)
    } else {
        Check::fail(
            NAME,
            format!("{detail}; it defines neither build_vla_patcher nor build_npu_patcher"),
            "restore the shipped runtime_patches.py: `npu-assets init PROJECT --force`",
        )
        .with_data(data)
    }
}

/// An entry point applies the runtime patcher (where the builder is called and whether the
/// result is applied come from scan's facts, [`scan::PatcherCall`]).
pub fn entry_patcher(project: &scan::Project, entry: Option<&str>) -> Check {
    const NAME: &str = "static.entry_patcher";
    let (calls, unapplied): (Vec<_>, Vec<_>) = project
        .patcher_calls()
        .into_iter()
        .partition(|(_, call)| call.applied);
    let at = |calls: Vec<(&str, &scan::PatcherCall)>| -> Vec<(String, u32)> {
        calls
            .into_iter()
            .map(|(file, call)| (file.to_owned(), call.site.line))
            .collect()
    };
    let (calls, unapplied) = (at(calls), at(unapplied));
    let where_ = |calls: &[(String, u32)]| {
        calls
            .iter()
            .map(|(f, l)| format!("{f}:{l}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let remedy = format!(
        "apply it first thing in the training entry{}: `from runtime_patches import build_vla_patcher` then \
         `build_vla_patcher().apply()` (train.sh puts migrate_to_cloudrobo/ on PYTHONPATH; P_ENT fix template)",
        entry.map(|e| format!(" ({e})")).unwrap_or_default()
    );
    if calls.is_empty() && !unapplied.is_empty() {
        return Check::fail(
            NAME,
            format!(
                "a patcher is built but never applied ({}): no `.apply()` and no `with`",
                where_(&unapplied)
            ),
            remedy,
        );
    }
    if calls.is_empty() {
        return Check::fail(
            NAME,
            "no project file calls build_vla_patcher() or build_npu_patcher()",
            remedy,
        );
    }
    match entry {
        Some(e) if calls.iter().any(|(f, _)| f == e) => Check::pass(
            NAME,
            format!("the entry point applies the patcher ({})", where_(&calls)),
        ),
        Some(e) => Check::warn(
            NAME,
            format!(
                "the patcher is built in {}, not in the training entry {e}",
                where_(&calls)
            ),
            format!("make sure {e} imports that code before any model code runs, or {remedy}"),
        ),
        None => Check::pass(
            NAME,
            format!("the patcher is applied at {}", where_(&calls)),
        ),
    }
}

/// Where to read `issues.json`: `--issues`, else `./issues.json`, else `PROJECT/issues.json`.
pub fn find_issues(given: Option<&Path>, root: &Path) -> Result<PathBuf, Vec<PathBuf>> {
    if let Some(path) = given {
        return if path.is_file() {
            Ok(path.to_owned())
        } else {
            Err(vec![path.to_owned()])
        };
    }
    let candidates = vec![PathBuf::from("issues.json"), root.join("issues.json")];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or(candidates)
}

/// `issues.json` has no pending issue.
pub fn issues(given: Option<&Path>, root: &Path) -> Check {
    const NAME: &str = "static.issues";
    let path = match find_issues(given, root) {
        Ok(path) => path,
        Err(looked) => {
            let looked: Vec<String> = looked.iter().map(|p| p.display().to_string()).collect();
            let detail = format!("no issues.json (looked at {})", looked.join(", "));
            return if given.is_some() {
                Check::fail(NAME, detail, "give the path npu-scan wrote (--issues PATH)")
            } else {
                Check::warn(
                    NAME,
                    detail,
                    "scan first: `npu-scan PROJECT --output .`, then fix every issue (`npu-progress issues.json --next`)",
                )
            };
        }
    };
    let file = match issue_model::load(&path) {
        Ok(file) => file,
        Err(e) => {
            return Check::fail(
                NAME,
                e.to_string(),
                "rescan to rewrite it: `npu-scan PROJECT --output .`",
            );
        }
    };
    let pending: Vec<&issue_model::Issue> = file
        .issues
        .iter()
        .filter(|i| i.status == issue_model::Status::Pending)
        .collect();
    let total = file.issues.len();
    if pending.is_empty() {
        Check::pass(
            NAME,
            format!("{}: {total} issues, none pending", path.display()),
        )
    } else {
        let first: Vec<String> = pending
            .iter()
            .take(5)
            .map(|i| format!("{} {} {}:{}", i.id, i.pattern, i.file, i.line))
            .collect();
        Check::fail(
            NAME,
            format!(
                "{}: {} of {total} issues pending (e.g. {})",
                path.display(),
                pending.len(),
                first.join("; ")
            ),
            format!(
                "fix them one by one: `npu-progress {} --next`, then `--check-complete`",
                path.display()
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHIPPED: &str = "\"\"\"doc\"\"\"\nimport torch\n\nclass A:\n    x = 1\n\n    def f(self):\n        return 1\n\n\n@dataclass\nclass B:\n    y = 2\n\ndef build_vla_patcher():\n    return [A(), B()]\n";

    #[test]
    fn identical_text_has_no_difference() {
        assert_eq!(
            diff_patches(SHIPPED, SHIPPED).unwrap().changed,
            Vec::<String>::new()
        );
        assert_eq!(
            diff_patches(SHIPPED, SHIPPED).unwrap().added,
            Vec::<String>::new()
        );
        let trailing = SHIPPED.replace("x = 1", "x = 1   ") + "\n\n";
        let diff = diff_patches(SHIPPED, &trailing).unwrap();
        assert!(diff.changed.is_empty() && diff.missing.is_empty() && diff.added.is_empty());
    }

    #[test]
    fn names_changed_missing_and_added_blocks() {
        let copy = SHIPPED
            .replace("return 1", "return 2")
            .replace("@dataclass\nclass B:\n    y = 2\n", "")
            + "\nclass C:\n    pass\n";
        let diff = diff_patches(SHIPPED, &copy).unwrap();
        assert_eq!(diff.changed, vec!["A"]);
        assert_eq!(diff.missing, vec!["B"]);
        assert_eq!(diff.added, vec!["C"]);
    }

    #[test]
    fn decorator_changes_count_for_their_block() {
        let copy = SHIPPED.replace("@dataclass", "@dataclass(frozen=True)");
        assert_eq!(diff_patches(SHIPPED, &copy).unwrap().changed, vec!["B"]);
    }

    #[test]
    fn module_code_changes_are_reported() {
        let copy = SHIPPED.replace("import torch", "import torch, os");
        assert_eq!(
            diff_patches(SHIPPED, &copy).unwrap().changed,
            vec!["<module code>"]
        );
    }
}
