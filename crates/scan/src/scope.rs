//! `--scope LAUNCH`: a port's scope is the training path of one launch command. The entry file
//! is read from the command; the files in scope are those it reaches statically (imports, where
//! a selection among modules — an `if`/`elif` chain or a registry keyed by strings, a dynamic
//! `import_module` — follows only the choice the launch command or its config makes, and the
//! `_target_` classes of its hydra config; see [`reach`] and [`select`]), and those an
//! `npu-verify` run of the same entry executed ([`EXECUTED_FILE`]). Findings in other Python
//! files are out of scope.

mod reach;
mod select;

use crate::project::{ImportFact, Project};
pub use issue_model::Scope;
use std::collections::BTreeSet;
use std::path::Path;

/// The record of the project files a verify run executed, written by the `npu-verify` harness
/// under `<project>/migrate_to_cloudrobo/`, next to `verify-report.json`.
pub const EXECUTED_FILE: &str = "migrate_to_cloudrobo/executed-files.json";

/// What [`EXECUTED_FILE`] holds.
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize)]
pub struct Executed {
    /// The command the harness ran, as the user gave it after `--`.
    #[serde(default)]
    pub command: Vec<String>,
    /// The entry file, relative to the project root.
    pub entry: String,
    /// Project files executed (modules imported and the entry), relative, sorted.
    pub files: Vec<String>,
}

/// The recorded verify run of the project at `root`, if there is a readable one.
pub fn executed(root: &Path) -> Option<Executed> {
    let bytes = std::fs::read(root.join(EXECUTED_FILE)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The scope of `launch` in `project`; `root_as_given` is the scanned root as the user named
/// it (a launch command may name the entry through it: `python proj/train.py`), `root` where
/// it is.
pub fn of(
    project: &Project,
    launch: &str,
    root_as_given: &str,
    root: &Path,
) -> Result<Scope, String> {
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
    let dir = if root.is_dir() {
        root
    } else {
        root.parent().unwrap_or(root)
    };
    let hydra = project
        .entry_points()
        .into_iter()
        .find(|e| &e.file == entry)
        .and_then(|e| {
            let name = e.config.hydra_config_name?;
            let config_path = e.config.hydra_config_path.unwrap_or_default();
            let entry_dir = entry.rsplit_once('/').map_or("", |(d, _)| d);
            Some((join_relative(entry_dir, &config_path), name))
        });
    let static_reach = |launch: &str| {
        let selection = select::Selection::of(
            dir,
            &arguments(launch),
            &reach::arg_defaults(dir, entry),
            hydra.clone(),
        );
        let roots: Vec<String> = selection
            .targets
            .iter()
            .filter_map(|t| {
                let fact = ImportFact {
                    candidates: reach::module_candidates(t),
                    line: 0,
                };
                project.resolve_import(entry, &fact).map(str::to_owned)
            })
            .collect();
        reach::reach(dir, project, entry, &roots, &selection)
    };
    let found = static_reach(launch);
    let mut notes = found.notes;
    let mut files: BTreeSet<String> = found.files;
    let mut ran = Vec::new();
    if let Some(run) = executed(dir)
        && run.entry == *entry
    {
        // A run of the same training path: its command (extra flags such as `--device npu`
        // aside) selects no file this launch does not.
        let command = run.command.join(" ");
        let other: Vec<String> = static_reach(&command)
            .files
            .into_iter()
            .filter(|f| !files.contains(f))
            .collect();
        if other.is_empty() {
            for file in run.files {
                if project.file(&file).is_some() {
                    files.insert(file.clone());
                    ran.push(file);
                }
            }
            ran.sort();
            ran.dedup();
        } else {
            notes.push(format!(
                "the recorded verify run (`{command}`) takes another path ({} is not reached by this launch command); its executed files were not added",
                other.join(", ")
            ));
        }
    }
    Ok(Scope {
        launch: launch.to_owned(),
        entry: entry.clone(),
        files: files.into_iter().collect(),
        executed: ran,
        notes,
    })
}

/// `dir/relative`, with `.` and `..` parts resolved lexically (`scripts` + `../conf` = `conf`).
fn join_relative(dir: &str, relative: &str) -> String {
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for part in relative.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// The words of `launch` after its entry (`train.py`, or `-m pkg.train`): its arguments.
fn arguments(launch: &str) -> Vec<String> {
    let words: Vec<String> = launch
        .split_whitespace()
        .map(|w| w.trim_matches(|c| c == '\'' || c == '"').to_owned())
        .collect();
    let at = words
        .iter()
        .position(|w| is_python(w))
        .or_else(|| words.iter().position(|w| w == "-m").map(|i| i + 1));
    at.map(|i| words[i + 1..].to_vec()).unwrap_or_default()
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
