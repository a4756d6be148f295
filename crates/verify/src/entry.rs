//! Which program `--pipeline` / `--data` run, and with which config.
//!
//! The entry comes from `-- <launch command>`, `--entry FILE`, or the project's entry points
//! (files with `if __name__ == "__main__":` or `@hydra.main`), the training one ranked first.
//! Without `--config`, the config is looked for where the entry and the launch scripts point:
//! the argparse default of the config flag, `--config X` in shell scripts that run the entry,
//! then the usual config folders.

use regex::Regex;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// Folders never searched: environments, caches, build output, our own folder.
const SKIP_DIRS: &[&str] = &[
    "migrate_to_cloudrobo",
    "node_modules",
    "__pycache__",
    "site-packages",
    "build",
    "dist",
    "outputs",
    "wandb",
];

/// A Python file that starts a program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Relative to the project root, `/`-separated.
    pub file: String,
    pub hydra: bool,
    pub uses_torch: bool,
    /// The argparse flag that takes the config (`--config`, `--cfg`, `--config-file`…).
    pub config_flag: Option<String>,
    /// Its `default=` value, when it has one.
    pub config_default: Option<String>,
    pub config_required: bool,
}

static MAIN_GUARD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"(?m)^if\s+__name__\s*==\s*['"]__main__['"]\s*:"#).unwrap());
static HYDRA_MAIN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^\s*@\s*hydra\.main\s*\(").unwrap());
static CONFIG_ARG: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"add_argument\(\s*(?:['"]-\w['"]\s*,\s*)?['"](--(?:config|cfg|config[-_]file|config[-_]path))['"]([^)]*)\)"#)
        .unwrap()
});
static DEFAULT_KW: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"default\s*=\s*['"]([^'"]+)['"]"#).unwrap());
static REQUIRED_KW: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"required\s*=\s*True").unwrap());

/// Read one Python file's entry-point facts; `None` when it is not an entry point.
pub fn inspect(root: &Path, rel: &str) -> Option<Entry> {
    let text = std::fs::read_to_string(root.join(rel)).ok()?;
    let hydra = HYDRA_MAIN.is_match(&text);
    if !hydra && !MAIN_GUARD.is_match(&text) {
        return None;
    }
    let uses_torch = text.contains("import torch")
        || text.contains("from torch")
        || project_imports_torch(root, &text);
    let (config_flag, config_default, config_required) = match CONFIG_ARG.captures(&text) {
        Some(c) => {
            let rest = c.get(2).map_or("", |m| m.as_str());
            (
                Some(c[1].to_owned()),
                DEFAULT_KW.captures(rest).map(|d| d[1].to_owned()),
                REQUIRED_KW.is_match(rest),
            )
        }
        None => (None, None, false),
    };
    Some(Entry {
        file: rel.to_owned(),
        hydra,
        uses_torch,
        config_flag,
        config_default,
        config_required,
    })
}

/// A script that imports a project package which imports torch (one level deep is enough to rank).
fn project_imports_torch(root: &Path, text: &str) -> bool {
    static FROM: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?m)^\s*(?:from|import)\s+([A-Za-z_]\w*)").unwrap());
    FROM.captures_iter(text).any(|c| {
        let pkg = root.join(&c[1]);
        pkg.is_dir()
            && std::fs::read_dir(&pkg).is_ok_and(|rd| {
                rd.flatten().any(|f| {
                    f.path().extension().is_some_and(|e| e == "py")
                        && std::fs::read_to_string(f.path())
                            .is_ok_and(|t| t.contains("import torch") || t.contains("from torch"))
                })
            })
    })
}

pub(crate) fn has_extension(path: &Path, ext: &str) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case(ext))
}

/// Every `.py` file under `root` (relative, sorted), skipping hidden folders and environments.
pub fn python_files(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    walk(root, root, 0, &mut out);
    out.sort();
    out
}

fn walk(root: &Path, dir: &Path, depth: usize, out: &mut Vec<String>) {
    if depth > 12 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() {
            if name.starts_with('.')
                || SKIP_DIRS.contains(&name.as_ref())
                || path.join("pyvenv.cfg").exists()
            {
                continue;
            }
            walk(root, &path, depth + 1, out);
        } else if let (true, Ok(rel)) = (
            kind.is_file() && has_extension(&path, "py"),
            path.strip_prefix(root),
        ) {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// Every entry point of the project, the most likely training entry first.
///
/// The scanner's entry-point analysis finds them (every form it knows, with whether the program
/// reaches torch through its imports); the config flag's default and `required=` come from the
/// file's text. When the scanner cannot run, a text search for `if __name__ == "__main__":` and
/// `@hydra.main` stands in.
pub fn entry_points(root: &Path) -> Vec<Entry> {
    let mut entries: Vec<Entry> = match scan::entry_points(root) {
        Ok(found) => found
            .into_iter()
            .filter(|e| !e.file.starts_with("migrate_to_cloudrobo/"))
            .map(|e| from_scan(root, &e))
            .collect(),
        Err(_) => python_files(root)
            .iter()
            .filter_map(|rel| inspect(root, rel))
            .collect(),
    };
    entries.sort_by_key(|e| {
        (
            std::cmp::Reverse(rank(e)),
            e.file.matches('/').count(),
            e.file.clone(),
        )
    });
    entries
}

fn from_scan(root: &Path, found: &scan::EntryPoint) -> Entry {
    let hydra = found.kinds.contains(&scan::EntryKind::Hydra);
    let text = std::fs::read_to_string(root.join(&found.file)).unwrap_or_default();
    let own = CONFIG_ARG.captures(&text);
    let config_flag = found
        .config
        .flags
        .first()
        .cloned()
        .or_else(|| own.as_ref().map(|c| c[1].to_owned()));
    let rest = own
        .as_ref()
        .filter(|c| Some(&c[1]) == config_flag.as_deref())
        .and_then(|c| c.get(2))
        .map_or("", |m| m.as_str());
    Entry {
        file: found.file.clone(),
        hydra,
        uses_torch: found.uses_torch,
        config_default: DEFAULT_KW.captures(rest).map(|d| d[1].to_owned()),
        config_required: REQUIRED_KW.is_match(rest),
        config_flag,
    }
}

/// How much a file looks like the training entry.
pub fn rank(entry: &Entry) -> i32 {
    let stem = entry
        .file
        .rsplit('/')
        .next()
        .unwrap_or(&entry.file)
        .trim_end_matches(".py")
        .to_ascii_lowercase();
    let mut score = if stem == "train" {
        100
    } else if stem.starts_with("train") {
        80
    } else if ["train", "finetune", "pretrain", "fit"]
        .iter()
        .any(|w| stem.contains(w))
    {
        60
    } else if stem == "main" || stem == "run" {
        40
    } else {
        10
    };
    if [
        "eval", "test", "infer", "predict", "demo", "export", "visual", "bench", "serve", "deploy",
    ]
    .iter()
    .any(|w| stem.contains(w))
    {
        score -= 50;
    }
    if entry.file.starts_with("tests/") || entry.file.contains("/tests/") {
        score -= 50;
    }
    if entry.uses_torch {
        score += 5;
    }
    if entry.config_flag.is_some() || entry.hydra {
        score += 3;
    }
    score
}

/// Where the config came from, for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundConfig {
    pub value: String,
    pub source: String,
}

static SH_CONFIG: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"--(?:config|cfg|config[-_]file)(?:\s+|=)['"]?([^\s'"\\;]+)"#).unwrap()
});

/// Look for the config where the entry and the launch scripts point.
pub fn detect_config(root: &Path, entry: &Entry) -> Option<FoundConfig> {
    if let Some(default) = &entry.config_default {
        return Some(FoundConfig {
            value: default.clone(),
            source: format!(
                "the default of {} in {}",
                entry.config_flag.as_deref().unwrap_or("--config"),
                entry.file
            ),
        });
    }
    let script_name = entry.file.rsplit('/').next().unwrap_or(&entry.file);
    for script in shell_scripts(root) {
        let Ok(text) = std::fs::read_to_string(root.join(&script)) else {
            continue;
        };
        for (number, line) in text.lines().enumerate() {
            if line.trim_start().starts_with('#') || !line.contains(script_name) {
                continue;
            }
            if let Some(c) = SH_CONFIG.captures(line) {
                let value = c[1].to_owned();
                if !value.contains('$') {
                    return Some(FoundConfig {
                        value,
                        source: format!("{script}:{} runs {script_name} with it", number + 1),
                    });
                }
            }
        }
    }
    if entry.hydra {
        // Hydra entries carry their default config in the decorator.
        return None;
    }
    let mut candidates = Vec::new();
    for dir in ["configs", "config", "conf", "cfg", "."] {
        let Ok(rd) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        let mut files: Vec<String> = rd
            .flatten()
            .filter(|f| f.file_type().is_ok_and(|t| t.is_file()))
            .map(|f| f.file_name().to_string_lossy().into_owned())
            .filter(|n| {
                [".yaml", ".yml", ".json", ".toml"]
                    .iter()
                    .any(|e| n.ends_with(e))
            })
            .filter(|n| dir != "." || n.contains("config") || n.contains("train"))
            .collect();
        files.sort();
        for name in files {
            let rel = if dir == "." {
                name.clone()
            } else {
                format!("{dir}/{name}")
            };
            candidates.push((config_rank(&name), rel));
        }
    }
    candidates.sort_by_key(|(score, rel)| (std::cmp::Reverse(*score), rel.clone()));
    let count = candidates.len();
    candidates.into_iter().next().map(|(_, rel)| FoundConfig {
        source: if count == 1 {
            format!("the only config file found ({rel})")
        } else {
            format!("the most training-like of {count} config files (pass --config to choose)")
        },
        value: rel,
    })
}

fn config_rank(name: &str) -> i32 {
    let stem = name
        .rsplit_once('.')
        .map_or(name, |(s, _)| s)
        .to_ascii_lowercase();
    match stem.as_str() {
        "train" => 100,
        "config" | "default" | "base" => 80,
        s if s.contains("train") => 60,
        s if s.contains("debug") || s.contains("test") || s.contains("eval") => 0,
        _ => 10,
    }
}

fn shell_scripts(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for dir in [".", "scripts", "tools", "examples", "launch"] {
        let Ok(rd) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for f in rd.flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if has_extension(&f.path(), "sh") && f.file_type().is_ok_and(|t| t.is_file()) {
                out.push(if dir == "." {
                    name
                } else {
                    format!("{dir}/{name}")
                });
            }
        }
    }
    out.sort();
    out
}

/// The config arguments for an entry: argparse `FLAG VALUE`, or hydra `--config-path/--config-name`.
pub fn config_args(entry: &Entry, config: &str, root: &Path) -> Vec<String> {
    if entry.hydra {
        let as_file = resolve_file(config, root);
        return match as_file {
            Some(path) => {
                let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
                let name = path
                    .file_stem()
                    .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
                vec![
                    format!("--config-path={}", dir.display()),
                    format!("--config-name={name}"),
                ]
            }
            None => vec![format!("--config-name={config}")],
        };
    }
    let flag = entry
        .config_flag
        .clone()
        .unwrap_or_else(|| "--config".to_owned());
    vec![flag, config.to_owned()]
}

/// A config given relative to the current directory or to the project root, as an absolute path.
pub fn resolve_file(config: &str, root: &Path) -> Option<PathBuf> {
    let given = Path::new(config);
    [
        std::env::current_dir().ok().map(|d| d.join(given)),
        Some(root.join(given)),
    ]
    .into_iter()
    .flatten()
    .find(|p| p.is_file())
    .map(|p| std::path::absolute(&p).unwrap_or(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (rel, text) in files {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    const ARGPARSE: &str = "import argparse\nimport torch\n\ndef main():\n    p = argparse.ArgumentParser()\n    \
p.add_argument(\"--config\", required=True, help=\"yaml\")\n    p.parse_args()\n\nif __name__ == \"__main__\":\n    main()\n";
    const HYDRA: &str = "import hydra\nimport torch\n\n@hydra.main(config_path=\"configs\", config_name=\"train\", version_base=None)\n\
def main(cfg):\n    pass\n\nif __name__ == \"__main__\":\n    main()\n";

    #[test]
    fn the_training_entry_ranks_first() {
        let dir = project(&[
            ("eval.py", ARGPARSE),
            ("train_hydra.py", HYDRA),
            ("train.py", ARGPARSE),
            ("tools/visualize.py", ARGPARSE),
            (
                "migrate_to_cloudrobo/runtime_patches.py",
                "if __name__ == \"__main__\":\n    pass\n",
            ),
        ]);
        let entries = entry_points(dir.path());
        let files: Vec<&str> = entries.iter().map(|e| e.file.as_str()).collect();
        assert_eq!(
            files,
            [
                "train.py",
                "train_hydra.py",
                "eval.py",
                "tools/visualize.py"
            ]
        );
        assert_eq!(entries[0].config_flag.as_deref(), Some("--config"));
        assert!(entries[0].config_required);
        assert!(entries[1].hydra);
        assert!(entries[0].uses_torch);
    }

    #[test]
    fn config_comes_from_the_default_then_scripts_then_folders() {
        let with_default = ARGPARSE.replace("required=True", "default=\"conf/base.yaml\"");
        let dir = project(&[
            ("train.py", &with_default),
            ("configs/train.yaml", "a: 1\n"),
        ]);
        let entry = &entry_points(dir.path())[0];
        let found = detect_config(dir.path(), entry).unwrap();
        assert_eq!(found.value, "conf/base.yaml");

        let dir = project(&[
            ("train.py", ARGPARSE),
            (
                "scripts/finetune.sh",
                "#!/bin/bash\n# python train.py --config old.yaml\npython train.py --config configs/ft.yaml \"$@\"\n",
            ),
            ("configs/train.yaml", "a: 1\n"),
        ]);
        let entry = &entry_points(dir.path())[0];
        let found = detect_config(dir.path(), entry).unwrap();
        assert_eq!(found.value, "configs/ft.yaml");
        assert!(
            found.source.contains("scripts/finetune.sh:3"),
            "{}",
            found.source
        );

        let dir = project(&[
            ("train.py", ARGPARSE),
            ("configs/debug.yaml", ""),
            ("configs/train.yaml", ""),
        ]);
        let entry = &entry_points(dir.path())[0];
        assert_eq!(
            detect_config(dir.path(), entry).unwrap().value,
            "configs/train.yaml"
        );
    }

    #[test]
    fn hydra_entries_get_path_and_name() {
        let dir = project(&[("train_hydra.py", HYDRA), ("configs/debug.yaml", "")]);
        let entry = &entry_points(dir.path())[0];
        let args = config_args(entry, "configs/debug.yaml", dir.path());
        assert_eq!(args[1], "--config-name=debug");
        assert!(
            args[0].starts_with("--config-path=") && args[0].ends_with("configs"),
            "{args:?}"
        );
        assert_eq!(
            config_args(entry, "debug", dir.path()),
            ["--config-name=debug"]
        );
    }
}
