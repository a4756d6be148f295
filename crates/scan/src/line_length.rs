//! The project's configured line length, which code the fixes insert stays within.
//!
//! Read, first found wins, from the scanned root and the folders above it up to the first that
//! holds `.git`: ruff (`line-length` in `ruff.toml`, `.ruff.toml`, or `[tool.ruff]` of
//! `pyproject.toml`), then black (`[tool.black]` `line-length`), then flake8/pycodestyle
//! (`max-line-length` in `[flake8]`/`[pycodestyle]` of `setup.cfg`, `tox.ini` or `.flake8`).
//! Without any, ruff's and black's default, [`DEFAULT`]. Only these one-line `key = number`
//! settings are read, so a line scanner is enough (no TOML or INI parser is needed).

use std::path::Path;

/// ruff's and black's default.
pub const DEFAULT: usize = 88;

/// The line length configured for the project at `root` (a folder, or a file in it).
pub fn of_project(root: &Path) -> usize {
    let start = if root.is_file() {
        root.parent().unwrap_or(Path::new("."))
    } else {
        root
    };
    let start = start.canonicalize().unwrap_or_else(|_| start.to_owned());
    for dir in start.ancestors() {
        if let Some(n) = in_folder(dir) {
            return n;
        }
        if dir.join(".git").exists() {
            break;
        }
    }
    DEFAULT
}

/// The line length configured by the files of one folder, if any.
fn in_folder(dir: &Path) -> Option<usize> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    let pyproject = read("pyproject.toml");
    let ini = |name: &str| {
        read(name).and_then(|t| {
            setting(
                &t,
                &["flake8", "pycodestyle"],
                &["max-line-length", "max_line_length"],
            )
        })
    };
    [".ruff.toml", "ruff.toml"]
        .iter()
        .find_map(|f| read(f).and_then(|t| setting(&t, &[""], &["line-length"])))
        .or_else(|| {
            pyproject
                .as_deref()
                .and_then(|t| setting(t, &["tool.ruff"], &["line-length"]))
        })
        .or_else(|| {
            pyproject
                .as_deref()
                .and_then(|t| setting(t, &["tool.black"], &["line-length", "line_length"]))
        })
        .or_else(|| ini("setup.cfg"))
        .or_else(|| ini("tox.ini"))
        .or_else(|| ini(".flake8"))
}

/// The number `key = N` sets in one of `sections` (`""`: before any section header) of an
/// INI/TOML text.
fn setting(text: &str, sections: &[&str], keys: &[&str]) -> Option<usize> {
    let mut section = String::new();
    for raw in text.lines() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            name.trim().trim_matches('"').clone_into(&mut section);
            continue;
        }
        if !sections.contains(&section.as_str()) {
            continue;
        }
        let Some((key, value)) = line.split_once(['=', ':']) else {
            continue;
        };
        if keys.contains(&key.trim())
            && let Ok(n) = value.trim().parse::<usize>()
        {
            return (n >= 40).then_some(n);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".git")).unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn ruff_then_black_then_flake8_then_the_default() {
        let ruff = folder(&[
            (
                "pyproject.toml",
                "[tool.black]\nline-length = 100\n\n[tool.ruff]\nline-length = 79  # pep8\n",
            ),
            ("setup.cfg", "[flake8]\nmax-line-length = 120\n"),
        ]);
        assert_eq!(of_project(ruff.path()), 79);
        let black = folder(&[("pyproject.toml", "[tool.black]\nline-length = 100\n")]);
        assert_eq!(of_project(black.path()), 100);
        let flake8 = folder(&[
            ("pyproject.toml", "[project]\nname = \"x\"\n"),
            (
                "setup.cfg",
                "[metadata]\nname = x\n\n[flake8]\nmax-line-length = 120\n",
            ),
        ]);
        assert_eq!(of_project(flake8.path()), 120);
        let dot_flake8 = folder(&[(".flake8", "[flake8]\nmax_line_length: 99\n")]);
        assert_eq!(of_project(dot_flake8.path()), 99);
        let ruff_toml = folder(&[("ruff.toml", "line-length = 110\n[lint]\nselect = [\"E\"]\n")]);
        assert_eq!(of_project(ruff_toml.path()), 110);
        let none = folder(&[("pyproject.toml", "[tool.ruff.lint]\nline-length = 70\n")]);
        assert_eq!(of_project(none.path()), DEFAULT);
    }

    #[test]
    fn a_subfolder_reads_the_settings_of_the_project_above_it() {
        let dir = folder(&[("pyproject.toml", "[tool.ruff]\nline-length = 100\n")]);
        let sub = dir.path().join("src");
        std::fs::create_dir(&sub).unwrap();
        assert_eq!(of_project(&sub), 100);
    }
}
