//! Which program `--pipeline` / `--data` run: the entry (launch command, `--entry`, or the
//! project's entry points) and the config passed to it.

use crate::cli::Args;
use crate::entry::{self, Entry};
use crate::launch::{self, Launch};
use crate::report::EntryInfo;
use std::path::Path;

/// What `--pipeline` / `--data` will run.
pub(crate) struct Plan {
    pub launch: Launch,
    pub entry_file: Option<String>,
    pub info: EntryInfo,
}

/// Choose the entry and the config; `Err` says why nothing can be run.
pub(crate) fn plan_entry(
    args: &Args,
    root: &Path,
    project: &scan::Project,
) -> Result<Plan, String> {
    let (mut launch, entry, chosen_by, considered) = if !args.launch.is_empty() {
        let launch = launch::parse_launch(&args.launch, root)?;
        let entry = match &launch {
            Launch::Script { path, .. } => {
                rel(root, &root.join(path)).and_then(|r| entry::inspect(project, &r))
            }
            Launch::Module { .. } | Launch::Shell { .. } => None,
        };
        if matches!(launch, Launch::Shell { .. }) && args.config.is_some() {
            return Err(
                "--config cannot be added to a shell launch command; put the config in the command itself"
                    .to_owned(),
            );
        }
        (
            launch,
            entry,
            "the launch command after `--`".to_owned(),
            Vec::new(),
        )
    } else if let Some(file) = &args.entry {
        let path = if file.is_absolute() {
            file.clone()
        } else {
            std::env::current_dir().unwrap_or_default().join(file)
        };
        let path = if path.is_file() {
            path
        } else {
            root.join(file)
        };
        if !path.is_file() {
            return Err(format!("--entry {}: no such file", file.display()));
        }
        let entry = rel(root, &path).and_then(|r| entry::inspect(project, &r));
        (
            Launch::Script {
                path,
                argv: Vec::new(),
            },
            entry,
            "--entry".to_owned(),
            Vec::new(),
        )
    } else {
        let (first, chosen, considered) = choose_entry(args, root, project)?;
        (
            Launch::Script {
                path: root.join(&first.file),
                argv: Vec::new(),
            },
            Some(first),
            chosen,
            considered,
        )
    };
    let (config, config_source) = choose_config(args, root, entry.as_ref(), launch.argv())?;
    if let (Some(config), Some(entry)) = (&config, &entry) {
        launch
            .argv_mut()
            .extend(entry::config_args(entry, config, root));
    } else if let (Some(config), None) = (&config, &entry) {
        launch
            .argv_mut()
            .extend(["--config".to_owned(), config.clone()]);
    }
    let info = EntryInfo {
        command: launch.display(root),
        chosen_by,
        config,
        config_source,
        trains: entry.as_ref().map(|e| e.trains),
        considered,
    };
    Ok(Plan {
        entry_file: entry.map(|e| e.file),
        launch,
        info,
    })
}

/// The entry the search picks, why, and every entry point it weighed (`file: why`), in rank
/// order. Scripts whose `P_ENT` issue was skipped in issues.json are passed over: skipping it
/// says the script is not the port's training entry.
fn choose_entry(
    args: &Args,
    root: &Path,
    project: &scan::Project,
) -> Result<(Entry, String, Vec<String>), String> {
    let skipped = skipped_entries(args.issues.as_deref(), root);
    let entries = entry::entry_points(project);
    let considered: Vec<String> = entries
        .iter()
        .map(|e| match skipped.iter().find(|(file, _)| *file == e.file) {
            Some((_, id)) => format!("{}: its P_ENT issue {id} is skipped in issues.json", e.file),
            None => format!("{}: {}", e.file, e.training_note()),
        })
        .collect();
    let mut open = entries
        .iter()
        .filter(|e| !skipped.iter().any(|(file, _)| *file == e.file));
    let Some(first) = open.next() else {
        return Err(if entries.is_empty() {
            "no entry point found (no file with `if __name__ == \"__main__\":`, `@hydra.main`, `@draccus.wrap`, `tyro.cli` or `fire.Fire`)".to_owned()
        } else {
            format!(
                "every entry point's P_ENT issue is skipped in issues.json ({})",
                considered.join("; ")
            )
        });
    };
    let why = if first.trains {
        first.training_note()
    } else {
        "no entry point builds an optimizer and steps it; it ranked first by name"
    };
    let chosen = if entries.len() == 1 {
        format!("the only entry point, {} ({why})", first.file)
    } else {
        format!(
            "{} of {} entry points ({why}; choose another with --entry)",
            first.file,
            entries.len()
        )
    };
    Ok((first.clone(), chosen, considered))
}

/// Entry files whose `P_ENT` issue is skipped in the project's issues.json, with the issue id.
fn skipped_entries(given: Option<&Path>, root: &Path) -> Vec<(String, String)> {
    let Ok(path) = crate::statics::find_issues(given, root) else {
        return Vec::new();
    };
    let Ok(file) = issue_model::load(&path) else {
        return Vec::new();
    };
    file.issues
        .iter()
        .filter(|i| i.pattern == "P_ENT" && i.status == issue_model::Status::Skipped)
        .map(|i| (i.file.clone(), i.id.clone()))
        .collect()
}

fn rel(root: &Path, path: &Path) -> Option<String> {
    let path = std::path::absolute(path).ok()?;
    path.strip_prefix(root)
        .ok()
        .map(|p| p.to_string_lossy().replace('\\', "/"))
}

fn choose_config(
    args: &Args,
    root: &Path,
    entry: Option<&Entry>,
    launch_argv: &[String],
) -> Result<(Option<String>, Option<String>), String> {
    let has_config_arg = launch_argv.iter().any(|a| {
        a.starts_with("--config") || a.starts_with("--cfg") || a.starts_with("--config-name")
    });
    if let Some(config) = &args.config {
        if has_config_arg {
            return Err(
                "--config was given and the launch command already passes a config; keep one"
                    .to_owned(),
            );
        }
        let is_hydra = entry.is_some_and(|e| e.hydra);
        return match entry::resolve_file(config, root) {
            // Relative to the project root when inside it: the program runs there.
            Some(path) => Ok((
                Some(
                    path.strip_prefix(root)
                        .unwrap_or(&path)
                        .display()
                        .to_string(),
                ),
                Some("--config".to_owned()),
            )),
            None if is_hydra => Ok((
                Some(config.clone()),
                Some("--config (a hydra config name)".to_owned()),
            )),
            None => Err(format!(
                "--config {config}: no such file (looked relative to the current directory and to {})",
                root.display()
            )),
        };
    }
    if has_config_arg || !args.launch.is_empty() {
        return Ok((None, None));
    }
    let Some(entry) = entry else {
        return Ok((None, None));
    };
    if entry.config_flag.is_none() && !entry.hydra {
        return Ok((None, None));
    }
    if entry.config_default.is_some() {
        // The program falls back to its own default: nothing to pass, but say which file it reads.
        let found = entry::detect_config(root, entry);
        return Ok((
            None,
            found.map(|f| format!("{} ({}; not passed)", f.value, f.source)),
        ));
    }
    match entry::detect_config(root, entry) {
        Some(found) => Ok((Some(found.value), Some(found.source))),
        None if entry.config_required => Err(format!(
            "{} requires {} and no config was found (argparse default, launch scripts, configs/); pass --config",
            entry.file,
            entry.config_flag.as_deref().unwrap_or("--config")
        )),
        None => Ok((None, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    const TRAINS: &str = "import torch\n\ndef main():\n    m = torch.nn.Linear(2, 2).cuda()\n    opt = torch.optim.SGD(m.parameters(), lr=0.1)\n    opt.step()\n\n\
if __name__ == \"__main__\":\n    main()\n";
    const CHECKS: &str =
        "import torch\n\nif __name__ == \"__main__\":\n    print(torch.load('ckpt.pt'))\n";

    fn plan(root: &Path) -> Result<Plan, String> {
        let args = Args::parse_from([std::ffi::OsStr::new("npu-verify"), root.as_os_str()]);
        plan_entry(&args, root, &crate::entry::project(root))
    }

    #[test]
    fn the_search_prefers_training_and_passes_over_skipped_entries() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("train_check.py"), CHECKS).unwrap();
        std::fs::write(root.join("finetune.py"), TRAINS).unwrap();
        let chosen = plan(root).unwrap();
        assert_eq!(chosen.entry_file.as_deref(), Some("finetune.py"));
        assert_eq!(chosen.info.trains, Some(true));
        assert_eq!(
            chosen.info.considered,
            [
                "finetune.py: builds an optimizer and steps it",
                "train_check.py: no optimizer that it steps"
            ]
        );

        // Skipping finetune.py's P_ENT issue says it is not the port's training entry.
        let result = scan::scan(root, &scan::Settings::default()).unwrap();
        scan::write_issues_json(root, ".", &result).unwrap();
        let path = root.join("issues.json");
        let mut file = issue_model::load(&path).unwrap();
        let ent = file
            .issues
            .iter_mut()
            .find(|i| i.pattern == "P_ENT" && i.file == "finetune.py")
            .expect("finetune.py has a P_ENT issue");
        ent.status = issue_model::Status::Skipped;
        ent.reason = Some("a CPU-only check".to_owned());
        let id = ent.id.clone();
        issue_model::save(&path, &file).unwrap();
        let chosen = plan(root).unwrap();
        assert_eq!(chosen.entry_file.as_deref(), Some("train_check.py"));
        assert!(
            chosen
                .info
                .chosen_by
                .contains("no entry point builds an optimizer"),
            "{}",
            chosen.info.chosen_by
        );
        assert_eq!(
            chosen.info.considered[0],
            format!("finetune.py: its P_ENT issue {id} is skipped in issues.json")
        );
    }
}
