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
}
