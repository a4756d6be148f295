//! Finding the files to scan with the `ignore` crate's parallel walker.
//!
//! `.gitignore` is honoured (also outside a git checkout), hidden entries are skipped, and so
//! are directories that never hold the project's own code: `.git`, virtual environments,
//! `site-packages`, `node_modules`, `build`, `dist`, `__pycache__`, `*.egg-info` and our own
//! `migrate_to_cloudrobo/`. Walk errors (symlink loops, unreadable directories) become
//! warnings. The result is sorted, so the output does not depend on the thread count.

use globset::{Glob, GlobSet, GlobSetBuilder};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// What kind of file an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FileKind {
    Python,
    /// YAML, JSON or TOML.
    Config,
    /// `.cu` / `.cuh`.
    CudaSource,
}

/// A file to scan.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FileEntry {
    /// Relative to the root, `/`-separated.
    pub rel: String,
    pub path: PathBuf,
    pub kind: FileKind,
}

/// Directory names never descended into.
pub const SKIPPED_DIRS: &[&str] = &[
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    ".eggs",
    ".mypy_cache",
    ".pytest_cache",
    "site-packages",
    "node_modules",
    "build",
    "dist",
    "__pycache__",
    "migrate_to_cloudrobo",
];

/// Compile `--exclude` patterns. A pattern matches a file or directory by its relative path
/// or by its name.
pub fn exclude_set(patterns: &[String]) -> Result<GlobSet, globset::Error> {
    let mut builder = GlobSetBuilder::new();
    for p in patterns {
        builder.add(Glob::new(p.trim_end_matches('/'))?);
    }
    builder.build()
}

/// Whether the walk skips the relative `/` path `rel` for `excludes`: the path, a directory
/// above it, or the name of one of them matches.
pub fn is_excluded(excludes: &GlobSet, rel: &str) -> bool {
    if excludes.is_empty() {
        return false;
    }
    let mut end = 0;
    rel.split('/').any(|part| {
        end += part.len();
        let prefix = &rel[..end];
        end += 1;
        excludes.is_match(prefix) || excludes.is_match(part)
    })
}

fn kind_of(name: &str) -> Option<FileKind> {
    // Our own output, when it is written into the scanned tree (`--output .` at the root).
    if name == "issues.json" {
        return None;
    }
    let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
    match ext.as_str() {
        "py" => Some(FileKind::Python),
        "yaml" | "yml" | "json" | "toml" => Some(FileKind::Config),
        "cu" | "cuh" => Some(FileKind::CudaSource),
        _ => None,
    }
}

/// The entry of the file at `rel` (a relative `/` path) under `root`, whether or not a walk
/// would reach it; `None` when `rel` is not a plain relative path (empty, absolute, with `.`
/// or `..` parts) or not a kind of file the scanner reads.
pub fn entry(root: &Path, rel: &str) -> Option<FileEntry> {
    let rel = rel.trim_start_matches("./");
    if rel
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == ".." || part.contains('\\'))
    {
        return None;
    }
    let kind = kind_of(rel.rsplit('/').next().unwrap_or(rel))?;
    let path = rel
        .split('/')
        .fold(root.to_path_buf(), |path, part| path.join(part));
    Some(FileEntry {
        rel: rel.to_owned(),
        path,
        kind,
    })
}

/// The relative `/` path of `path` under `root` (the file name when `root` is the file).
pub fn relative(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    let rel = if rel.as_os_str().is_empty() {
        Path::new(path.file_name().unwrap_or(path.as_os_str()))
    } else {
        rel
    };
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// Walk `root` with `threads` threads; returns the sorted files and the walk warnings.
pub fn collect(root: &Path, excludes: &GlobSet, threads: usize) -> (Vec<FileEntry>, Vec<String>) {
    let files = Mutex::new(Vec::new());
    let warnings = Mutex::new(Vec::new());
    let root_owned = root.to_path_buf();
    let excludes_filter = excludes.clone();
    let walker = ignore::WalkBuilder::new(root)
        .threads(threads.max(1))
        .follow_links(true)
        .require_git(false)
        .hidden(true)
        .filter_entry(move |entry| {
            if entry.depth() == 0 {
                return true;
            }
            let name = entry.file_name().to_string_lossy();
            let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
            if is_dir
                && (SKIPPED_DIRS.contains(&name.as_ref())
                    || name.ends_with(".egg-info")
                    || entry.path().join("pyvenv.cfg").exists())
            {
                return false;
            }
            if !excludes_filter.is_empty() {
                let rel = relative(&root_owned, entry.path());
                if excludes_filter.is_match(&rel) || excludes_filter.is_match(name.as_ref()) {
                    return false;
                }
            }
            true
        })
        .build_parallel();
    walker.run(|| {
        let files = &files;
        let warnings = &warnings;
        Box::new(move |result| {
            match result {
                Ok(entry) => {
                    if entry.file_type().is_some_and(|t| t.is_file()) {
                        let name = entry.file_name().to_string_lossy();
                        if let Some(kind) = kind_of(&name) {
                            let rel = relative(root, entry.path());
                            if let Ok(mut f) = files.lock() {
                                f.push(FileEntry {
                                    rel,
                                    path: entry.into_path(),
                                    kind,
                                });
                            }
                        }
                    }
                }
                Err(err) => {
                    if let Ok(mut w) = warnings.lock() {
                        w.push(walk_error_message(root, &err));
                    }
                }
            }
            ignore::WalkState::Continue
        })
    });
    let mut files = files.into_inner().unwrap_or_default();
    files.sort();
    files.dedup_by(|a, b| a.rel == b.rel);
    let mut warnings = warnings.into_inner().unwrap_or_default();
    warnings.sort();
    (files, warnings)
}

fn walk_error_message(root: &Path, err: &ignore::Error) -> String {
    // Make paths in the message relative, so the output is the same wherever the tree lives.
    let text = err.to_string();
    let root_text = root.to_string_lossy();
    let text = text.replace(&format!("{root_text}/"), "");
    format!("skipped: {text}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_excluded_matches_the_path_a_directory_above_or_a_name() {
        let set = exclude_set(&["third_party".to_owned(), "policies/b/**".to_owned()]).unwrap();
        assert!(is_excluded(&set, "third_party/x.py"));
        assert!(is_excluded(&set, "src/third_party/y.py"));
        assert!(is_excluded(&set, "policies/b/model.py"));
        assert!(!is_excluded(&set, "policies/a/model.py"));
        assert!(!is_excluded(&exclude_set(&[]).unwrap(), "a.py"));
    }

    #[test]
    fn skips_vendored_dirs_and_excludes_and_sorts() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for f in [
            "b.py",
            "a/x.py",
            "a/conf.yaml",
            "kernels/attn.cu",
            "build/gen.py",
            "venv2/lib/x.py",
            "node_modules/y.py",
            "migrate_to_cloudrobo/runtime_patches.py",
            "third_party/z.py",
            "README.md",
            "issues.json",
        ] {
            let p = root.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, "x = 1\n").unwrap();
        }
        std::fs::write(root.join("venv2/pyvenv.cfg"), "home = /usr\n").unwrap();
        let excludes = exclude_set(&["third_party".to_owned()]).unwrap();
        for threads in [1, 2] {
            let (files, warnings) = collect(root, &excludes, threads);
            let rels: Vec<&str> = files.iter().map(|f| f.rel.as_str()).collect();
            assert_eq!(rels, ["a/conf.yaml", "a/x.py", "b.py", "kernels/attn.cu"]);
            assert!(warnings.is_empty());
        }
    }

    #[cfg(unix)]
    #[test]
    fn symlink_loop_is_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("pkg")).unwrap();
        std::fs::write(root.join("pkg/m.py"), "x = 1\n").unwrap();
        std::os::unix::fs::symlink(root.join("pkg"), root.join("pkg/loop")).unwrap();
        let (files, warnings) = collect(root, &exclude_set(&[]).unwrap(), 2);
        assert_eq!(files.len(), 1);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("loop"), "{warnings:?}");
    }
}
