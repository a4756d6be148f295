//! The commands that change an issue's status: `--fixed`, `--skip`, `--reopen`.
//!
//! Each reads, decides and writes in one pass under the lock (`issue_model::update_issue`), on the
//! file as it is on disk at that moment, so two processes marking different issues both land
//! and a large file is parsed once. `--fixed` re-scans the issue's file under the lock (one
//! file is quick); a project-level finding, whose re-check scans the whole project, is
//! re-checked first, without the lock, so other writers do not wait for that scan.

use crate::commands::write_json;
use crate::excerpt;
use crate::recheck::{self, Recheck};
use crate::render;
use crate::select::find;
use crate::{Ctx, Error, Exit, Result};
use issue_model::{HistoryEntry, HistoryStatus, Issue, Reading, Status};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// The result of a status change, as `--format json` prints it.
#[derive(Serialize)]
struct Marked<'a> {
    id: &'a str,
    status: Status,
    changed: bool,
    /// Pending issues left in the file.
    pending: usize,
    message: &'a str,
}

/// A change to one issue.
struct Change {
    status: Status,
    reason: Option<String>,
    history: HistoryStatus,
    note: Option<String>,
}

/// What a command decides about the issue it was given.
enum Decision {
    Apply(Change),
    /// Refused with an error (exit 2).
    Refuse(Error),
    /// `--fixed` refused: the scanner still finds these (under `root`).
    StillThere {
        root: String,
        found: Vec<Issue>,
    },
    /// `--fixed` of a project-level finding: re-check it outside the lock first.
    ScanProject,
    /// The file does not load (`update_issue` returns why).
    NotLoaded,
}

/// What happened, taken out of the locked update.
enum Outcome {
    /// Issue `id` is `status` now: marked so by this command (`changed`), or already.
    Marked {
        id: String,
        status: Status,
        changed: bool,
    },
    Refused(Error),
    StillThere {
        issue: Box<Issue>,
        root: String,
        found: Vec<Issue>,
    },
    ScanProject,
}

pub fn fixed(ctx: &mut Ctx<'_>, typed: &str) -> Result<Exit> {
    let mut note = ctx.args.reason.clone().filter(|r| !r.trim().is_empty());
    if ctx.args.force {
        let forced = "marked fixed with --force";
        note = Some(note.map_or_else(|| forced.to_owned(), |n| format!("{n} ({forced})")));
        let outcome = decide_and_apply(ctx.path, typed, Status::Fixed, |_, _| {
            Decision::Apply(fixed_change(note))
        })?;
        return report(ctx, outcome);
    }
    // First try: re-check under the lock, on the file as read for the change (one parse).
    let path = ctx.path;
    let mut warning = None;
    let outcome = decide_and_apply(path, typed, Status::Fixed, |reading, issue| {
        if recheck::is_project_level(&issue.pattern) {
            return Decision::ScanProject;
        }
        let others = || reading.file().map(|file| file.issues.as_slice());
        let Some(root) = reading.root() else {
            return Decision::NotLoaded;
        };
        recheck_decision(root, others, path, issue, &mut warning, note.clone())
    })?;
    if !matches!(outcome, (Outcome::ScanProject, _)) {
        if let Some(why) = warning {
            ctx.warn(&why)?;
        }
        return report(ctx, outcome);
    }
    // A project-level finding: scan the project before taking the lock, then make the change
    // on the file as it is then.
    let file = ctx.load()?;
    let issue = &file.issues[find(&file, ctx.path, typed)?];
    if issue.status != Status::Fixed {
        let mut warning = None;
        let others = || Some(file.issues.as_slice());
        match recheck_decision(&file.root, others, path, issue, &mut warning, None) {
            Decision::StillThere { root, found } => {
                return still_there(ctx, issue, &root, &found);
            }
            _ => {
                if let Some(why) = warning {
                    ctx.warn(&why)?;
                }
            }
        }
    }
    let outcome = decide_and_apply(ctx.path, typed, Status::Fixed, |_, _| {
        Decision::Apply(fixed_change(note))
    })?;
    report(ctx, outcome)
}

/// The change `--fixed` makes, with its note.
fn fixed_change(note: Option<String>) -> Change {
    Change {
        status: Status::Fixed,
        reason: note.clone(),
        history: HistoryStatus::Fixed,
        note,
    }
}

/// Re-check `issue`: fixed when the scanner no longer finds it, or (with a warning in
/// `warning`) when the re-check cannot run.
fn recheck_decision<'f>(
    root: &str,
    others: impl FnOnce() -> Option<&'f [Issue]>,
    path: &Path,
    issue: &Issue,
    warning: &mut Option<String>,
    note: Option<String>,
) -> Decision {
    match recheck::recheck(root, others, path, issue) {
        Recheck::Gone => {}
        Recheck::Unchecked(why) => {
            *warning = Some(format!(
                "cannot re-check {}: {why}; marking it fixed anyway",
                issue.id
            ));
        }
        Recheck::Present { root, found } => return Decision::StillThere { root, found },
    }
    Decision::Apply(fixed_change(note))
}

pub fn skip(ctx: &mut Ctx<'_>, typed: &str) -> Result<Exit> {
    let reason = ctx
        .args
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_owned);
    let path = ctx.path;
    let outcome = decide_and_apply(path, typed, Status::Skipped, |_, issue| {
        let Some(reason) = reason.clone() else {
            return Decision::Refuse(Error::SkipWithoutReason {
                id: issue.id.clone(),
                path: path.to_owned(),
            });
        };
        if issue.performance {
            return Decision::Refuse(Error::SkipPerformance {
                id: issue.id.clone(),
                pattern: issue.pattern.clone(),
                template: issue.fix_template.clone(),
                file: issue.file.clone(),
                line: issue.line,
                path: path.to_owned(),
            });
        }
        Decision::Apply(Change {
            status: Status::Skipped,
            reason: Some(reason.clone()),
            history: HistoryStatus::Skipped,
            note: Some(reason),
        })
    })?;
    report(ctx, outcome)
}

pub fn reopen(ctx: &mut Ctx<'_>, typed: &str) -> Result<Exit> {
    let note = ctx.args.reason.clone().filter(|r| !r.trim().is_empty());
    let outcome = decide_and_apply(ctx.path, typed, Status::Pending, |_, _| {
        Decision::Apply(Change {
            status: Status::Pending,
            reason: None,
            history: HistoryStatus::Reopened,
            note: note.clone(),
        })
    })?;
    report(ctx, outcome)
}

/// Under the lock: find issue `typed`; if it is not already `target` (for a skip: with the
/// same reason), let `decide` say what to do, and write the change. Returns what happened and
/// how many issues are pending now.
///
/// `decide` sees the issue and the file through an [`issue_model::Reading`]: in a large file,
/// the issue is read from its own line and the change written while the rest of the file is
/// still being parsed and validated ([`issue_model::update_issue`]).
fn decide_and_apply(
    path: &Path,
    typed: &str,
    target: Status,
    decide: impl FnOnce(&Reading<'_>, &Issue) -> Decision,
) -> Result<(Outcome, usize)> {
    if !path.exists() {
        return Err(Error::Missing {
            path: path.to_owned(),
        });
    }
    let now = issue_model::now_rfc3339();
    // The file does not load: `update_issue` returns that error rather than this.
    let not_loaded = || {
        Outcome::Refused(Error::Usage(format!(
            "internal: {} did not load, yet no error was reported",
            path.display()
        )))
    };
    let marked = |id: String, changed: bool| Outcome::Marked {
        id,
        status: target,
        changed,
    };
    let updated = issue_model::update_issue(path, |reading| {
        let found = match reading.issue(typed.trim()) {
            Some(found) => Ok(found),
            // Not typed exactly: ignoring case, or the closest ids (needs every id).
            None => match reading.file() {
                Some(file) => find(file, path, typed).map(|n| (n, file.issues[n].clone())),
                None => return Ok((None, not_loaded())),
            },
        };
        let (index, mut issue) = match found {
            Ok(found) => found,
            Err(e) => return Ok((None, Outcome::Refused(e))),
        };
        let status_only = issue.status == target && target != Status::Skipped;
        if status_only {
            return Ok((None, marked(issue.id, false)));
        }
        let change = match decide(reading, &issue) {
            Decision::Apply(change) => change,
            Decision::Refuse(error) => return Ok((None, Outcome::Refused(error))),
            Decision::StillThere { root, found } => {
                let issue = Box::new(issue);
                return Ok((None, Outcome::StillThere { issue, root, found }));
            }
            Decision::ScanProject => return Ok((None, Outcome::ScanProject)),
            Decision::NotLoaded => return Ok((None, not_loaded())),
        };
        if issue.status == change.status && issue.reason == change.reason {
            return Ok((None, marked(issue.id, false)));
        }
        issue.status = change.status;
        issue.reason = change.reason;
        issue.history.push(HistoryEntry {
            at: now,
            status: change.history,
            note: change.note,
        });
        let id = issue.id.clone();
        Ok((Some((index, issue)), marked(id, true)))
    });
    let (outcome, file) = match updated {
        Ok(updated) => updated,
        Err(issue_model::Error::Read { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            return Err(Error::Missing {
                path: path.to_owned(),
            });
        }
        Err(e) => return Err(e.into()),
    };
    let pending = count_pending(&file.issues);
    issue_model::free_in_background(file, None);
    Ok((outcome, pending))
}

/// Print what happened; map it to an exit status.
fn report(ctx: &mut Ctx<'_>, (outcome, pending): (Outcome, usize)) -> Result<Exit> {
    let (id, status, changed) = match outcome {
        Outcome::Refused(error) => return Err(error),
        Outcome::StillThere { issue, root, found } => {
            return still_there(ctx, &issue, &root, &found);
        }
        Outcome::ScanProject => {
            return Err(Error::Usage(
                "internal: a project-level re-check was not run".to_owned(),
            ));
        }
        Outcome::Marked {
            id,
            status,
            changed,
        } => (id, status, changed),
    };
    let message = if changed {
        format!("{id}: marked {status}")
    } else {
        format!("{id} is already {status}; nothing changed")
    };
    if ctx.json() {
        write_json(
            ctx,
            &Marked {
                id: &id,
                status,
                changed,
                pending,
                message: &message,
            },
        )?;
        return Ok(Exit::Ok);
    }
    writeln!(ctx.out, "{message} ({pending} pending)")?;
    if pending > 0 {
        ctx.note(&format!("next: {} --next", ctx.command()))?;
    } else {
        ctx.note(&format!(
            "nothing pending; confirm with: {} --check-complete",
            ctx.command()
        ))?;
    }
    Ok(Exit::Ok)
}

/// Refuse `--fixed`: show what the scanner still finds.
fn still_there(ctx: &mut Ctx<'_>, issue: &Issue, root: &str, found: &[Issue]) -> Result<Exit> {
    let message = format!("{} is not fixed: the scanner still finds it", issue.id);
    if ctx.json() {
        #[derive(Serialize)]
        struct Refused<'a> {
            id: &'a str,
            status: Status,
            changed: bool,
            message: &'a str,
            still_found: &'a [Issue],
        }
        write_json(
            ctx,
            &Refused {
                id: &issue.id,
                status: issue.status,
                changed: false,
                message: &message,
                still_found: found,
            },
        )?;
        return Ok(Exit::Findings);
    }
    let mut text = format!("{message}:\n\n");
    for finding in found {
        text.push_str(&render::head(ctx.style, finding));
        if let Ok(code) = excerpt::read(root, ctx.path, finding) {
            text.push('\n');
            text.push_str(&render::excerpt(ctx.style, &code));
        }
        text.push('\n');
    }
    let _ = writeln!(
        text,
        "fix it as {} describes, then run --fixed again; if the scanner is wrong here:\n  {} --fixed {} --force",
        issue.fix_template,
        ctx.command(),
        issue.id
    );
    ctx.out.write_all(text.as_bytes())?;
    Ok(Exit::Findings)
}

fn count_pending(issues: &[Issue]) -> usize {
    issues
        .iter()
        .filter(|i| i.status == Status::Pending)
        .count()
}
