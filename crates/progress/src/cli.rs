//! Command-line arguments. The seed workflow's flags (`--next`, `--fixed`, `--skip ... --reason`,
//! `--check-complete`) keep their exact spelling.

use clap::{ArgGroup, Parser, ValueEnum};
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  npu-progress issues.json --next                         show the next pending issue
  npu-progress issues.json --fixed RND-4f1a9c             mark it fixed (re-checks the file first)
  npu-progress issues.json --fix DEV-0a82aa               apply its automatic fix, show the diff, mark it
  npu-progress issues.json --fix F64-1c0b2e --diff --unsafe-fixes   show an unsafe fix, change nothing
  npu-progress issues.json --skip RND-77b0d3 --reason \"runs in the CPU data loader\"
  npu-progress --check-complete                           exit 0 only when nothing is pending
  npu-progress issues.json --list --status pending --pattern P_RND
  npu-progress issues.json --show RND-4f1a9c --format json
  npu-progress issues.json --summary                      counts and time spent per issue
  npu-progress issues.json --scope 'python train.py --policy act'   port that training path only

Exit status: 0 ok; 1 pending issues (--check-complete), a fix the scanner still finds
(--fixed), or no fix applied (--fix); 2 usage error or a bad issues.json.";

/// Work through an issues.json one issue at a time.
#[derive(Debug, Clone, Parser)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "one bool per command-line flag"
)]
#[command(
    name = "npu-progress",
    version,
    about = "Work through the issues npu-scan found, one at a time, and track what is done",
    after_help = EXAMPLES,
    group(
        ArgGroup::new("action")
            .required(true)
            .args(["next", "fixed", "fix", "skip", "check_complete", "list", "show", "reopen", "summary", "scope"])
    )
)]
pub struct Args {
    /// The issues.json written by npu-scan.
    #[arg(default_value = "issues.json", value_name = "ISSUES_JSON")]
    pub file: PathBuf,

    /// Show the next pending issue: errors first, grouped by file, entry points first.
    #[arg(long)]
    pub next: bool,

    /// Mark an issue fixed, after re-scanning its file to check the finding is gone.
    #[arg(long, value_name = "ID")]
    pub fixed: Option<String>,

    /// Apply an issue's automatic fix (the one `npu-scan --fix` would apply), show the diff,
    /// re-check the file and mark the issue fixed.
    #[arg(long, value_name = "ID")]
    pub fix: Option<String>,

    /// With --fix: apply the fix even when it is unsafe (it changes precision, speed or which
    /// kernel runs; preview it with --diff first).
    #[arg(long)]
    pub unsafe_fixes: bool,

    /// With --fix: print the fix as a unified diff and change nothing (neither the file nor
    /// issues.json).
    #[arg(long)]
    pub diff: bool,

    /// Mark an issue a false positive; needs --reason. Performance issues cannot be skipped.
    #[arg(long, value_name = "ID")]
    pub skip: Option<String>,

    /// Why the issue is skipped (required with --skip); with --fixed or --reopen, a note.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,

    /// With --fixed: the scanner is wrong here; record the issue as skipped (with --reason, or a
    /// note saying none was given), not fixed, without re-checking it. A rescan keeps it skipped.
    #[arg(long)]
    pub force: bool,

    /// Exit 0 if no issue is pending; otherwise exit 1 and list the pending ones.
    #[arg(long)]
    pub check_complete: bool,

    /// List issues (in --next order); filter with --status and --pattern.
    #[arg(long)]
    pub list: bool,

    /// Show one issue in full: location, code, related places, history.
    #[arg(long, value_name = "ID")]
    pub show: Option<String>,

    /// Put a fixed or skipped issue back to pending.
    #[arg(long, value_name = "ID")]
    pub reopen: Option<String>,

    /// Counts per pattern and status, and the time spent on each issue.
    #[arg(long)]
    pub summary: bool,

    /// Set the port's scope to the training path of a launch command (`'python train.py
    /// --policy act'`): pending issues outside it become `out_of_scope`, issues it reaches are
    /// pending again. `none` drops the scope. Later scans keep it.
    #[arg(long, value_name = "LAUNCH")]
    pub scope: Option<String>,

    /// With --list or --next: only these statuses (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "STATUS")]
    pub status: Vec<StatusArg>,

    /// With --list or --next: only these patterns, e.g. `P_RND` or `RND` (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "PATTERN")]
    pub pattern: Vec<String>,

    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,

    /// Color in text output.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto, value_name = "WHEN")]
    pub color: ColorChoice,

    /// Print no notes or hints on stderr (errors and warnings still are).
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

pub use cli_support::ColorChoice;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusArg {
    Pending,
    Fixed,
    Skipped,
    /// Not scanned by the last scan (`--exclude`) or not reached by the scope's launch command:
    /// neither pending nor fixed.
    #[value(name = "out_of_scope")]
    OutOfScope,
}

impl StatusArg {
    pub fn status(self) -> issue_model::Status {
        match self {
            StatusArg::Pending => issue_model::Status::Pending,
            StatusArg::Fixed => issue_model::Status::Fixed,
            StatusArg::Skipped => issue_model::Status::Skipped,
            StatusArg::OutOfScope => issue_model::Status::OutOfScope,
        }
    }
}
