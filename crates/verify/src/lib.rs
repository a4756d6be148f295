//! `npu-verify`: proves that a ported project runs on the NPU before a long training job does.
//!
//! Static checks (the `migrate_to_cloudrobo/` files, the patcher at the entry point, `issues.json`)
//! run here; everything that needs Python runs in an embedded harness, started with the
//! project's interpreter under a timeout: the runtime checks, a few optimizer steps of the
//! project's own training entry, and a few batches of its real `DataLoader` — on a real NPU, or on
//! an emulated `npu` device with `--emulate-npu`. The result is a table of checks and a JSON
//! report. This crate must not change the user's project beyond writing that report.

pub mod cli;
pub mod entry;
pub mod envcheck;
pub mod harness;
pub mod interpreter;
pub mod output;
pub mod report;
pub mod statics;

use cli::{Args, Format};
use entry::{Entry, Launch};
use report::{Check, EntryInfo, Report, Status};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Errors that stop verify before it has a report to show.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: not a directory; give the model project's root", path.display())]
    NoProject { path: PathBuf },
    #[error("cannot write the report {}: {source}", path.display())]
    WriteReport {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write to stdout: {0}")]
    Stdout(#[source] std::io::Error),
}

/// Run every check asked for, print the report, write it to `migrate_to_cloudrobo/`, and return
/// the exit code (0 pass, 1 a check failed, 2 could not run).
pub fn run(args: &Args) -> Result<u8, Error> {
    let report = verify(args)?;
    match args.format {
        Format::Text => output::stdout(&report.to_text()),
        Format::Json => output::stdout(&report.to_json()),
    }
    .map_err(Error::Stdout)?;
    let dir = args.path.join(statics::MIGRATE_DIR);
    if dir.is_dir() {
        let path = dir.join("verify-report.json");
        write_atomic(&path, report.to_json().as_bytes()).map_err(|source| Error::WriteReport {
            path: path.clone(),
            source,
        })?;
        output::progress(args.quiet, &format!("report written to {}", path.display()));
    } else {
        output::progress(
            args.quiet,
            &format!(
                "{} does not exist; the JSON report was not written",
                dir.display()
            ),
        );
    }
    Ok(u8::try_from(report.exit_code()).unwrap_or(2))
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(bytes)?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Build the report without printing it.
pub fn verify(args: &Args) -> Result<Report, Error> {
    let root = &args.path;
    if !root.is_dir() {
        return Err(Error::NoProject { path: root.clone() });
    }
    let abs_root = std::path::absolute(root).unwrap_or_else(|_| root.clone());
    let mut modes = vec!["static".to_owned()];
    for (on, name) in [
        (args.runtime, "runtime"),
        (args.pipeline, "pipeline"),
        (args.data, "data"),
    ] {
        if on {
            modes.push(name.to_owned());
        }
    }
    let mut report = Report::new(&root.display().to_string(), modes, args.emulate_npu);
    let files = entry::python_files(&abs_root);
    let plan = plan_entry(args, &abs_root);

    // Static checks.
    // Static checks show paths as the user gave them.
    report.checks.push(statics::migrate_dir(root));
    report.checks.push(statics::runtime_patches(
        root,
        patch_assets::get("runtime_patches.py"),
    ));
    let entry_file = plan.as_ref().ok().and_then(|p| p.entry_file.clone());
    let entry_patcher = statics::entry_patcher(&abs_root, &files, entry_file.as_deref());
    let harness_applies = entry_patcher.status == Status::Fail;
    report.checks.push(entry_patcher);
    report
        .checks
        .push(statics::issues(args.issues.as_deref(), root));

    if !(args.runtime || args.pipeline || args.data) {
        output::progress(
            args.quiet,
            "only the static checks ran; add --runtime, --pipeline or --data",
        );
        report.finish();
        return Ok(report);
    }

    let interpreter = match interpreter::discover(
        args.python.as_deref(),
        args.conda_env.as_deref(),
        &interpreter::ProcessEnv,
    ) {
        Ok(i) => i,
        Err(e) => {
            report.checks.push(Check::fail(
                "interpreter",
                e.to_string(),
                "pass --python /path/to/python or --conda-env NAME",
            ));
            report.incomplete = true;
            report.finish();
            return Ok(report);
        }
    };
    report.interpreter = Some(interpreter.info());
    let workspace = match harness::Workspace::new() {
        Ok(w) => w,
        Err(e) => {
            report.checks.push(Check::fail(
                "harness",
                e.to_string(),
                "check that the temp directory is writable ($TMPDIR)",
            ));
            report.incomplete = true;
            report.finish();
            return Ok(report);
        }
    };
    let mut session = Session {
        args,
        root: abs_root.clone(),
        interpreter,
        workspace,
        report,
        harness_applies,
    };
    session.run_all(plan);
    let mut report = session.report;
    report.finish();
    Ok(report)
}

/// What `--pipeline` / `--data` will run.
struct Plan {
    launch: Launch,
    entry_file: Option<String>,
    info: EntryInfo,
}

/// Choose the entry and the config; `Err` says why nothing can be run.
fn plan_entry(args: &Args, root: &Path) -> Result<Plan, String> {
    let entries = entry::entry_points(root);
    let (mut launch, entry, chosen_by) = if !args.launch.is_empty() {
        let launch = entry::parse_launch(&args.launch, root)?;
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

struct Session<'a> {
    args: &'a Args,
    root: PathBuf,
    interpreter: interpreter::Interpreter,
    workspace: harness::Workspace,
    report: Report,
    harness_applies: bool,
}

impl Session<'_> {
    fn timeout(&self) -> Duration {
        Duration::from_secs(self.args.timeout)
    }

    fn env(&self) -> Vec<(String, OsString)> {
        let mut env: Vec<(String, OsString)> = vec![
            ("PYTHONUNBUFFERED".into(), "1".into()),
            ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
            ("HYDRA_FULL_ERROR".into(), "1".into()),
        ];
        // As train.sh does: migrate_to_cloudrobo/ first on PYTHONPATH.
        let migrate = self.root.join(statics::MIGRATE_DIR);
        if migrate.is_dir() {
            let mut paths = vec![migrate];
            if let Some(old) = std::env::var_os("PYTHONPATH") {
                paths.extend(std::env::split_paths(&old));
            }
            if let Ok(joined) = std::env::join_paths(paths) {
                env.push(("PYTHONPATH".into(), joined));
            }
        }
        if self.args.emulate_npu {
            // A machine with an NPU has no CUDA device: code that still asks for CUDA must fail here too.
            env.push(("CUDA_VISIBLE_DEVICES".into(), OsString::new()));
            // A real torch_npu must not load with torch (torch >= 2.5 autoloads backends): the
            // emulator needs the npu device name for itself.
            env.push(("TORCH_DEVICE_BACKEND_AUTOLOAD".into(), "0".into()));
        }
        env
    }

    fn base_request(&mut self) -> Option<serde_json::Value> {
        let emulator = if self.args.emulate_npu {
            match self.workspace.emulator() {
                Ok(dir) => Some(dir.display().to_string()),
                Err(e) => {
                    self.report.checks.push(Check::fail(
                        "emulator",
                        e.to_string(),
                        "use a release build of npu-verify",
                    ));
                    self.report.incomplete = true;
                    return None;
                }
            }
        } else {
            None
        };
        let own = self
            .root
            .join(statics::MIGRATE_DIR)
            .join("runtime_patches.py");
        let patches = if own.is_file() {
            Some(own.display().to_string())
        } else {
            self.workspace
                .shipped_patches()
                .ok()
                .flatten()
                .map(|p| p.display().to_string())
        };
        Some(serde_json::json!({
            "project_root": self.root.display().to_string(),
            "emulate": self.args.emulate_npu,
            "emulator_dir": emulator,
            "patches_file": patches,
            "device_type": "npu",
            "steps": self.args.steps,
            "batches": self.args.batches,
        }))
    }

    fn harness(
        &mut self,
        mode: &str,
        request: serde_json::Value,
        shell: Option<&[String]>,
    ) -> Option<harness::Outcome> {
        output::progress(
            self.args.quiet,
            &format!(
                "{mode}: running the harness with {}",
                self.interpreter.info().command.join(" ")
            ),
        );
        let env = self.env();
        let job = harness::Job {
            mode,
            request,
            cwd: &self.root,
            env: &env,
            timeout: self.timeout(),
            shell,
        };
        let outcome = match harness::run(&self.workspace, &self.interpreter, job) {
            Ok(o) => o,
            Err(e) => {
                self.report.checks.push(Check::fail(
                    &format!("{mode}.harness"),
                    e.to_string(),
                    "check $TMPDIR",
                ));
                self.report.incomplete = true;
                return None;
            }
        };
        output::progress(
            self.args.quiet,
            &format!("{mode}: done in {:.1} s", outcome.wall.as_secs_f64()),
        );
        if let (Some(hello), Some(info)) = (&outcome.hello, self.report.interpreter.as_mut()) {
            info.version = hello
                .get("python")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned);
        }
        self.report.checks.extend(outcome.checks.iter().cloned());
        if let Some(check) = outcome.failure_check(&self.interpreter, self.timeout()) {
            self.report.checks.push(check);
        }
        if outcome.never_started() || outcome.spawn_error.is_some() {
            self.report.incomplete = true;
        }
        self.report.harness_runs.push(outcome.info());
        Some(outcome)
    }

    fn run_all(&mut self, plan: Result<Plan, String>) {
        if self.args.runtime {
            self.runtime();
            if self.report.incomplete {
                return;
            }
        }
        if !(self.args.pipeline || self.args.data) {
            return;
        }
        let plan = match plan {
            Ok(plan) => plan,
            Err(why) => {
                self.report.checks.push(Check::fail(
                    "entry",
                    why,
                    "name the training entry with --entry FILE (and --config), or give its launch command after `--`",
                ));
                self.report.incomplete = true;
                return;
            }
        };
        let mut detail = format!(
            "`{}`; chosen: {}",
            plan.info.command.join(" "),
            plan.info.chosen_by
        );
        if let Some(source) = &plan.info.config_source {
            let _ = write!(detail, "; config: {source}");
        }
        self.report.checks.push(Check::pass("entry", detail));
        let launch = plan.launch.to_json(&self.root);
        let shell_words = match &plan.launch {
            Launch::Shell { words } => Some(words.clone()),
            _ => None,
        };
        self.report.entry = Some(plan.info);
        for (on, mode) in [(self.args.pipeline, "pipeline"), (self.args.data, "data")] {
            if !on {
                continue;
            }
            let Some(mut request) = self.base_request() else {
                return;
            };
            request["launch"] = launch.clone();
            request["apply_patcher"] = self.harness_applies.into();
            let shell = shell_words.as_deref();
            let Some(outcome) = self.harness(mode, request, shell) else {
                return;
            };
            if outcome.never_started() {
                return;
            }
            self.scan_output_for_fallbacks(&outcome);
        }
    }

    fn runtime(&mut self) {
        let Some(request) = self.base_request() else {
            return;
        };
        let Some(outcome) = self.harness("runtime", request, None) else {
            return;
        };
        if outcome.never_started() {
            return;
        }
        let count = outcome
            .facts
            .get("device_count")
            .and_then(serde_json::Value::as_u64);
        let visible = std::env::var("ASCEND_RT_VISIBLE_DEVICES").ok();
        if count.is_some() || visible.is_some() {
            self.report.checks.push(envcheck::visible_devices(
                visible.as_deref(),
                count,
                self.args.emulate_npu,
            ));
        }
        let shipped = patch_assets::get("templates/env_npu.sh").map(String::from_utf8_lossy);
        let project =
            std::fs::read_to_string(self.root.join(statics::MIGRATE_DIR).join("env_npu.sh")).ok();
        match shipped {
            Some(shipped) => {
                self.report.checks.push(envcheck::perf_env(
                    &shipped,
                    project.as_deref(),
                    &|name| std::env::var(name).ok(),
                ));
            }
            None => self.report.checks.push(Check::skip(
                "runtime.perf_env",
                "this npu-verify build carries no env_npu.sh to compare with",
            )),
        }
    }

    /// CPU fallbacks printed by C++ (not as Python warnings) only show in the output.
    fn scan_output_for_fallbacks(&mut self, outcome: &harness::Outcome) {
        let name = format!("{}.cpu_fallback", outcome.mode);
        let printed = outcome
            .tail
            .lines()
            .filter(|l| l.contains("fall back to run on the CPU"))
            .count();
        if printed == 0 {
            return;
        }
        if let Some(check) = self
            .report
            .checks
            .iter_mut()
            .find(|c| c.name == name && c.status == Status::Pass)
        {
            check.status = Status::Warn;
            check.detail = format!("{printed} CPU-fallback messages in the program's output");
            check.remedy = Some(
                "each fallback copies tensors to the host and back; set TORCH_NPU_FALLBACK_CPU_DISABLE=1 to find \
                 the call (NPU-FACTS.md)"
                    .to_owned(),
            );
        }
    }
}
