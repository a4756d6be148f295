//! The commands that change an issue's status: `--fixed`, `--skip`, `--reopen`.
//!
//! Each decides on a loaded copy, then applies the change under the lock to the file as it is
//! on disk at that moment, so two processes marking different issues both land.

use crate::commands::write_json;
use crate::excerpt;
use crate::recheck::{self, Recheck};
use crate::render;
use crate::select::find;
use crate::{Ctx, Error, Exit, Result};
use issue_model::{HistoryEntry, HistoryStatus, Issue, Status};
use serde::Serialize;
use std::fmt::Write as _;

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

/// A requested change to one issue.
struct Change {
    status: Status,
    reason: Option<String>,
    history: HistoryStatus,
    note: Option<String>,
}

pub fn fixed(ctx: &mut Ctx<'_>, typed: &str) -> Result<Exit> {
    let file = ctx.load()?;
    let issue = &file.issues[find(&file, ctx.path, typed)?];
    let mut note = ctx.args.reason.clone().filter(|r| !r.trim().is_empty());
    if issue.status != Status::Fixed {
        if ctx.args.force {
            let forced = "marked fixed with --force";
            note = Some(note.map_or_else(|| forced.to_owned(), |n| format!("{n} ({forced})")));
        } else {
            match recheck::recheck(&file, ctx.path, issue) {
                Recheck::Gone => {}
                Recheck::Unchecked(why) => {
                    ctx.warn(&format!(
                        "cannot re-check {}: {why}; marking it fixed anyway",
                        issue.id
                    ))?;
                }
                Recheck::Present { root, found } => {
                    return still_there(ctx, issue, &root, &found);
                }
            }
        }
    }
    let reason = note.clone();
    apply(
        ctx,
        &issue.id,
        &Change {
            status: Status::Fixed,
            reason,
            history: HistoryStatus::Fixed,
            note,
        },
    )
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
        "fix it as {} describes, then run --fixed again; if the scanner is wrong here:\n  npu-progress {} --fixed {} --force",
        issue.fix_template,
        ctx.file_arg(),
        issue.id
    );
    ctx.out.write_all(text.as_bytes())?;
    Ok(Exit::Findings)
}

pub fn skip(ctx: &mut Ctx<'_>, typed: &str) -> Result<Exit> {
    let file = ctx.load()?;
    let issue = &file.issues[find(&file, ctx.path, typed)?];
    let Some(reason) = ctx
        .args
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty())
    else {
        return Err(Error::SkipWithoutReason {
            id: issue.id.clone(),
            path: ctx.path.to_owned(),
        });
    };
    if issue.performance {
        return Err(Error::SkipPerformance {
            id: issue.id.clone(),
            pattern: issue.pattern.clone(),
            template: issue.fix_template.clone(),
            file: issue.file.clone(),
            line: issue.line,
            path: ctx.path.to_owned(),
        });
    }
    apply(
        ctx,
        &issue.id,
        &Change {
            status: Status::Skipped,
            reason: Some(reason.to_owned()),
            history: HistoryStatus::Skipped,
            note: Some(reason.to_owned()),
        },
    )
}

pub fn reopen(ctx: &mut Ctx<'_>, typed: &str) -> Result<Exit> {
    let file = ctx.load()?;
    let issue = &file.issues[find(&file, ctx.path, typed)?];
    let note = ctx.args.reason.clone().filter(|r| !r.trim().is_empty());
    apply(
        ctx,
        &issue.id,
        &Change {
            status: Status::Pending,
            reason: None,
            history: HistoryStatus::Reopened,
            note,
        },
    )
}

/// What happened under the lock.
enum Applied {
    Changed {
        pending: usize,
    },
    /// Already in the requested state; nothing written.
    Already {
        pending: usize,
    },
    /// The issue vanished between reading and locking (a rescan ran meanwhile).
    Gone(Error),
}

/// Apply `change` to issue `id` under the lock, and report.
fn apply(ctx: &mut Ctx<'_>, id: &str, change: &Change) -> Result<Exit> {
    let now = issue_model::now_rfc3339();
    let path = ctx.path.to_owned();
    let applied = issue_model::update(ctx.path, |file| {
        let Some(mut file) = file else {
            return Ok((None, Applied::Gone(Error::Missing { path })));
        };
        let index = match find(&file, &path, id) {
            Ok(index) => index,
            Err(e) => return Ok((None, Applied::Gone(e))),
        };
        let issue = &mut file.issues[index];
        let same = issue.status == change.status
            && (change.status != Status::Skipped || issue.reason == change.reason);
        if same {
            let pending = count_pending(&file.issues);
            return Ok((None, Applied::Already { pending }));
        }
        issue.status = change.status;
        issue.reason.clone_from(&change.reason);
        issue.history.push(HistoryEntry {
            at: now,
            status: change.history,
            note: change.note.clone(),
        });
        let pending = count_pending(&file.issues);
        Ok((Some(file), Applied::Changed { pending }))
    })?;
    let status = change.status;
    let (changed, pending, message) = match applied {
        Applied::Gone(error) => return Err(error),
        Applied::Changed { pending } => (true, pending, format!("{id}: marked {status}")),
        Applied::Already { pending } => (
            false,
            pending,
            format!("{id} is already {status}; nothing changed"),
        ),
    };
    if ctx.json() {
        write_json(
            ctx,
            &Marked {
                id,
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
        ctx.note(&format!("next: npu-progress {} --next", ctx.file_arg()))?;
    } else {
        ctx.note(&format!(
            "nothing pending; confirm with: npu-progress {} --check-complete",
            ctx.file_arg()
        ))?;
    }
    Ok(Exit::Ok)
}

fn count_pending(issues: &[Issue]) -> usize {
    issues
        .iter()
        .filter(|i| i.status == Status::Pending)
        .count()
}
