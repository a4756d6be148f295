//! `--scope LAUNCH`: a port's scope is the training path of one launch command. The entry file
//! is read from the command, and the findings kept are those in the files it reaches through
//! imports (statically, transitively); the others are out of scope.

use crate::project::Project;
use std::collections::BTreeSet;

/// The files a launch command reaches, or why its entry could not be found.
#[derive(Debug, Clone)]
pub struct Scope {
    /// The launch command, as given.
    pub launch: String,
    /// The entry file: relative, `/`-separated.
    pub entry: String,
    /// The entry and every project file it imports, transitively.
    pub files: BTreeSet<String>,
}

impl Scope {
    /// The scope of `launch` in `project`; `root_as_given` is the scanned root as the user
    /// named it (a launch command may name the entry through it: `python proj/train.py`).
    pub fn of(project: &Project, launch: &str, root_as_given: &str) -> Result<Scope, String> {
        let candidates = entry_candidates(launch, root_as_given);
        if candidates.is_empty() {
            return Err(
                "it names no Python file (`python train.py …`, `torchrun … train.py`) and no module (`python -m pkg.train`)"
                    .to_owned(),
            );
        }
        let entry = candidates
            .iter()
            .find(|c| project.file(c).is_some())
            .ok_or_else(|| {
                format!(
                    "its entry ({}) is not a Python file of the project",
                    candidates
                        .iter()
                        .map(|c| format!("`{c}`"))
                        .collect::<Vec<_>>()
                        .join(" or ")
                )
            })?;
        let files = project
            .reachable(entry)
            .into_iter()
            .map(str::to_owned)
            .collect();
        Ok(Scope {
            launch: launch.to_owned(),
            entry: entry.clone(),
            files,
        })
    }

    /// Whether a finding in `file` is in scope. Only Python files are judged: a config file
    /// (YAML, TOML, JSON) or a CUDA source is kept, as imports cannot tell which ones a run reads.
    pub fn contains(&self, file: &str) -> bool {
        !is_python(file) || self.files.contains(file)
    }

    /// The reason recorded on an out-of-scope issue.
    pub fn reason(&self) -> String {
        format!(
            "out of scope: not reached by `{}` (entry {})",
            self.launch, self.entry
        )
    }
}

/// Whether `path` names a Python file (`.py`, in any case).
fn is_python(path: &str) -> bool {
    std::path::Path::new(path)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("py"))
}

/// The relative paths the entry of `launch` may have: the first `.py` argument (relative to
/// the root, with `./` and the root's own prefix removed), or the file of a `-m` module.
fn entry_candidates(launch: &str, root_as_given: &str) -> Vec<String> {
    let words: Vec<String> = launch
        .split_whitespace()
        .map(|w| w.trim_matches(|c| c == '\'' || c == '"').to_owned())
        .collect();
    let root = root_as_given
        .trim_start_matches("./")
        .trim_end_matches('/')
        .to_owned();
    let relative = |path: &str| -> String {
        let path = path.trim_start_matches("./");
        match path.strip_prefix(&format!("{root}/")) {
            Some(rest) if !root.is_empty() && root != "." => rest.to_owned(),
            _ => path.to_owned(),
        }
    };
    if let Some(at) = words.iter().position(|w| w == "-m")
        && let Some(module) = words.get(at + 1)
        && words[..at].iter().all(|w| !is_python(w))
    {
        let path = module.replace('.', "/");
        return vec![format!("{path}.py"), format!("{path}/__main__.py")];
    }
    words
        .iter()
        .find(|w| is_python(w))
        .map(|w| vec![relative(w)])
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::entry_candidates;

    #[test]
    fn the_entry_of_a_launch_command() {
        assert_eq!(
            entry_candidates("python train.py --policy act", "."),
            ["train.py"]
        );
        assert_eq!(
            entry_candidates("torchrun --nproc-per-node 2 ./scripts/train.py", "proj"),
            ["scripts/train.py"]
        );
        assert_eq!(
            entry_candidates("python proj/train.py", "./proj/"),
            ["train.py"]
        );
        assert_eq!(
            entry_candidates("python -m pkg.train --x 1", "."),
            ["pkg/train.py", "pkg/train/__main__.py"]
        );
        assert!(entry_candidates("bash run.sh", ".").is_empty());
    }
}
