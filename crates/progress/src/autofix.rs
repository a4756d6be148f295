//! `--fix ID`: apply one issue's automatic fix, show the diff, re-check, mark it fixed; with
//! `--diff`, show the diff only and change nothing.
//!
//! The fix applied is the one a fresh scan of the file computes now (so it matches the file
//! as it is), through the same code as `npu-scan --fix`: re-parsed before it is written,
//! written atomically, encoding and line endings kept.

use crate::commands::write_json;
use crate::excerpt;
use crate::mark::{self, Change};
use crate::recheck::{self, Recheck};
use crate::select::find;
use crate::{Ctx, Exit, Result};
use issue_model::{Applicability, HistoryStatus, Status};
use serde::Serialize;

/// What `--fix --format json` prints when no fix was applied.
#[derive(Serialize)]
struct NotFixed<'a> {
    id: &'a str,
    changed: bool,
    message: &'a str,
}

pub fn fix(ctx: &mut Ctx<'_>, typed: &str) -> Result<Exit> {
    let snapshot = crate::snapshot(ctx.path)?;
    let file = &snapshot.file;
    let issue = &file.issues[find(file, ctx.path, typed)?];
    let id = issue.id.clone();
    if issue.status != Status::Pending {
        let message = format!("{id} is already {}; nothing to fix", issue.status);
        return refuse(ctx, &id, &message, Exit::Ok);
    }
    let Some((root, _)) = excerpt::locate(&file.root, ctx.path, &issue.file) else {
        let message = format!("{id}: cannot find {} under the scanned root", issue.file);
        return refuse(ctx, &id, &message, Exit::Findings);
    };
    let current = match recheck::current(&root, issue) {
        Ok(current) => current,
        Err(why) => {
            let message = format!("{id}: cannot scan {} again: {why}", issue.file);
            return refuse(ctx, &id, &message, Exit::Findings);
        }
    };
    let command = ctx.command();
    let Some(current) = current else {
        let message = format!(
            "{id}: the scanner no longer finds it, so there is nothing to fix; mark it with: {command} --fixed {id}"
        );
        return refuse(ctx, &id, &message, Exit::Findings);
    };
    let Some(fix) = &current.fix else {
        let message = format!(
            "{id} has no automatic fix: fix it by hand as {} describes, then run {command} --fixed {id}",
            issue.fix_template
        );
        return refuse(ctx, &id, &message, Exit::Findings);
    };
    if fix.applicability == Applicability::Unsafe && !ctx.args.unsafe_fixes {
        let message = format!(
            "{id}'s fix is unsafe ({}): it changes what the code does; read {}, preview it with: {command} --fix {id} --diff --unsafe-fixes, and apply it with: {command} --fix {id} --unsafe-fixes",
            fix.message, issue.fix_template
        );
        return refuse(ctx, &id, &message, Exit::Findings);
    }
    if let Some(why) =
        scan::fix::missing_prerequisite(&root, &issue.pattern, &root.to_string_lossy())
    {
        let message = format!("{id}: the fix was not applied: {why}");
        return refuse(ctx, &id, &message, Exit::Findings);
    }
    let planned = [scan::fix::Planned {
        key: &current.fingerprint,
        fix,
    }];
    let preview = ctx.args.diff;
    let outcome = scan::fix::apply_to_file(&root, &issue.file, &planned, !preview);
    if outcome.applied.is_empty() {
        let why = outcome
            .dropped
            .first()
            .map_or("it overlaps another edit", |(_, why)| why.as_str());
        let message = if preview {
            format!("{id}: the fix cannot be applied: {why}")
        } else {
            format!("{id}: the fix was not applied: {why}")
        };
        return refuse(ctx, &id, &message, Exit::Findings);
    }
    if preview {
        let unsafe_flag = if fix.applicability == Applicability::Unsafe {
            " --unsafe-fixes"
        } else {
            ""
        };
        let apply = format!("{command} --fix {id}{unsafe_flag}");
        if ctx.json() {
            #[derive(Serialize)]
            struct Preview<'a> {
                id: &'a str,
                changed: bool,
                applicability: Applicability,
                message: &'a str,
                diff: &'a str,
                apply: &'a str,
            }
            write_json(
                ctx,
                &Preview {
                    id: &id,
                    changed: false,
                    applicability: fix.applicability,
                    message: &fix.message,
                    diff: &String::from_utf8_lossy(&outcome.diff),
                    apply: &apply,
                },
            )?;
        } else {
            ctx.out.write_all(&outcome.diff)?;
            ctx.note(&format!(
                "{id}: {} fix, not applied ({}); apply it with: {apply}",
                fix.applicability.as_str(),
                fix.message
            ))?;
        }
        return Ok(Exit::Ok);
    }
    if !ctx.json() {
        ctx.out.write_all(&outcome.diff)?;
    }
    match recheck::recheck(&file.root, &file.issues, ctx.path, issue) {
        Recheck::Gone | Recheck::Unchecked(_) | Recheck::Ignored(_) => {}
        Recheck::Present { .. } => {
            let message = format!(
                "{id}: the fix was applied ({}), but the scanner still finds the issue; finish it by hand as {} describes",
                fix.message, issue.fix_template
            );
            return refuse(ctx, &id, &message, Exit::Findings);
        }
    }
    let note = format!("fixed by --fix: {}", fix.message);
    let marked = mark::apply(ctx.path, Some(snapshot), typed, Status::Fixed, |_| {
        Ok(Change {
            status: Status::Fixed,
            reason: None,
            history: HistoryStatus::Fixed,
            note: Some(note),
        })
    })?;
    if ctx.json() {
        #[derive(Serialize)]
        struct Fixed<'a> {
            #[serde(flatten)]
            marked: &'a mark::Marked,
            diff: &'a str,
        }
        write_json(
            ctx,
            &Fixed {
                marked: &marked,
                diff: &String::from_utf8_lossy(&outcome.diff),
            },
        )?;
        return Ok(Exit::Ok);
    }
    mark::report(ctx, &marked)
}

/// Say why nothing was fixed.
fn refuse(ctx: &mut Ctx<'_>, id: &str, message: &str, exit: Exit) -> Result<Exit> {
    if ctx.json() {
        write_json(
            ctx,
            &NotFixed {
                id,
                changed: false,
                message,
            },
        )?;
    } else {
        writeln!(ctx.out, "{message}")?;
    }
    Ok(exit)
}
