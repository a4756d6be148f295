//! The launch command after `--`: a Python program the harness runs directly, or any other
//! command run with Python shims on `PATH`.

use crate::entry::has_extension;
use cli_support::launcher;
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

/// Parse `-- <launch command>` into a Python launch (`python`, a distributed launcher, or a
/// `.py` file); launchers are read as `npu-train` reads them ([`cli_support::launcher`]).
pub fn parse_launch(words: &[String], root: &Path) -> Result<Launch, String> {
    let Some(first) = words.first() else {
        return Err("the launch command after `--` is empty".to_owned());
    };
    let base = first.rsplit('/').next().unwrap_or(first);
    let rest: &[String];
    if let Some(command) = launcher::parse(words) {
        // The harness runs one process of the launcher's program.
        if command.module {
            let (module, argv) = command
                .program
                .split_first()
                .ok_or("the launcher's `-m` names no module")?;
            return Ok(Launch::Module {
                module: module.clone(),
                argv: argv.to_vec(),
            });
        }
        return script(&command.program, root);
    } else if base.starts_with("python") {
        let mut after: &[String] = &words[1..];
        while let Some(word) = after.first() {
            match word.as_str() {
                "-m" => {
                    let module = after.get(1).ok_or("`python -m` without a module")?;
                    return Ok(Launch::Module {
                        module: module.clone(),
                        argv: after[2..].to_vec(),
                    });
                }
                "-W" | "-X" => after = after.get(2..).unwrap_or(&[]),
                w if w.starts_with('-') && w != "-" => after = &after[1..],
                _ => break,
            }
        }
        rest = after;
    } else if !has_extension(Path::new(base), "py") {
        return Ok(Launch::Shell {
            words: words.to_vec(),
        });
    } else {
        rest = words;
    }
    script(rest, root)
}

/// `script.py ARGS` as a launch of a project script that exists.
fn script(words: &[String], root: &Path) -> Result<Launch, String> {
    let script = words
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
        argv: words[1..].to_vec(),
    })
}

/// The process count the launch command asks for: its own launcher options, or for a shell
/// script, the first launcher line of that script that sets a number.
pub fn launch_processes(words: &[String], root: &Path) -> Option<u32> {
    if let Some(command) = launcher::find(words) {
        return command.processes();
    }
    let text = std::fs::read_to_string(root.join(launcher::script_of(words)?)).ok()?;
    launcher::script_lines(&text).find_map(|c| c.processes())
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
            let count = launcher::script_lines(&text)
                .filter(|c| c.program.first().is_some_and(|w| w.ends_with(&name)))
                .find_map(|c| c.processes());
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
            launch_processes(&words("torchrun --nproc_per_node 8 train.py"), dir.path()),
            Some(8)
        );
        assert_eq!(
            launch_processes(&words("torchrun --nproc-per-node=4 train.py"), dir.path()),
            Some(4)
        );
        assert_eq!(
            launch_processes(
                &words("accelerate launch --num_processes 2 train.py"),
                dir.path()
            ),
            Some(2)
        );
        assert_eq!(
            launch_processes(
                &words("torchrun --nproc_per_node $NGPUS train.py"),
                dir.path()
            ),
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
