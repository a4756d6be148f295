//! The launch command after `--`: a Python program the harness runs directly, or any other
//! command run with Python shims on `PATH`.

use crate::entry::has_extension;
use std::path::{Path, PathBuf};

/// How a Python program is started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launch {
    /// `python path/to/script.py ARGS`
    Script { path: PathBuf, argv: Vec<String> },
    /// `python -m package.module ARGS`
    Module { module: String, argv: Vec<String> },
    /// Any other command (`bash scripts/train.sh`, `bash migrate_to_cloudrobo/train.sh python …`):
    /// run as given with `python`, `python3` and `torchrun` shims first on `PATH`; the first Python
    /// program it starts runs under the harness.
    Shell { words: Vec<String> },
}

impl Launch {
    pub fn argv_mut(&mut self) -> &mut Vec<String> {
        match self {
            Launch::Script { argv, .. } | Launch::Module { argv, .. } => argv,
            Launch::Shell { words } => words,
        }
    }

    pub fn argv(&self) -> &[String] {
        match self {
            Launch::Script { argv, .. } | Launch::Module { argv, .. } => argv,
            Launch::Shell { words } => words.get(1..).unwrap_or(&[]),
        }
    }

    /// The command as typed in the project root.
    pub fn display(&self, root: &Path) -> Vec<String> {
        if let Launch::Shell { words } = self {
            return words.clone();
        }
        let mut out = vec!["python".to_owned()];
        match self {
            Launch::Shell { .. } => {}
            Launch::Script { path, .. } => {
                out.push(
                    path.strip_prefix(root)
                        .unwrap_or(path)
                        .display()
                        .to_string(),
                );
            }
            Launch::Module { module, .. } => {
                out.push("-m".to_owned());
                out.push(module.clone());
            }
        }
        out.extend(self.argv().iter().cloned());
        out
    }

    pub fn to_json(&self, root: &Path) -> serde_json::Value {
        match self {
            Launch::Script { path, argv } => serde_json::json!({
                "kind": "script", "path": root.join(path), "argv": argv,
            }),
            Launch::Module { module, argv } => serde_json::json!({
                "kind": "module", "module": module, "argv": argv,
            }),
            // The shim tells the harness what Python was asked to run.
            Launch::Shell { words } => serde_json::json!({"kind": "shell", "words": words}),
        }
    }
}

/// Parse `-- <launch command>` into a Python launch (`python`, `torchrun`, or a `.py` file).
pub fn parse_launch(words: &[String], root: &Path) -> Result<Launch, String> {
    let Some(first) = words.first() else {
        return Err("the launch command after `--` is empty".to_owned());
    };
    let base = first.rsplit('/').next().unwrap_or(first);
    let is_python = base.starts_with("python");
    let mut rest: &[String] = &words[1..];
    if base == "torchrun"
        || (is_python
            && rest.len() >= 2
            && rest[0] == "-m"
            && rest[1].starts_with("torch.distributed."))
    {
        if is_python {
            rest = &rest[2..];
        }
        rest = skip_torchrun_options(rest);
    } else if is_python {
        while let Some(word) = rest.first() {
            match word.as_str() {
                "-m" => {
                    let module = rest.get(1).ok_or("`python -m` without a module")?;
                    return Ok(Launch::Module {
                        module: module.clone(),
                        argv: rest[2..].to_vec(),
                    });
                }
                "-W" | "-X" => rest = rest.get(2..).unwrap_or(&[]),
                w if w.starts_with('-') && w != "-" => rest = &rest[1..],
                _ => break,
            }
        }
    } else if !has_extension(Path::new(base), "py") {
        return Ok(Launch::Shell {
            words: words.to_vec(),
        });
    } else {
        rest = words;
    }
    let script = rest
        .first()
        .ok_or("the launch command names no Python script")?;
    let path = root.join(script);
    if !path.is_file() {
        return Err(format!(
            "the launch command's script {} does not exist",
            path.display()
        ));
    }
    Ok(Launch::Script {
        path: PathBuf::from(script),
        argv: rest[1..].to_vec(),
    })
}

/// Drop torchrun's own options; the harness runs one process.
fn skip_torchrun_options(mut rest: &[String]) -> &[String] {
    const FLAGS: &[&str] = &[
        "--standalone",
        "--no-python",
        "--no_python",
        "--run-path",
        "--run_path",
        "--module",
        "-m",
    ];
    while let Some(word) = rest.first() {
        if !word.starts_with('-') {
            break;
        }
        if FLAGS.contains(&word.as_str()) || word.contains('=') {
            rest = &rest[1..];
        } else {
            rest = rest.get(2..).unwrap_or(&[]);
        }
    }
    rest
}

/// The process count of a distributed launcher command line: torchrun's `--nproc_per_node`
/// (`--nproc-per-node`), accelerate's `--num_processes`, deepspeed's `--num_gpus`, when it is a
/// number (not `auto`, `gpu` or a shell variable).
pub fn processes_in_words(words: &[String]) -> Option<u32> {
    const FLAGS: &[&str] = &[
        "--nproc_per_node",
        "--nproc-per-node",
        "--num_processes",
        "--num-processes",
        "--num_gpus",
        "--num-gpus",
    ];
    let mut iter = words.iter().peekable();
    while let Some(word) = iter.next() {
        let (flag, value) = match word.split_once('=') {
            Some((flag, value)) => (flag, Some(value.to_owned())),
            None => (word.as_str(), None),
        };
        if !FLAGS.contains(&flag) {
            continue;
        }
        let value = value.or_else(|| iter.peek().map(|w| (*w).clone()))?;
        return value
            .trim_matches(['"', '\''])
            .parse()
            .ok()
            .filter(|n| *n >= 1);
    }
    None
}

/// A launcher line (torchrun, `python -m torch.distributed.run`, `accelerate launch`,
/// `deepspeed`) of a shell script, split into words (no shell expansion).
fn launcher_lines(text: &str) -> impl Iterator<Item = Vec<String>> + '_ {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or(""))
        .filter(|line| {
            line.contains("torchrun")
                || line.contains("torch.distributed.run")
                || line.contains("torch.distributed.launch")
                || line.contains("accelerate launch")
                || line.contains("deepspeed")
        })
        .map(|line| line.split_whitespace().map(str::to_owned).collect())
}

/// The process count the launch command asks for: its own launcher options, or for a shell
/// script, the first launcher line of that script that sets a number.
pub fn launch_processes(words: &[String], root: &Path) -> Option<u32> {
    if let Some(n) = processes_in_words(words) {
        return Some(n);
    }
    let script = words
        .iter()
        .take(2)
        .find(|w| has_extension(Path::new(w), "sh"))?;
    let text = std::fs::read_to_string(root.join(script)).ok()?;
    launcher_lines(&text).find_map(|line| processes_in_words(&line))
}

/// Shell scripts of the project (its root and `scripts/`) with a launcher line that runs
/// `entry` and sets a process count: `(script, count)`, sorted by script.
pub fn project_launchers(root: &Path, entry: &str) -> Vec<(String, u32)> {
    let name = Path::new(entry)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut found = Vec::new();
    for dir in ["", "scripts"] {
        let Ok(read) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for item in read.flatten() {
            let path = item.path();
            if !has_extension(&path, "sh") {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let count = launcher_lines(&text)
                .filter(|line| line.iter().any(|w| w.ends_with(&name)))
                .find_map(|line| processes_in_words(&line));
            if let Some(count) = count {
                let rel = path.strip_prefix(root).unwrap_or(&path);
                found.push((rel.display().to_string(), count));
            }
        }
    }
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARGPARSE: &str = "import argparse\nif __name__ == \"__main__\":\n    pass\n";

    #[test]
    fn launch_commands_are_parsed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("train.py"), ARGPARSE).unwrap();
        let words = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        let launch =
            parse_launch(&words("python -u train.py --config c.yaml"), dir.path()).unwrap();
        assert_eq!(launch.argv(), ["--config", "c.yaml"]);
        let launch = parse_launch(
            &words("torchrun --nproc_per_node 8 --standalone train.py --x"),
            dir.path(),
        )
        .unwrap();
        assert_eq!(
            launch,
            Launch::Script {
                path: "train.py".into(),
                argv: vec!["--x".into()]
            }
        );
        let launch = parse_launch(&words("python3 -m pkg.train a"), dir.path()).unwrap();
        assert_eq!(
            launch,
            Launch::Module {
                module: "pkg.train".into(),
                argv: vec!["a".into()]
            }
        );
        assert_eq!(
            parse_launch(&words("bash run.sh"), dir.path()).unwrap(),
            Launch::Shell {
                words: words("bash run.sh")
            }
        );
        assert!(
            parse_launch(&words("python missing.py"), dir.path())
                .unwrap_err()
                .contains("does not exist")
        );
    }

    #[test]
    fn process_counts_are_read_from_launchers_and_scripts() {
        let dir = tempfile::tempdir().unwrap();
        let words = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            processes_in_words(&words("torchrun --nproc_per_node 8 train.py")),
            Some(8)
        );
        assert_eq!(
            processes_in_words(&words("torchrun --nproc-per-node=4 train.py")),
            Some(4)
        );
        assert_eq!(
            processes_in_words(&words("accelerate launch --num_processes 2 train.py")),
            Some(2)
        );
        assert_eq!(
            processes_in_words(&words("torchrun --nproc_per_node $NGPUS train.py")),
            None
        );
        std::fs::create_dir(dir.path().join("scripts")).unwrap();
        std::fs::write(
            dir.path().join("scripts/ddp.sh"),
            "#!/bin/bash\n# torchrun --nproc_per_node 16 old.py\nexport X=1\ntorchrun --standalone --nproc_per_node 8 train.py --config c.yaml\n",
        )
        .unwrap();
        assert_eq!(
            launch_processes(&words("bash scripts/ddp.sh"), dir.path()),
            Some(8)
        );
        assert_eq!(
            project_launchers(dir.path(), "train.py"),
            [("scripts/ddp.sh".to_owned(), 8)]
        );
        assert!(project_launchers(dir.path(), "eval.py").is_empty());
    }
}
