//! `npu-progress`: works through an `issues.json` one issue at a time.
//!
//! It shows the next pending issue with the code around it, marks issues fixed (after
//! re-scanning the file to check that the finding is gone), skipped (with a reason) or pending
//! again, checks that nothing is left, and summarizes the work, including the time spent on each
//! issue. Every change goes through `issue_model::update` (locked, atomic). It must not find
//! issues itself (the scanner does) and never writes a file it could not read cleanly.

mod autofix;
pub mod cli;
mod commands;
pub mod error;
mod excerpt;
mod mark;
mod recheck;
pub mod render;
mod scope;
mod select;
mod timing;

pub use cli::Args;
pub use error::{Error, Result};

use cli::Format;
use issue_model::IssuesFile;
use render::Style;
use std::io::Write;
use std::path::Path;

/// How a command that ran to the end went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done; exit status 0.
    Ok,
    /// Pending issues (`--check-complete`) or a fix the scanner still finds; exit status 1.
    Findings,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Findings => 1,
        }
    }
}

/// What a command needs: its arguments and where its output goes.
pub(crate) struct Ctx<'a> {
    pub args: &'a Args,
    pub path: &'a Path,
    pub style: Style,
    pub out: &'a mut dyn Write,
    pub err: &'a mut dyn Write,
}

impl Ctx<'_> {
    pub fn json(&self) -> bool {
        self.args.format == Format::Json
    }

    /// A note on stderr (hidden by `--quiet`).
    pub fn note(&mut self, text: &str) -> Result<()> {
        if !self.args.quiet {
            writeln!(self.err, "npu-progress: {text}")?;
        }
        Ok(())
    }

    /// A warning on stderr (always shown).
    pub fn warn(&mut self, text: &str) -> Result<()> {
        writeln!(self.err, "npu-progress: warning: {text}")?;
        Ok(())
    }

    /// The issues.json as the user typed it, quoted for a shell if needed, for hints.
    pub fn file_arg(&self) -> String {
        shell_word(&self.path.display().to_string())
    }

    /// The command that reruns this tool on this issues.json, for hints: `npu-progress FILE`, or
    /// `python <skill dir>/scripts/progress.py FILE` when the bundle's launcher started us.
    pub fn command(&self) -> String {
        format!("{} {}", invoked_as(), self.file_arg())
    }

    /// Load and validate the issues.json (no lock: writes are atomic renames).
    pub fn load(&self) -> Result<IssuesFile> {
        load(self.path)
    }
}

/// How the user runs this tool: the bundle's `scripts/progress.py` launcher puts its own command
/// line in `NPU_PATCHER_INVOKED_AS`; otherwise `npu-progress`.
pub fn invoked_as() -> String {
    std::env::var("NPU_PATCHER_INVOKED_AS")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "npu-progress".to_owned())
}

/// `text` quoted for a POSIX shell when it needs it.
fn shell_word(text: &str) -> String {
    if text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-/+:@,".contains(c))
    {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// Load `path`, saying how to create it when it does not exist.
pub(crate) fn load(path: &Path) -> Result<IssuesFile> {
    Ok(snapshot(path)?.file)
}

/// [`load`], keeping the bytes for a later locked update.
pub(crate) fn snapshot(path: &Path) -> Result<issue_model::Snapshot> {
    match issue_model::snapshot(path) {
        Err(issue_model::Error::Read { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            Err(Error::Missing {
                path: path.to_owned(),
            })
        }
        other => Ok(other?),
    }
}

/// Run the command `args` asks for, writing its product to `out` and notes to `err`.
pub fn run(args: &Args, out: &mut dyn Write, err: &mut dyn Write) -> Result<Exit> {
    check_combinations(args)?;
    let color = args.color.enabled(&std::io::stdout());
    let mut ctx = Ctx {
        args,
        path: &args.file,
        style: Style::new(color && args.format == Format::Text),
        out,
        err,
    };
    if args.next {
        commands::next(&mut ctx)
    } else if let Some(id) = &args.fixed {
        mark::fixed(&mut ctx, id)
    } else if let Some(id) = &args.fix {
        autofix::fix(&mut ctx, id)
    } else if let Some(id) = &args.skip {
        mark::skip(&mut ctx, id)
    } else if let Some(id) = &args.reopen {
        mark::reopen(&mut ctx, id)
    } else if args.check_complete {
        commands::check_complete(&mut ctx)
    } else if args.list {
        commands::list(&mut ctx)
    } else if let Some(id) = &args.show {
        commands::show(&mut ctx, id)
    } else if args.summary {
        commands::summary(&mut ctx)
    } else if let Some(launch) = &args.scope {
        scope::set(&mut ctx, launch)
    } else {
        Err(Error::Usage(
            "say what to do: --next, --fixed ID, --fix ID, --skip ID --reason TEXT, --check-complete, --list, --show ID, --reopen ID, --summary or --scope LAUNCH".to_owned(),
        ))
    }
}

/// Flags that only make sense with some commands.
fn check_combinations(args: &Args) -> Result<()> {
    let filtering = !args.status.is_empty() || !args.pattern.is_empty();
    if filtering && !(args.list || args.next) {
        return Err(Error::Usage(
            "--status and --pattern go with --list or --next".to_owned(),
        ));
    }
    if !args.status.is_empty() && args.next {
        return Err(Error::Usage(
            "--next only shows pending issues; use --pattern to narrow it, or --list --status"
                .to_owned(),
        ));
    }
    if args.unsafe_fixes && args.fix.is_none() {
        return Err(Error::Usage("--unsafe-fixes goes with --fix".to_owned()));
    }
    if args.diff && args.fix.is_none() {
        return Err(Error::Usage(
            "--diff goes with --fix: `npu-progress issues.json --fix ID --diff`".to_owned(),
        ));
    }
    if args.force && args.fixed.is_none() {
        return Err(Error::Usage("--force goes with --fixed".to_owned()));
    }
    if args.reason.is_some() && args.skip.is_none() && args.fixed.is_none() && args.reopen.is_none()
    {
        return Err(Error::Usage(
            "--reason goes with --skip, --fixed or --reopen".to_owned(),
        ));
    }
    Ok(())
}
