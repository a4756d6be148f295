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
pub(crate) fn plan_entry(args: &Args, root: &Path) -> Result<Plan, String> {
    let entries = entry::entry_points(root);
    let (mut launch, entry, chosen_by) = if !args.launch.is_empty() {
        let launch = launch::parse_launch(&args.launch, root)?;
        let entry = match &launch {
            Launch::Script { path, .. } => {
                rel(root, &root.join(path)).and_then(|r| entry::inspect(root, &r))
            }
            Launch::Module { .. } | Launch::Shell { .. } => None,
        };
        if matches!(launch, Launch::Shell { .. }) && args.config.is_some() {
            return Err(
                "--config cannot be added to a shell launch command; put the config in the command itself"
                    .to_owned(),
            );
        }
        (launch, entry, "the launch command after `--`".to_owned())
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
        let entry = rel(root, &path).and_then(|r| entry::inspect(root, &r));
        (
            Launch::Script {
                path,
                argv: Vec::new(),
            },
            entry,
            "--entry".to_owned(),
        )
    } else {
        let Some(first) = entries.first() else {
            return Err("no entry point found (no file with `if __name__ == \"__main__\":` or `@hydra.main`)".to_owned());
        };
        let others: Vec<&str> = entries
            .iter()
            .skip(1)
            .take(4)
            .map(|e| e.file.as_str())
            .collect();
        let chosen = if others.is_empty() {
            format!("the only entry point, {}", first.file)
        } else {
            format!(
                "ranked first of the entry points; others: {}; choose with --entry",
                others.join(", ")
            )
        };
        (
            Launch::Script {
                path: root.join(&first.file),
                argv: Vec::new(),
            },
            Some(first.clone()),
            chosen,
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
    };
    Ok(Plan {
        entry_file: entry.map(|e| e.file),
        launch,
        info,
    })
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
