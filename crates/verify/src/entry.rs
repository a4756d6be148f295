//! Which program `--pipeline` / `--data` run, and with which config.
//!
//! The entry comes from `-- <launch command>`, `--entry FILE`, or the project's entry points,
//! the training one ranked first. What verify knows about a Python file (its entry-point forms,
//! the config flag with its `default=` and `required=`, hydra's and draccus's config, whether
//! it reaches torch, whether it builds an optimizer and steps it) comes from scan's facts
//! ([`scan::facts`]), which read the files scan reads, parsed once. Without `--config`, the
//! config is looked for where the entry and the launch scripts point: the argparse default of
//! the config flag, `--config X` in shell scripts that run the entry, then the usual config
//! folders.

use regex::Regex;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// A Python file that starts a program.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent facts of one file, one field each"
)]
pub struct Entry {
    /// Relative to the project root, `/`-separated.
    pub file: String,
    pub hydra: bool,
    /// `@draccus.wrap`: the config file is passed as `--config_path=FILE`.
    pub draccus: bool,
    pub uses_torch: bool,
    /// The entry file itself builds an optimizer and steps it.
    pub trains_here: bool,
    /// The entry file or a project file it imports builds an optimizer and steps it.
    pub trains: bool,
    /// The argparse flag that takes the config (`--config`, `--cfg`, `--config-file`…).
    pub config_flag: Option<String>,
    /// Its `default=` value, when it has one (for draccus, the decorator's `config_path=`).
    pub config_default: Option<String>,
    pub config_required: bool,
}

impl Entry {
    fn from_scan(found: &scan::EntryPoint) -> Entry {
        let config = &found.config;
        let config_flag = config.flags.first().cloned();
        let argument = config_flag.as_deref().and_then(|f| config.argument(f));
        Entry {
            file: found.file.clone(),
            hydra: found.kinds.contains(&scan::EntryKind::Hydra),
            draccus: found.kinds.contains(&scan::EntryKind::Draccus),
            uses_torch: found.uses_torch,
            trains_here: found.trains_here,
            trains: found.trains,
            config_default: argument
                .and_then(|a| a.default.clone())
                .or_else(|| config.draccus_config_path.clone()),
            config_required: argument.is_some_and(|a| a.required),
            config_flag,
        }
    }

    /// Why the entry does or does not look like it trains, for the report.
    pub fn training_note(&self) -> &'static str {
        if self.trains_here {
            "builds an optimizer and steps it"
        } else if self.trains {
            "a project file it imports builds an optimizer and steps it"
        } else {
            "no optimizer that it steps"
        }
    }
}

/// The facts of the project at `root`; an empty project when it cannot be read.
pub fn project(root: &Path) -> scan::Project {
    scan::facts(root).unwrap_or_default()
}

/// The entry-point facts of the file `rel`; `None` when it is not an entry point scan reads.
pub fn inspect(project: &scan::Project, rel: &str) -> Option<Entry> {
    project
        .entry_points()
        .iter()
        .find(|e| e.file == rel)
        .map(Entry::from_scan)
}

pub(crate) fn has_extension(path: &Path, ext: &str) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case(ext))
}

/// Every entry point of the project, the most likely training entry first: those that build
/// an optimizer and step it (in the file itself, then through a project file it imports),
/// then by how much the name looks like training ([`rank`]), then the shallowest.
pub fn entry_points(project: &scan::Project) -> Vec<Entry> {
    let mut entries: Vec<Entry> = project
        .entry_points()
        .iter()
        .map(Entry::from_scan)
        .collect();
    entries.sort_by_key(|e| {
        (
            std::cmp::Reverse(u8::from(e.trains_here) + u8::from(e.trains)),
            std::cmp::Reverse(rank(e)),
            e.file.matches('/').count(),
            e.file.clone(),
        )
    });
    entries
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
        let of = match &entry.config_flag {
            Some(flag) => flag.as_str(),
            None if entry.draccus => "@draccus.wrap(config_path=…)",
            None => "--config",
        };
        return Some(FoundConfig {
            value: default.clone(),
            source: format!("the default of {of} in {}", entry.file),
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
    if entry.draccus && entry.config_flag.is_none() {
        return vec![format!("--config_path={config}")];
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

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
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
        let dir = tree(&[
            ("eval.py", ARGPARSE),
            ("train_hydra.py", HYDRA),
            ("train.py", ARGPARSE),
            ("tools/visualize.py", ARGPARSE),
            (
                "migrate_to_cloudrobo/runtime_patches.py",
                "if __name__ == \"__main__\":\n    pass\n",
            ),
        ]);
        let entries = entry_points(&project(dir.path()));
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
    fn scripts_that_train_rank_before_scripts_named_like_training() {
        let checkpoint = "import torch\n\ndef main():\n    m = torch.load('ckpt.pt')\n    print(m)\n\n\
if __name__ == \"__main__\":\n    main()\n";
        let looped =
            "import torch\nfrom trainer import fit\n\nif __name__ == \"__main__\":\n    fit()\n";
        let trainer =
            "import torch\n\ndef fit():\n    opt = torch.optim.AdamW([])\n    opt.step()\n";
        let dir = tree(&[
            ("train_check.py", checkpoint),
            ("scripts/finetune.py", looped),
            ("scripts/trainer.py", trainer),
            (
                "tools/pretrain_loop.py",
                &trainer.replace("def fit", "if __name__ == '__main__':\n    pass\ndef fit"),
            ),
        ]);
        let entries = entry_points(&project(dir.path()));
        let files: Vec<(&str, &str)> = entries
            .iter()
            .map(|e| (e.file.as_str(), e.training_note()))
            .collect();
        assert_eq!(
            files,
            [
                ("tools/pretrain_loop.py", "builds an optimizer and steps it"),
                (
                    "scripts/finetune.py",
                    "a project file it imports builds an optimizer and steps it"
                ),
                ("train_check.py", "no optimizer that it steps"),
            ]
        );
    }

    #[test]
    fn an_optimizer_built_in_one_file_and_stepped_in_another_trains() {
        let entry = "import torch\nfrom optim import make\nfrom loop import run\n\n\
if __name__ == \"__main__\":\n    run(make())\n";
        let optim = "import torch\n\ndef make():\n    return torch.optim.AdamW([])\n";
        let looped = "def run(opt):\n    for _ in range(3):\n        opt.step()\n";
        let dir = tree(&[
            ("train.py", entry),
            ("optim.py", optim),
            ("loop.py", looped),
        ]);
        let entries = entry_points(&project(dir.path()));
        assert_eq!(
            entries[0].training_note(),
            "a project file it imports builds an optimizer and steps it"
        );
        // Built but stepped nowhere is still no training.
        let dir = tree(&[("train.py", entry), ("optim.py", optim), ("loop.py", "")]);
        assert_eq!(
            entry_points(&project(dir.path()))[0].training_note(),
            "no optimizer that it steps"
        );
    }

    #[test]
    fn draccus_entries_get_config_path() {
        let draccus = "import draccus\n\n@draccus.wrap(config_path=\"configs/train.yaml\")\ndef main(cfg):\n    pass\n\n\
if __name__ == \"__main__\":\n    main()\n";
        let dir = tree(&[("train.py", draccus), ("configs/train.yaml", "")]);
        let entry = &entry_points(&project(dir.path()))[0];
        assert!(entry.draccus);
        let found = detect_config(dir.path(), entry).unwrap();
        assert_eq!(found.value, "configs/train.yaml");
        assert!(found.source.contains("draccus"), "{}", found.source);
        assert_eq!(
            config_args(entry, "configs/ft.yaml", dir.path()),
            ["--config_path=configs/ft.yaml"]
        );
    }

    #[test]
    fn config_comes_from_the_default_then_scripts_then_folders() {
        let with_default = ARGPARSE.replace("required=True", "default=\"conf/base.yaml\"");
        let dir = tree(&[
            ("train.py", &with_default),
            ("configs/train.yaml", "a: 1\n"),
        ]);
        let entry = &entry_points(&project(dir.path()))[0];
        let found = detect_config(dir.path(), entry).unwrap();
        assert_eq!(found.value, "conf/base.yaml");

        let dir = tree(&[
            ("train.py", ARGPARSE),
            (
                "scripts/finetune.sh",
                "#!/bin/bash\n# python train.py --config old.yaml\npython train.py --config configs/ft.yaml \"$@\"\n",
            ),
            ("configs/train.yaml", "a: 1\n"),
        ]);
        let entry = &entry_points(&project(dir.path()))[0];
        let found = detect_config(dir.path(), entry).unwrap();
        assert_eq!(found.value, "configs/ft.yaml");
        assert!(
            found.source.contains("scripts/finetune.sh:3"),
            "{}",
            found.source
        );

        let dir = tree(&[
            ("train.py", ARGPARSE),
            ("configs/debug.yaml", ""),
            ("configs/train.yaml", ""),
        ]);
        let entry = &entry_points(&project(dir.path()))[0];
        assert_eq!(
            detect_config(dir.path(), entry).unwrap().value,
            "configs/train.yaml"
        );
    }

    #[test]
    fn hydra_entries_get_path_and_name() {
        let dir = tree(&[("train_hydra.py", HYDRA), ("configs/debug.yaml", "")]);
        let entry = &entry_points(&project(dir.path()))[0];
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
