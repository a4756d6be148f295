//! The `npu-scan` command line: arguments, and the run that maps a scan to output and an exit
//! code. `main.rs` only parses arguments and calls [`run`].

use crate::output;
use crate::rules;
use crate::{Error, ScanResult, Settings};
use clap::{Parser, ValueEnum};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const EXAMPLES: &str = "\
Examples:
  npu-scan /path/to/model --output .        scan, write ./issues.json, print a summary
  npu-scan . --format text --no-write       list every finding, write nothing
  npu-scan . --select P_FLA,P_RND           only these rules
  npu-scan . --exclude 'third_party/**'     skip a directory
  npu-scan . --scope 'python train.py --policy act'   port one training path (kept in issues.json)
  npu-scan . --fix                          apply the safe fixes, rescan, record them in issues.json
  npu-scan . --diff --unsafe-fixes          show every fix as a diff, change nothing
  npu-scan . --fix --fix-tests-examples     also fix tests/, test_*.py, conftest.py, examples/, docs/
  npu-scan . --fix --diff > fixes.patch     apply the safe fixes and print what changed
  npu-scan . --format sarif > scan.sarif    for code-scanning UIs
  npu-scan --explain P_RND                  what a rule finds and how to fix it

Exit codes: 0 no pending issue found, 1 pending issues found (with --diff alone: fixes to show),
2 usage or tool error.";

/// Output formats for the findings on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One block per finding, then the summary.
    Text,
    /// The issues.json document of this scan (not merged).
    Json,
    /// SARIF 2.1.0.
    Sarif,
    /// msFmkTransplt's columns: File, Start Line, End Line, OP, Tips.
    Csv,
}

/// When to color text output (shared by every tool).
pub use cli_support::ColorChoice as Color;

/// The command-line arguments.
#[derive(Debug, Parser)]
#[command(
    name = "npu-scan",
    version,
    about = "Finds what breaks when PyTorch training code moves from CUDA GPUs to Ascend NPUs, \
             and writes it to issues.json for npu-progress.",
    after_help = EXAMPLES
)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent command-line switches"
)]
pub struct Cli {
    /// The model project to scan (a directory or one Python file).
    #[arg(value_name = "PATH", default_value = ".")]
    pub path: PathBuf,
    /// Directory where issues.json is written (or a path ending in .json).
    #[arg(short, long, value_name = "DIR", default_value = ".")]
    pub output: PathBuf,
    /// Do not write issues.json; only print.
    #[arg(long)]
    pub no_write: bool,
    /// Print the findings on stdout in this format (default: only the summary table).
    #[arg(short, long, value_enum)]
    pub format: Option<Format>,
    /// Only run these rules (comma-separated ids, repeatable; `ALL` for every rule).
    #[arg(long, value_name = "IDS", value_delimiter = ',')]
    pub select: Vec<String>,
    /// Do not run these rules (comma-separated ids, repeatable).
    #[arg(long, value_name = "IDS", value_delimiter = ',')]
    pub ignore: Vec<String>,
    /// Skip files and directories matching this glob (relative path or name; repeatable).
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// The port's scope: a launch command (`'python train.py --policy act'`). Only findings in
    /// the files on its training path (what its entry imports, the choice its arguments or config
    /// make in a policy factory or registry, the files a recorded `npu-verify` run executed) are
    /// issues (and fixed by --fix); the others are recorded as out of scope. issues.json keeps
    /// it: later scans use it until `--scope none`.
    #[arg(long, value_name = "LAUNCH")]
    pub scope: Option<String>,
    /// Apply the safe automatic fixes, rescan, and record the fixed issues in issues.json.
    #[arg(long)]
    pub fix: bool,
    /// With --fix or --diff: the unsafe fixes too (they change precision, speed or which
    /// kernel runs; review them).
    #[arg(long)]
    pub unsafe_fixes: bool,
    /// With --fix or --diff: fix test and example files too. By default --fix leaves alone
    /// files under a test/tests/testing or example(s)/tutorial(s)/doc(s) directory and files
    /// named test_*.py, *_test.py or conftest.py (a training run does not execute them), and
    /// says how many fixes it left there. The --scope entry is fixed either way.
    #[arg(long)]
    pub fix_tests_examples: bool,
    /// Print the fixes --fix would apply as a unified diff (bytes exactly as in the files:
    /// `git apply` or `patch -p1` reproduce them); change nothing (not even issues.json).
    /// With --fix: apply them and print the diff of what changed (the summary goes to stderr).
    #[arg(long, conflicts_with = "format")]
    pub diff: bool,
    /// Print a rule's documentation and exit.
    #[arg(long, value_name = "ID")]
    pub explain: Option<String>,
    /// List every rule and exit.
    #[arg(long)]
    pub list_rules: bool,
    /// Exit 0 even when issues are found (errors still exit 2).
    #[arg(long)]
    pub exit_zero: bool,
    /// Worker threads (default: one per core).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub threads: usize,
    /// Judge `P_CPU` (ops without an NPU kernel) against this pinned torch-npu release (default: the newest).
    #[arg(long, value_name = "X.Y.Z")]
    pub torch_npu: Option<String>,
    /// Never draw a progress bar (it is drawn only when stderr is a terminal).
    #[arg(long)]
    pub no_progress: bool,
    /// Print nothing but errors (and the --format output).
    #[arg(short, long)]
    pub quiet: bool,
    /// Color the text output.
    #[arg(long, value_enum, default_value_t = Color::Auto)]
    pub color: Color,
}

/// What went wrong in a run, with its causes, for `main` to print.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Scan(#[from] Error),
    #[error("unknown rule id `{id}`; known ids: {known}")]
    Explain { id: String, known: String },
    #[error("cannot write the output")]
    Io(#[from] std::io::Error),
    #[error("--unsafe-fixes needs --fix or --diff: `npu-scan PATH --fix --unsafe-fixes`")]
    UnsafeWithoutFix,
    #[error(
        "--fix-tests-examples needs --fix or --diff: `npu-scan PATH --fix --fix-tests-examples`"
    )]
    TestsWithoutFix,
    #[error("--torch-npu: {0}")]
    TorchNpu(String),
}

/// Run the command; returns the exit code (0 clean, 1 issues found, 2 error reported on `err`).
pub fn run(cli: &Cli, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match run_inner(cli, out, err) {
        Ok(code) => code,
        Err(CliError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            let color = cli.color.enabled(&std::io::stderr());
            let _ = err.write_all(cli_support::error_chain("npu-scan", &e, color).as_bytes());
            2
        }
    }
}

fn run_inner(cli: &Cli, out: &mut dyn Write, err: &mut dyn Write) -> Result<i32, CliError> {
    if let Some(id) = &cli.explain {
        let upper = id.to_ascii_uppercase();
        let Some(rule) = rules::get(&upper) else {
            return Err(CliError::Explain {
                id: id.clone(),
                known: rules::registry()
                    .iter()
                    .map(|r| r.id)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        out.write_all(output::text::explain(rule).as_bytes())?;
        return Ok(0);
    }
    if let Some(version) = &cli.torch_npu {
        rules::cpu::select_version(version).map_err(CliError::TorchNpu)?;
    }
    if cli.list_rules {
        out.write_all(output::text::rule_list().as_bytes())?;
        return Ok(0);
    }

    let progress = (!cli.no_progress && !cli.quiet && std::io::stderr().is_terminal())
        .then(|| indicatif::ProgressBar::new(0).with_prefix("npu-scan"));
    let mut settings = Settings {
        select: cli
            .select
            .iter()
            .map(|s| s.trim().to_ascii_uppercase())
            .collect(),
        ignore: cli
            .ignore
            .iter()
            .map(|s| s.trim().to_ascii_uppercase())
            .collect(),
        exclude: cli.exclude.clone(),
        threads: cli.threads,
        scope: scope_of(cli),
        ..Settings::default()
    };
    if let Some(bar) = &progress {
        bar.set_style(
            indicatif::ProgressStyle::with_template("{prefix}: {bar:30} {pos}/{len} files")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let bar = bar.clone();
        settings.progress = Some(Arc::new(move |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        }));
    }
    if cli.unsafe_fixes && !cli.fix && !cli.diff {
        return Err(CliError::UnsafeWithoutFix);
    }
    if cli.fix_tests_examples && !cli.fix && !cli.diff {
        return Err(CliError::TestsWithoutFix);
    }
    let fix_run = if cli.fix || cli.diff {
        // Issues skipped as false positives are not fixed; a corrupt issues.json stops the run
        // before any file is touched.
        let issues = crate::issues_path(&cli.output);
        let skipped = if issues.exists() {
            issue_model::load(&issues)
                .map_err(Error::from)?
                .issues
                .into_iter()
                .filter(|i| i.status == issue_model::Status::Skipped)
                .map(|i| i.fingerprint)
                .collect()
        } else {
            std::collections::BTreeSet::new()
        };
        let fix_settings = crate::FixSettings {
            unsafe_fixes: cli.unsafe_fixes,
            write: cli.fix,
            skipped,
            shown_root: cli.path.to_string_lossy().into_owned(),
            tests_and_examples: cli.fix_tests_examples,
        };
        Some(
            crate::fix_project(&cli.path, &settings, &fix_settings)
                .map_err(|e| kept_scope(cli, e))?,
        )
    } else {
        None
    };
    let result = match &fix_run {
        Some(run) => run.after.clone(),
        None => crate::scan(&cli.path, &settings).map_err(|e| kept_scope(cli, e))?,
    };
    if let Some(bar) = &progress {
        bar.finish_and_clear();
    }
    if let (true, Some(run)) = (cli.diff, &fix_run) {
        let diffs = project_diff(run);
        out.write_all(&diffs)?;
        out.flush()?;
        if !cli.fix {
            if !cli.quiet {
                err.write_all(
                    output::text::fix_summary(
                        run,
                        cli.unsafe_fixes,
                        false,
                        &cli.path.to_string_lossy(),
                    )
                    .as_bytes(),
                )?;
                write_warnings(err, &result.warnings)?;
            }
            return Ok(i32::from(!diffs.is_empty() && !cli.exit_zero));
        }
    }
    let root_as_given = cli.path.to_string_lossy().into_owned();

    let (merge, pending) = if cli.no_write {
        (None, result.issues.len())
    } else {
        let report = match &fix_run {
            Some(run) => crate::write_fixed_issues_json(&cli.output, &root_as_given, run)?,
            None => crate::write_issues_json(&cli.output, &root_as_given, &result)?,
        };
        let written = issue_model::load(&crate::issues_path(&cli.output)).map_err(Error::from)?;
        let fresh: std::collections::BTreeSet<&str> = result
            .issues
            .iter()
            .map(|i| i.fingerprint.as_str())
            .collect();
        let pending = written
            .issues
            .iter()
            .filter(|i| {
                i.status == issue_model::Status::Pending && fresh.contains(i.fingerprint.as_str())
            })
            .count();
        (Some(report), pending)
    };

    let color = cli.color.enabled(&std::io::stdout());
    let written_path = (!cli.no_write).then(|| crate::issues_path(&cli.output));
    let mut summary = output::text::summary(
        &result,
        merge.as_ref(),
        written_path
            .as_deref()
            .map(Path::to_string_lossy)
            .as_deref(),
    );
    if let Some(run) = &fix_run {
        summary.push_str(&output::text::fix_summary(
            run,
            cli.unsafe_fixes,
            true,
            &cli.path.to_string_lossy(),
        ));
    }
    match cli.format {
        // With --fix --diff, stdout holds the diff only.
        None if cli.diff => {
            if !cli.quiet {
                err.write_all(summary.as_bytes())?;
            }
        }
        None => {
            if !cli.quiet {
                out.write_all(summary.as_bytes())?;
            }
        }
        Some(Format::Text) => {
            out.write_all(output::text::findings_colored(&result.issues, color).as_bytes())?;
            if !cli.quiet {
                out.write_all(summary.as_bytes())?;
            }
        }
        Some(format) => {
            let body = render(format, &root_as_given, &result);
            out.write_all(body.as_bytes())?;
            if !cli.quiet {
                err.write_all(summary.as_bytes())?;
            }
        }
    }
    if !cli.quiet {
        write_warnings(err, &result.warnings)?;
    }
    out.flush()?;
    Ok(i32::from(pending > 0 && !cli.exit_zero))
}

/// The launch command of the scan's scope: `--scope` (`none`: no scope), else the one the
/// existing issues.json records.
fn scope_of(cli: &Cli) -> Option<String> {
    match cli.scope.as_deref().map(str::trim) {
        Some(s) if s.eq_ignore_ascii_case("none") || s.is_empty() => None,
        Some(s) => Some(s.to_owned()),
        None => issue_model::load(&crate::issues_path(&cli.output))
            .ok()
            .and_then(|f| f.scope)
            .map(|s| s.launch),
    }
}

/// A scope error of the scope issues.json keeps (no `--scope` given) says where it came from.
fn kept_scope(cli: &Cli, error: Error) -> Error {
    match error {
        Error::Scope { launch, why } if cli.scope.is_none() => Error::Scope {
            launch,
            why: format!(
                "{why} (this scope is the one {} keeps; give another with --scope LAUNCH, or drop it with --scope none)",
                crate::issues_path(&cli.output).display()
            ),
        },
        other => other,
    }
}

/// One diff per changed file, from its bytes before the first pass to its bytes after the
/// last, in the order the files were first changed.
fn project_diff(run: &crate::FixRun) -> Vec<u8> {
    let mut order: Vec<&str> = Vec::new();
    let mut ends: std::collections::HashMap<&str, (&[u8], &[u8])> =
        std::collections::HashMap::new();
    for outcome in run.files.iter().filter(|o| !o.diff.is_empty()) {
        let file = outcome.file.as_str();
        if let Some(end) = ends.get_mut(file) {
            end.1 = &outcome.after;
        } else {
            order.push(file);
            ends.insert(file, (&outcome.before, &outcome.after));
        }
    }
    let mut diffs = Vec::new();
    for file in order {
        let (before, after) = ends[file];
        diffs.extend(crate::fix::unified_diff(file, before, after));
    }
    diffs
}

fn render(format: Format, root: &str, result: &ScanResult) -> String {
    match format {
        Format::Text => output::text::findings(&result.issues),
        Format::Json => output::json(root, result),
        Format::Sarif => output::sarif::render(&result.issues),
        Format::Csv => output::csv::render(&result.issues),
    }
}

/// At most this many warnings are printed one by one.
const MAX_WARNINGS: usize = 20;

fn write_warnings(err: &mut dyn Write, warnings: &[String]) -> std::io::Result<()> {
    for w in warnings.iter().take(MAX_WARNINGS) {
        writeln!(err, "npu-scan: warning: {w}")?;
    }
    if warnings.len() > MAX_WARNINGS {
        writeln!(
            err,
            "npu-scan: warning: … and {} more warnings",
            warnings.len() - MAX_WARNINGS
        )?;
    }
    Ok(())
}
