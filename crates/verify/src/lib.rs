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
mod hunks;
pub mod interpreter;
pub mod isolate;
pub mod launch;
mod msprobe;
pub mod outcome;
pub mod output;
mod parity;
mod parity_session;
mod parity_why;
mod plan;
pub mod ranks;
pub mod record;
pub mod report;
mod session;
pub mod statics;

use cli::{Args, Format};
use report::{Check, Report, Status};
use std::path::{Path, PathBuf};

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
    let started = issue_model::now_rfc3339();
    let report = verify(args)?;
    match args.format {
        Format::Text => output::stdout(&report.to_text()),
        Format::Json => output::stdout(&report.to_json()),
    }
    .map_err(Error::Stdout)?;
    let dir = args.path.join(statics::MIGRATE_DIR);
    if dir.is_dir() {
        let path = dir.join("verify-report.json");
        let previous = std::fs::read(&path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Report>(&bytes).ok());
        let on_record = match &previous {
            Some(previous) => report.with_previous(previous),
            None => report.clone(),
        };
        write_atomic(&path, on_record.to_json().as_bytes()).map_err(|source| {
            Error::WriteReport {
                path: path.clone(),
                source,
            }
        })?;
        output::progress(args.quiet, &format!("report written to {}", path.display()));
        record_run(&dir, &started, &report);
        record_executed(&args.path, &report);
    } else {
        output::progress(
            args.quiet,
            &format!(
                "{} does not exist; the JSON report was not written",
                dir.display()
            ),
        );
    }
    if args.record_issues {
        match record::record(args, &report) {
            Ok(line) => output::progress(args.quiet, &line),
            Err(why) => {
                output::progress(false, &format!("error: {why}"));
                return Ok(2);
            }
        }
    }
    // --parity alone: its exit status is the comparison's (0 match, 1 diverge, 2 cannot align).
    let code = if args.parity && !(args.runtime || args.pipeline || args.data) {
        report.exit_code_of("parity.")
    } else {
        report.exit_code()
    };
    Ok(u8::try_from(code).unwrap_or(2))
}

/// Write the project files the pipeline run executed to `scan::scope::EXECUTED_FILE` (next to
/// `verify-report.json`), where `npu-scan --scope` and `npu-progress --scope` read them: files a
/// run of the scope's entry executed are in scope. A run that recorded none leaves the file as
/// it was; one that cannot be written costs only that refinement, so it is not an error.
fn record_executed(project: &Path, report: &Report) {
    let Some(executed) = &report.executed else {
        return;
    };
    let Some(entry) = executed.get("entry").and_then(serde_json::Value::as_str) else {
        return;
    };
    let files: Vec<String> = executed
        .get("files")
        .and_then(serde_json::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(serde_json::Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let record = scan::scope::Executed {
        command: report
            .entry
            .as_ref()
            .map(|e| e.command.clone())
            .unwrap_or_default(),
        entry: entry.to_owned(),
        files,
    };
    let path = project.join(scan::scope::EXECUTED_FILE);
    let mut bytes = serde_json::to_vec_pretty(&record).unwrap_or_default();
    bytes.push(b'\n');
    if let Err(why) = write_atomic(&path, &bytes) {
        output::progress(
            false,
            &format!("warning: cannot write {}: {why}", path.display()),
        );
    }
}

/// Where each run is recorded, one JSON object a line, for the adaptation summary's timing.
pub const RUNS_LOG: &str = "logs/verify-runs.jsonl";

/// Append this run's record to [`RUNS_LOG`]: when it started and finished, its modes, its counts.
/// A record that cannot be written costs only the summary's timing, so it is not an error.
fn record_run(migrate_dir: &Path, started: &str, report: &Report) {
    use std::io::Write;
    let path = migrate_dir.join(RUNS_LOG);
    let line = serde_json::json!({
        "started_at": started,
        "finished_at": issue_model::now_rfc3339(),
        "modes": report.modes,
        "emulated": report.emulated,
        "summary": report.summary,
    });
    let appended = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
        })
        .and_then(|mut file| writeln!(file, "{line}"));
    if let Err(e) = appended {
        output::progress(
            false,
            &format!("warning: cannot record this run in {}: {e}", path.display()),
        );
    }
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
        (args.parity, "parity"),
    ] {
        if on {
            modes.push(name.to_owned());
        }
    }
    let mut report = Report::new(&root.display().to_string(), modes, args.emulate_npu);
    let project = entry::project(&abs_root);
    let plan = plan::plan_entry(args, &abs_root, &project);

    // Static checks.
    // Static checks show paths as the user gave them.
    report.checks.push(statics::migrate_dir(root));
    report.checks.push(statics::runtime_patches(
        root,
        patch_assets::get("runtime_patches.py"),
    ));
    let entry_file = plan.as_ref().ok().and_then(|p| p.entry_file.clone());
    let entry_patcher = statics::entry_patcher(&project, entry_file.as_deref());
    let harness_applies = entry_patcher.status == Status::Fail;
    report.checks.push(entry_patcher);
    report
        .checks
        .push(statics::issues(args.issues.as_deref(), root));

    if !(args.runtime || args.pipeline || args.data || args.parity) {
        output::progress(
            args.quiet,
            "only the static checks ran; add --runtime, --pipeline, --data or --parity",
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
    let mut session = session::Session {
        args,
        root: abs_root.clone(),
        interpreter,
        workspace,
        report,
        harness_applies,
        transfer_checked: false,
        parity_env: None,
        extra_env: Vec::new(),
    };
    session.run_all(plan);
    let mut report = session.report;
    report.finish();
    Ok(report)
}
