//! Listing, naming and reading assets, from the embedded tree or from a directory laid out
//! like `assets/`.

use crate::error::{Error, Result};
use std::borrow::Cow;
use std::fs;
use std::path::{Path, PathBuf};

/// Where asset bytes come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// The copy compiled into this binary.
    Embedded,
    /// A directory laid out like `assets/` (a checkout, or an extracted copy).
    Dir(PathBuf),
}

impl Source {
    /// The bytes of the asset at `path` (`/`-separated, relative to `assets/`), or `None`.
    pub fn read(&self, path: &str) -> Result<Option<Cow<'static, [u8]>>> {
        match self {
            Source::Embedded => Ok(crate::get(path).map(Cow::Borrowed)),
            Source::Dir(root) => {
                let file = root.join(path);
                match fs::read(&file) {
                    Ok(bytes) => Ok(Some(Cow::Owned(bytes))),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(source) => Err(Error::Read { path: file, source }),
                }
            }
        }
    }

    /// Every asset path, sorted. Placeholder `.keep` files are not assets.
    pub fn list(&self) -> Result<Vec<String>> {
        let mut paths = match self {
            Source::Embedded => embedded_files(),
            Source::Dir(root) => dir_files(root, root)?,
        };
        paths.retain(|p| !is_placeholder(p));
        paths.sort();
        Ok(paths)
    }
}

/// Every file path in the embedded tree, including placeholders, unsorted.
pub fn embedded_files() -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![&crate::ASSETS];
    while let Some(dir) = stack.pop() {
        for entry in dir.entries() {
            match entry {
                include_dir::DirEntry::Dir(d) => stack.push(d),
                include_dir::DirEntry::File(f) => out.push(slash_path(f.path())),
            }
        }
    }
    out
}

fn dir_files(root: &Path, dir: &Path) -> Result<Vec<String>> {
    let read_err = |source| Error::Read {
        path: dir.to_owned(),
        source,
    };
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(read_err)? {
        let entry = entry.map_err(read_err)?;
        let path = entry.path();
        if entry.file_type().map_err(read_err)?.is_dir() {
            out.extend(dir_files(root, &path)?);
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(slash_path(rel));
        }
    }
    Ok(out)
}

fn slash_path(path: &Path) -> String {
    path.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

fn is_placeholder(path: &str) -> bool {
    path == ".keep" || path.ends_with("/.keep")
}

/// Resolve a name typed by the user: an exact asset path, or a file name (`train.sh`,
/// `P_RND.md`) that matches exactly one asset.
pub fn resolve(source: &Source, name: &str) -> Result<String> {
    let all = source.list()?;
    let name = name.trim_start_matches("./").trim_start_matches("assets/");
    if all.iter().any(|p| p == name) {
        return Ok(name.to_owned());
    }
    let by_file_name: Vec<&String> = all
        .iter()
        .filter(|p| p.rsplit('/').next() == Some(name))
        .collect();
    if let [only] = by_file_name.as_slice() {
        return Ok((*only).clone());
    }
    let candidates: Vec<&String> = if by_file_name.is_empty() {
        all.iter().filter(|p| p.contains(name)).take(5).collect()
    } else {
        by_file_name
    };
    let hint = if candidates.is_empty() {
        String::new()
    } else {
        let names: Vec<&str> = candidates.iter().map(|s| s.as_str()).collect();
        format!(" (did you mean: {}?)", names.join(", "))
    };
    Err(Error::UnknownAsset {
        name: name.to_owned(),
        hint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> (tempfile::TempDir, Source) {
        let dir = tempfile::tempdir().unwrap();
        for p in [
            "templates/train.sh",
            "templates/env_npu.sh",
            "fix-templates/P_RND.md",
            "demo/train.sh",
            "demo/.keep",
        ] {
            let f = dir.path().join(p);
            fs::create_dir_all(f.parent().unwrap()).unwrap();
            fs::write(f, p).unwrap();
        }
        let source = Source::Dir(dir.path().to_owned());
        (dir, source)
    }

    #[test]
    fn list_is_sorted_and_skips_placeholders() {
        let (_dir, source) = fixture();
        assert_eq!(
            source.list().unwrap(),
            [
                "demo/train.sh",
                "fix-templates/P_RND.md",
                "templates/env_npu.sh",
                "templates/train.sh"
            ]
        );
    }

    #[test]
    fn resolve_exact_unique_and_ambiguous() {
        let (_dir, source) = fixture();
        assert_eq!(
            resolve(&source, "templates/train.sh").unwrap(),
            "templates/train.sh"
        );
        assert_eq!(
            resolve(&source, "P_RND.md").unwrap(),
            "fix-templates/P_RND.md"
        );
        assert_eq!(
            resolve(&source, "assets/templates/env_npu.sh").unwrap(),
            "templates/env_npu.sh"
        );
        let err = resolve(&source, "train.sh").unwrap_err().to_string();
        assert!(err.contains("demo/train.sh, templates/train.sh"), "{err}");
        let err = resolve(&source, "nothing.txt").unwrap_err().to_string();
        assert!(err.contains("npu-assets list"), "{err}");
    }

    #[test]
    fn dir_source_reads_bytes_or_none() {
        let (_dir, source) = fixture();
        assert_eq!(
            source.read("templates/train.sh").unwrap().unwrap().as_ref(),
            b"templates/train.sh"
        );
        assert!(source.read("templates/missing").unwrap().is_none());
    }
}
