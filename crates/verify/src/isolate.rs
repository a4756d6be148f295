//! `--pipeline --data` in one call: the data run must find the project as the pipeline run found
//! it. The paths the pipeline run created under the project root (an output folder, a checkpoint,
//! a log) are moved aside into `migrate_to_cloudrobo/logs/verify_<stamp>_pipeline_outputs/`
//! before the data run starts, so a program that refuses to overwrite its outputs, or resumes
//! from a checkpoint it finds, behaves the same in both runs. They are kept there, not deleted.
//!
//! What this does not cover: files the pipeline run changed that existed before it (those stay
//! changed), and outputs written outside the project root (an absolute path in the config, the
//! home directory); give such a program an output location per run, or run `--pipeline` and
//! `--data` in two calls after cleaning up.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The most paths a snapshot lists; a larger project is not snapshotted (nothing is moved).
pub const MAX_ENTRIES: usize = 200_000;

/// Folders never listed: version control, verify's own folder, bytecode caches.
const SKIPPED: &[&str] = &[
    ".git",
    ".hg",
    ".svn",
    crate::statics::MIGRATE_DIR,
    "__pycache__",
];

/// The paths under `root` (relative), or `None` when there are more than [`MAX_ENTRIES`].
/// Symbolic links are listed but not followed.
pub fn snapshot(root: &Path) -> Option<BTreeSet<PathBuf>> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&rel)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if SKIPPED.iter().any(|s| name == *s) {
                continue;
            }
            let path = rel.join(&name);
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path.clone());
            }
            seen.insert(path);
            if seen.len() > MAX_ENTRIES {
                return None;
            }
        }
    }
    Some(seen)
}

/// The paths in `after` that are not in `before`, top-most only (a new folder, not its files).
pub fn created(before: &BTreeSet<PathBuf>, after: &BTreeSet<PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for path in after.difference(before) {
        // Sorted order puts a folder before its contents.
        if out.last().is_some_and(|top| path.starts_with(top)) {
            continue;
        }
        out.push(path.clone());
    }
    out
}

/// Move `paths` (relative to `root`) into `<root>/migrate_to_cloudrobo/logs/<folder>/`, keeping
/// their relative places. Returns the folder (relative to `root`) and the paths moved; a path
/// that cannot be moved is an error naming it.
pub fn set_aside(root: &Path, paths: &[PathBuf], folder: &str) -> Result<String, String> {
    let rel_dir = Path::new(crate::statics::MIGRATE_DIR)
        .join("logs")
        .join(folder);
    let dir = root.join(&rel_dir);
    for path in paths {
        let to = dir.join(path);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::rename(root.join(path), &to).map_err(|e| {
            format!(
                "cannot move {} to {}: {e}",
                root.join(path).display(),
                to.display()
            )
        })?;
    }
    Ok(rel_dir.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_new_top_most_paths_are_moved_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("data")).unwrap();
        std::fs::write(root.join("data/a.h5"), "a").unwrap();
        std::fs::create_dir_all(root.join("migrate_to_cloudrobo")).unwrap();
        let before = snapshot(root).unwrap();

        std::fs::create_dir_all(root.join("outputs/run1/ckpt")).unwrap();
        std::fs::write(root.join("outputs/run1/ckpt/model.pt"), "w").unwrap();
        std::fs::write(root.join("data/cache.npz"), "c").unwrap();
        std::fs::write(root.join("migrate_to_cloudrobo/verify-report.json"), "{}").unwrap();
        let after = snapshot(root).unwrap();
        let new = created(&before, &after);
        assert_eq!(
            new,
            [PathBuf::from("data/cache.npz"), PathBuf::from("outputs")]
        );

        let kept = set_aside(root, &new, "verify_x_pipeline_outputs").unwrap();
        assert_eq!(kept, "migrate_to_cloudrobo/logs/verify_x_pipeline_outputs");
        assert!(!root.join("outputs").exists());
        assert!(root.join("data/a.h5").exists());
        assert!(!root.join("data/cache.npz").exists());
        assert!(
            root.join(&kept)
                .join("outputs/run1/ckpt/model.pt")
                .is_file()
        );
        assert!(root.join(&kept).join("data/cache.npz").is_file());
        assert_eq!(snapshot(root).unwrap(), before);
    }
}
