//! Finding the Python interpreter the harness runs with.
//!
//! Order: `--python PY`, `--conda-env NAME` (through `conda run -n NAME python`), the active conda
//! env (`$CONDA_PREFIX/bin/python`), `python3` on `PATH`. The error names every place looked at.

use crate::report::InterpreterInfo;
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A command prefix that runs Python: the program and the arguments before the script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interpreter {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// Where it was found, for the report.
    pub source: String,
}

impl Interpreter {
    pub fn info(&self) -> InterpreterInfo {
        let mut command = vec![self.program.display().to_string()];
        command.extend(self.args.iter().map(|a| a.to_string_lossy().into_owned()));
        InterpreterInfo {
            command,
            source: self.source.clone(),
            version: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("--python {}: {why}", path.display())]
    Python { path: PathBuf, why: String },
    #[error(
        "--conda-env {name} needs the conda command: $CONDA_EXE is {exe} and no `conda` is on PATH; \
         activate conda or pass --python /path/to/env/bin/python"
    )]
    NoConda { name: String, exe: String },
    #[error("no Python interpreter found; looked at:\n{}\npass --python /path/to/python or --conda-env NAME", looked.join("\n"))]
    NotFound { looked: Vec<String> },
}

/// The environment discovery reads; a trait object so tests can give their own.
pub trait Env {
    fn var(&self, name: &str) -> Option<OsString>;
}

/// The real process environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<OsString> {
        std::env::var_os(name)
    }
}

/// Find the interpreter.
pub fn discover(
    python: Option<&Path>,
    conda_env: Option<&str>,
    env: &dyn Env,
) -> Result<Interpreter, Error> {
    if let Some(path) = python {
        let found = if path.components().count() > 1 || path.is_absolute() {
            if !path.exists() {
                return Err(Error::Python {
                    path: path.to_owned(),
                    why: "no such file".to_owned(),
                });
            }
            if !is_executable(path) {
                return Err(Error::Python {
                    path: path.to_owned(),
                    why: "not an executable file (chmod +x, or give the interpreter itself)"
                        .to_owned(),
                });
            }
            path.to_owned()
        } else {
            search_path(path.as_os_str(), env).ok_or_else(|| Error::Python {
                path: path.to_owned(),
                why: "not found on PATH".to_owned(),
            })?
        };
        return Ok(Interpreter {
            program: found,
            args: Vec::new(),
            source: "--python".to_owned(),
        });
    }
    if let Some(name) = conda_env {
        let exe = env.var("CONDA_EXE").map(PathBuf::from);
        let conda = match &exe {
            Some(p) if is_executable(p) => Some(p.clone()),
            _ => search_path("conda".as_ref(), env),
        };
        let Some(conda) = conda else {
            return Err(Error::NoConda {
                name: name.to_owned(),
                exe: exe.map_or_else(|| "unset".to_owned(), |p| p.display().to_string()),
            });
        };
        return Ok(Interpreter {
            program: conda,
            args: ["run", "--no-capture-output", "-n", name, "python"]
                .iter()
                .map(OsString::from)
                .collect(),
            source: format!("--conda-env {name}"),
        });
    }
    let mut looked = vec![
        "  --python: not given".to_owned(),
        "  --conda-env: not given".to_owned(),
    ];
    match env.var("CONDA_PREFIX") {
        Some(prefix) => {
            let candidate = PathBuf::from(prefix).join("bin").join("python");
            if is_executable(&candidate) {
                return Ok(Interpreter {
                    program: candidate,
                    args: Vec::new(),
                    source: "$CONDA_PREFIX (the active conda env)".to_owned(),
                });
            }
            looked.push(format!(
                "  $CONDA_PREFIX/bin/python: {} is missing or not executable",
                candidate.display()
            ));
        }
        None => looked.push(
            "  $CONDA_PREFIX/bin/python: $CONDA_PREFIX is unset (no active conda env)".to_owned(),
        ),
    }
    if let Some(found) = search_path("python3".as_ref(), env) {
        return Ok(Interpreter {
            program: found,
            args: Vec::new(),
            source: "python3 on PATH".to_owned(),
        });
    }
    let path = env
        .var("PATH")
        .map_or_else(|| "unset".to_owned(), |p| p.to_string_lossy().into_owned());
    looked.push(format!("  python3 on PATH: not found (PATH={path})"));
    Err(Error::NotFound { looked })
}

fn search_path(name: &std::ffi::OsStr, env: &dyn Env) -> Option<PathBuf> {
    let path = env.var("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct FakeEnv(HashMap<&'static str, OsString>);

    impl Env for FakeEnv {
        fn var(&self, name: &str) -> Option<OsString> {
            self.0.get(name).cloned()
        }
    }

    fn executable(dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn explicit_python_wins_and_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let py = executable(dir.path(), "py");
        let env = FakeEnv(HashMap::new());
        let found = discover(Some(&py), Some("ignored"), &env).unwrap();
        assert_eq!(found.program, py);
        assert_eq!(found.source, "--python");
        let missing = dir.path().join("nope");
        let err = discover(Some(&missing), None, &env)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no such file"), "{err}");
        std::fs::write(dir.path().join("plain"), "x").unwrap();
        let err = discover(Some(&dir.path().join("plain")), None, &env)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not an executable"), "{err}");
    }

    #[test]
    fn conda_env_runs_through_conda_run() {
        let dir = tempfile::tempdir().unwrap();
        let conda = executable(dir.path(), "bin/conda");
        let env = FakeEnv(HashMap::from([(
            "PATH",
            dir.path().join("bin").into_os_string(),
        )]));
        let found = discover(None, Some("npu"), &env).unwrap();
        assert_eq!(found.program, conda);
        assert_eq!(
            found.args,
            ["run", "--no-capture-output", "-n", "npu", "python"]
                .map(OsString::from)
                .to_vec()
        );
        let err = discover(None, Some("npu"), &FakeEnv(HashMap::new()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("needs the conda command"), "{err}");
    }

    #[test]
    fn conda_prefix_then_path() {
        let dir = tempfile::tempdir().unwrap();
        let conda_py = executable(dir.path(), "env/bin/python");
        let path_py = executable(dir.path(), "usr/bin/python3");
        let env = FakeEnv(HashMap::from([
            ("CONDA_PREFIX", dir.path().join("env").into_os_string()),
            ("PATH", dir.path().join("usr/bin").into_os_string()),
        ]));
        assert_eq!(discover(None, None, &env).unwrap().program, conda_py);
        let env = FakeEnv(HashMap::from([(
            "PATH",
            dir.path().join("usr/bin").into_os_string(),
        )]));
        assert_eq!(discover(None, None, &env).unwrap().program, path_py);
    }

    #[test]
    fn not_found_names_every_place() {
        let dir = tempfile::tempdir().unwrap();
        let env = FakeEnv(HashMap::from([
            ("CONDA_PREFIX", dir.path().join("gone").into_os_string()),
            ("PATH", dir.path().as_os_str().to_owned()),
        ]));
        let err = discover(None, None, &env).unwrap_err().to_string();
        for place in [
            "--python",
            "--conda-env",
            "$CONDA_PREFIX/bin/python",
            "python3 on PATH",
        ] {
            assert!(err.contains(place), "{place} missing from: {err}");
        }
    }
}
