//! `--scope LAUNCH`: set or change the port's scope (the training path of a launch command), or
//! drop it (`--scope none`). The scope's files are computed as `npu-scan --scope` does (the
//! project is read, no rule runs); then pending issues outside it become `out_of_scope`, and
//! issues out of scope only because of the former scope that it reaches are pending again.
//! Issues left out of a scan by `--exclude`, and measured issues, are not touched.

use crate::commands::write_json;
use crate::excerpt;
use crate::{Ctx, Error, Exit, Result};
use issue_model::{HistoryEntry, HistoryStatus, Scope, Status, is_scope_reason};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;

/// What `--scope` changed, as `--format json` prints it.
#[derive(Debug, Default, Serialize)]
struct Changed {
    /// The new scope; `null` when it was dropped.
    scope: Option<Scope>,
    /// Ids now out of scope.
    out_of_scope: Vec<String>,
    /// Ids pending again.
    pending_again: Vec<String>,
    /// Pending issues left in the file.
    pending: usize,
}

pub fn set(ctx: &mut Ctx<'_>, launch: &str) -> Result<Exit> {
    let file = ctx.load()?;
    let launch = launch.trim();
    let scope = if launch.is_empty() || launch.eq_ignore_ascii_case("none") {
        None
    } else {
        Some(compute(ctx, &file.root, launch)?)
    };
    let now = issue_model::now_rfc3339();
    let changed = issue_model::update(ctx.path, |previous| {
        let Some(mut file) = previous else {
            return Ok((None, Changed::default()));
        };
        let mut changed = Changed {
            scope: scope.clone(),
            ..Changed::default()
        };
        for issue in file.issues.iter_mut().filter(|i| i.measured.is_none()) {
            let inside = scope.as_ref().is_none_or(|s| s.contains(&issue.file));
            let by_scope =
                issue.status == Status::OutOfScope && is_scope_reason(issue.reason.as_deref());
            let (status, reason, note) = match (&scope, issue.status, inside) {
                (Some(s), Status::Pending, false) => {
                    let why = s.reason();
                    (Status::OutOfScope, Some(why.clone()), why)
                }
                (Some(s), Status::OutOfScope, false) if by_scope => {
                    // Still outside: it says which scope leaves it out, with no new history.
                    issue.reason = Some(s.reason());
                    continue;
                }
                (_, Status::OutOfScope, true) if by_scope => {
                    let note = match &scope {
                        Some(s) => format!("in scope of `{}`", s.launch),
                        None => "the scope was dropped (`--scope none`)".to_owned(),
                    };
                    (Status::Pending, None, note)
                }
                _ => continue,
            };
            let history = if status == Status::Pending {
                changed.pending_again.push(issue.id.clone());
                HistoryStatus::Reopened
            } else {
                changed.out_of_scope.push(issue.id.clone());
                HistoryStatus::OutOfScope
            };
            issue.status = status;
            issue.reason = reason;
            issue.history.push(HistoryEntry {
                at: now.clone(),
                status: history,
                note: Some(note),
            });
        }
        file.scope.clone_from(&scope);
        changed.pending = file
            .issues
            .iter()
            .filter(|i| i.status == Status::Pending)
            .count();
        Ok((Some(file), changed))
    })?;
    if ctx.json() {
        write_json(ctx, &changed)?;
        return Ok(Exit::Ok);
    }
    let mut text = match &changed.scope {
        Some(s) => format!(
            "scope: `{}` (entry {}): {} Python files in scope{}\n",
            s.launch,
            s.entry,
            s.files.len(),
            if s.executed.is_empty() {
                String::new()
            } else {
                format!(
                    ", {} of them executed by the recorded verify run",
                    s.executed.len()
                )
            }
        ),
        None => "scope: none (the whole project)\n".to_owned(),
    };
    for note in changed.scope.iter().flat_map(|s| &s.notes) {
        let _ = writeln!(text, "  {note}");
    }
    let _ = writeln!(
        text,
        "{} issues now out of scope, {} pending again; {} pending in all.",
        changed.out_of_scope.len(),
        changed.pending_again.len(),
        changed.pending
    );
    ctx.out.write_all(text.as_bytes())?;
    Ok(Exit::Ok)
}

/// The scope of `launch` in the project the issues file was scanned from.
fn compute(ctx: &Ctx<'_>, root: &str, launch: &str) -> Result<Scope> {
    let candidates = excerpt::root_candidates(root, ctx.path);
    let Some(dir): Option<PathBuf> = candidates.iter().find(|p| p.exists()).cloned() else {
        let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
        return Err(Error::Usage(format!(
            "--scope: the project `{root}` of {} is not at {}; run this where npu-scan ran",
            ctx.path.display(),
            looked.join(" or ")
        )));
    };
    let project = scan::facts(&dir).map_err(|e| {
        Error::Usage(format!(
            "--scope: cannot read the project {}: {e}",
            dir.display()
        ))
    })?;
    scan::scope::of(&project, launch, root, &dir)
        .map_err(|why| Error::Usage(format!("--scope `{launch}`: {why}")))
}
