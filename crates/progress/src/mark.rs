//! The commands that change an issue's status: `--fixed`, `--skip`, `--reopen`.
//!
//! Each is one locked load → change → save (`issue_model::update`) on the file as it is on disk
//! at that moment, so two processes marking different issues both land. `--fixed` first
//! re-checks the fix with the scanner, without the lock, so other writers do not wait for the
//! scan; the change under the lock then finds the issue afresh.

use crate::commands::write_json;
use crate::excerpt;
use crate::recheck::{self, Recheck};
use crate::render;
use crate::select::find;
use crate::{Ctx, Error, Exit, Result};
use issue_model::{HistoryEntry, HistoryStatus, Issue, IssuesFile, Snapshot, Status};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// The result of a status change, as `--format json` prints it.
#[derive(Serialize)]
pub(crate) struct Marked {
    id: String,
    status: Status,
    changed: bool,
    /// Pending issues left in the file.
    pending: usize,
    message: String,
}

/// A change to one issue.
pub(crate) struct Change {
    pub status: Status,
    pub reason: Option<String>,
    pub history: HistoryStatus,
    pub note: Option<String>,
}

/// The start of the reason of an issue `--fixed --force` marked: skipped, not fixed.
pub(crate) const FORCED: &str = "--fixed --force (not re-checked):";

pub fn fixed(ctx: &mut Ctx<'_>, typed: &str) -> Result<Exit> {
    let note = ctx.args.reason.clone().filter(|r| !r.trim().is_empty());
    if ctx.args.force {
        // Nothing checked the fix: the issue is skipped with the user's word for it, which a
        // rescan keeps (a rescan makes a `fixed` issue it finds again pending).
        let why = note.as_deref().map_or_else(
            || format!("{FORCED} the scanner is wrong here (no --reason given)"),
            |n| format!("{FORCED} {}", n.trim()),
        );
        let marked = apply(ctx.path, None, typed, Status::Skipped, |_| {
            Ok(Change {
                status: Status::Skipped,
                reason: Some(why.clone()),
                history: HistoryStatus::Skipped,
                note: Some(why),
            })
        })?;
        return report(ctx, &marked);
    }
    let snapshot = crate::snapshot(ctx.path)?;
    let file = &snapshot.file;
    let issue = &file.issues[find(file, ctx.path, typed)?];
    if issue.status != Status::Fixed {
        match recheck::recheck(&file.root, &file.issues, ctx.path, issue) {
            Recheck::Gone => {}
            Recheck::Unchecked(why) => ctx.warn(&format!(
                "cannot re-check {}: {why}; marking it fixed anyway",
                issue.id
            ))?,
            Recheck::Present { root, found } => {
                return still_there(ctx, issue, &root, &found);
            }
            Recheck::Ignored(why) => {
                // A suppression is recorded as what it is.
                let marked = apply(ctx.path, Some(snapshot), typed, Status::Skipped, |_| {
                    Ok(Change {
                        status: Status::Skipped,
                        reason: Some(why.clone()),
                        history: HistoryStatus::Skipped,
                        note: Some(why),
                    })
                })?;
                return report(ctx, &marked);
            }
        }
    }
    let seen = Some(snapshot);
    let marked = apply(ctx.path, seen, typed, Status::Fixed, |_| {
        Ok(Change {
            status: Status::Fixed,
            reason: note.clone(),
            history: HistoryStatus::Fixed,
            note,
        })
    })?;
    report(ctx, &marked)
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
    let marked = apply(path, None, typed, Status::Skipped, |issue| {
        let Some(reason) = reason else {
            return Err(Error::SkipWithoutReason {
                id: issue.id.clone(),
                path: path.to_owned(),
            });
        };
        if issue.performance {
            return Err(Error::SkipPerformance {
                id: issue.id.clone(),
                pattern: issue.pattern.clone(),
                template: issue.fix_template.clone(),
                file: issue.file.clone(),
                line: issue.line,
                path: path.to_owned(),
                measured: issue.measured.is_some(),
            });
        }
        Ok(Change {
            status: Status::Skipped,
            reason: Some(reason.clone()),
            history: HistoryStatus::Skipped,
            note: Some(reason),
        })
    })?;
    report(ctx, &marked)
}

pub fn reopen(ctx: &mut Ctx<'_>, typed: &str) -> Result<Exit> {
    let note = ctx.args.reason.clone().filter(|r| !r.trim().is_empty());
    let marked = apply(ctx.path, None, typed, Status::Pending, |_| {
        Ok(Change {
            status: Status::Pending,
            reason: None,
            history: HistoryStatus::Reopened,
            note,
        })
    })?;
    report(ctx, &marked)
}

/// Under the lock, on the file as it is now: find issue `typed`; unless it is already `target`
/// (for a skip: with the same reason), let `change` say what to do, and write the change.
/// `seen` is the file as an earlier unlocked read found it, if there was one.
pub(crate) fn apply(
    path: &Path,
    seen: Option<Snapshot>,
    typed: &str,
    target: Status,
    change: impl FnOnce(&Issue) -> Result<Change>,
) -> Result<Marked> {
    // Checked first so that a mistyped path leaves no lock file behind.
    if !path.exists() {
        return Err(Error::Missing {
            path: path.to_owned(),
        });
    }
    let now = issue_model::now_rfc3339();
    let updated = issue_model::update_from(path, seen, |file| {
        let Some(mut file) = file else {
            let missing = Error::Missing {
                path: path.to_owned(),
            };
            return Ok((None, Err(missing)));
        };
        match change_issue(&mut file, path, typed, target, change, now) {
            Ok(marked) if marked.changed => Ok((Some(file), Ok(marked))),
            other => Ok((None, other)),
        }
    });
    updated?
}

/// Make the change to issue `typed` of `file`, as [`apply`] describes.
fn change_issue(
    file: &mut IssuesFile,
    path: &Path,
    typed: &str,
    target: Status,
    change: impl FnOnce(&Issue) -> Result<Change>,
    now: String,
) -> Result<Marked> {
    let index = find(file, path, typed)?;
    let issue = &mut file.issues[index];
    let already = issue.status == target && target != Status::Skipped;
    let change = if already { None } else { Some(change(issue)?) };
    let change =
        change.filter(|change| issue.status != change.status || issue.reason != change.reason);
    let changed = change.is_some();
    if let Some(change) = change {
        issue.status = change.status;
        issue.reason = change.reason;
        issue.history.push(HistoryEntry {
            at: now,
            status: change.history,
            note: change.note,
        });
    }
    let id = issue.id.clone();
    let message = if changed {
        format!("{id}: marked {target}")
    } else {
        format!("{id} is already {target}; nothing changed")
    };
    Ok(Marked {
        id,
        status: target,
        changed,
        pending: count_pending(&file.issues),
        message,
    })
}

/// Print what happened.
pub(crate) fn report(ctx: &mut Ctx<'_>, marked: &Marked) -> Result<Exit> {
    if ctx.json() {
        write_json(ctx, marked)?;
        return Ok(Exit::Ok);
    }
    let pending = marked.pending;
    writeln!(ctx.out, "{} ({pending} pending)", marked.message)?;
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
    let message = if issue.measured.is_some() {
        format!("{} is not fixed: npu-verify still measures it", issue.id)
    } else {
        format!("{} is not fixed: the scanner still finds it", issue.id)
    };
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
        "fix it as {} describes, then run --fixed again; if the scanner is wrong here (recorded as skipped, with your reason):\n  {} --fixed {} --force --reason '<why>'",
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
