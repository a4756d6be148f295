//! The commands that show issues: `--next`, `--show`, `--list`, `--summary`, `--check-complete`.
//! Only `--next` writes, to record when an issue was first shown.

use crate::excerpt::{self, Excerpt};
use crate::render;
use crate::select::{Filter, WorkOrder, find};
use crate::timing::{human, needs_shown, seconds_spent};
use crate::{Ctx, Error, Exit, Result};
use issue_model::{HistoryEntry, HistoryStatus, Issue, IssuesFile, Status};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// What `--next` found, taken out of the locked update.
struct Pick {
    issue: Option<Issue>,
    remaining: usize,
    pending_total: usize,
    root: String,
}

fn pick(file: &IssuesFile, filter: &Filter) -> (Option<usize>, usize, usize) {
    let order = WorkOrder::new(&file.issues);
    let first = order.first(&file.issues, filter);
    let remaining = file.issues.iter().filter(|i| filter.accepts(i)).count();
    let pending_total = file
        .issues
        .iter()
        .filter(|i| i.status == Status::Pending)
        .count();
    (first, remaining, pending_total)
}

#[derive(Serialize)]
struct NextJson<'a> {
    remaining: usize,
    issue: Option<&'a Issue>,
    excerpt: Option<&'a Excerpt>,
    excerpt_error: Option<&'a str>,
}

pub fn next(ctx: &mut Ctx<'_>) -> Result<Exit> {
    if !ctx.path.exists() {
        return Err(Error::Missing {
            path: ctx.path.to_owned(),
        });
    }
    let filter = Filter::new(&[], &ctx.args.pattern).pending_only();
    let now = issue_model::now_rfc3339();
    let recorded = issue_model::update(ctx.path, |file| {
        let Some(mut file) = file else {
            return Ok((None, None));
        };
        let (first, remaining, pending_total) = pick(&file, &filter);
        let record = first.filter(|&n| needs_shown(&file.issues[n]));
        if let Some(n) = record {
            file.issues[n].history.push(HistoryEntry {
                at: now.clone(),
                status: HistoryStatus::Shown,
                note: None,
            });
        }
        let pick = Pick {
            issue: first.map(|n| file.issues[n].clone()),
            remaining,
            pending_total,
            root: file.root.clone(),
        };
        Ok((record.map(|_| file), Some(pick)))
    });
    let pick = match recorded {
        Ok(Some(pick)) => pick,
        Ok(None) => {
            return Err(Error::Missing {
                path: ctx.path.to_owned(),
            });
        }
        Err(
            e @ (issue_model::Error::ReadOnly { .. }
            | issue_model::Error::Write { .. }
            | issue_model::Error::Lock { .. }
            | issue_model::Error::Locked { .. }
            | issue_model::Error::ChangedConcurrently { .. }),
        ) => {
            ctx.warn(&format!("cannot record when this issue was shown: {e}"))?;
            let file = ctx.load()?;
            let (first, remaining, pending_total) = pick(&file, &filter);
            Pick {
                issue: first.map(|n| file.issues[n].clone()),
                remaining,
                pending_total,
                root: file.root.clone(),
            }
        }
        Err(e) => return Err(e.into()),
    };

    let Some(issue) = &pick.issue else {
        if ctx.json() {
            write_json(
                ctx,
                &NextJson {
                    remaining: 0,
                    issue: None,
                    excerpt: None,
                    excerpt_error: None,
                },
            )?;
        } else if ctx.args.pattern.is_empty() {
            writeln!(
                ctx.out,
                "nothing pending: every issue is fixed or skipped\nconfirm with: {} --check-complete",
                ctx.command()
            )?;
        } else {
            writeln!(
                ctx.out,
                "no pending issue of pattern {} ({} pending in all)",
                ctx.args.pattern.join(", "),
                pick.pending_total
            )?;
        }
        return Ok(Exit::Ok);
    };
    let code = excerpt::read(&pick.root, ctx.path, issue);
    if ctx.json() {
        write_json(
            ctx,
            &NextJson {
                remaining: pick.remaining,
                issue: Some(issue),
                excerpt: code.as_ref().ok(),
                excerpt_error: code.as_ref().err().map(String::as_str),
            },
        )?;
        return Ok(Exit::Ok);
    }
    let mut text = issue_text(ctx, issue, &code);
    let others = pick.remaining - 1;
    let _ = write!(
        text,
        "remaining: {} pending{}\n\n",
        pick.remaining,
        match others {
            0 => " (this is the last one)".to_owned(),
            _ => " (this one included)".to_owned(),
        }
    );
    let command = ctx.command();
    let _ = writeln!(
        text,
        "fixed it?       {command} --fixed {id}",
        id = issue.id
    );
    if issue.performance {
        text.push_str("false positive? a performance issue cannot be skipped; fix it\n");
    } else {
        let _ = writeln!(
            text,
            "false positive? {command} --skip {id} --reason \"...\"",
            id = issue.id
        );
    }
    ctx.out.write_all(text.as_bytes())?;
    Ok(Exit::Ok)
}

/// The finding's code as the scan saw it, when the file cannot show it.
fn push_as_scanned(text: &mut String, issue: &Issue) {
    if issue.snippet.is_empty() {
        return;
    }
    text.push_str("  as scanned:\n");
    for line in issue.snippet.lines() {
        let _ = writeln!(text, "  > {line}");
    }
}

/// The issue's head, its code (or why the code cannot be shown), related places and template.
fn issue_text(ctx: &Ctx<'_>, issue: &Issue, code: &Result<Excerpt, String>) -> String {
    let style = ctx.style;
    let mut text = render::head(style, issue);
    text.push('\n');
    match code {
        Ok(excerpt) => {
            text.push_str(&render::excerpt(style, excerpt));
            if let Some(note) = &excerpt.note {
                let _ = writeln!(text, "  note: {note}");
                push_as_scanned(&mut text, issue);
            }
        }
        Err(why) => {
            let _ = writeln!(text, "  (code not shown: {why})");
            push_as_scanned(&mut text, issue);
        }
    }
    text.push('\n');
    for related in &issue.related {
        let _ = writeln!(
            text,
            "related: {}:{}:{}  {}",
            related.file, related.line, related.column, related.note
        );
    }
    if let Some(measured) = &issue.measurement {
        let _ = writeln!(text, "measured too (npu-verify): {}", measured.evidence);
    }
    let _ = writeln!(text, "fix template: {}", issue.fix_template);
    if let (Some(fix), Status::Pending) = (&issue.fix, issue.status) {
        text.push_str(&automatic_fix(&ctx.command(), &issue.id, fix));
    }
    if issue.performance {
        text.push_str("performance issue: it must be fixed, it cannot be skipped\n");
    }
    text
}

/// The line that says an issue has an automatic fix, with the commands that preview and apply it.
fn automatic_fix(command: &str, id: &str, fix: &issue_model::Fix) -> String {
    let flag = match fix.applicability {
        issue_model::Applicability::Safe => "",
        issue_model::Applicability::Unsafe => " --unsafe-fixes",
    };
    format!(
        "automatic fix: {} ({}) — apply with `{command} --fix {id}{flag}` (preview: `{command} --fix {id} --diff{flag}`)\n",
        fix.applicability.as_str(),
        fix.message
    )
}

#[derive(Serialize)]
struct ShowJson<'a> {
    issue: &'a Issue,
    excerpt: Option<&'a Excerpt>,
    excerpt_error: Option<&'a str>,
    seconds_spent: Option<i64>,
}

pub fn show(ctx: &mut Ctx<'_>, typed: &str) -> Result<Exit> {
    let file = ctx.load()?;
    let issue = &file.issues[find(&file, ctx.path, typed)?];
    let code = excerpt::read(&file.root, ctx.path, issue);
    let spent = seconds_spent(issue);
    if ctx.json() {
        write_json(
            ctx,
            &ShowJson {
                issue,
                excerpt: code.as_ref().ok(),
                excerpt_error: code.as_ref().err().map(String::as_str),
                seconds_spent: spent,
            },
        )?;
        return Ok(Exit::Ok);
    }
    let mut text = issue_text(ctx, issue, &code);
    let _ = write!(text, "status: {}", ctx.style.status(issue.status));
    if let Some(reason) = &issue.reason {
        let _ = write!(text, " ({reason})");
    }
    text.push('\n');
    if let Some(seconds) = spent {
        let _ = writeln!(text, "time spent: {}", human(seconds));
    }
    let _ = writeln!(text, "fingerprint: {}\nhistory:", issue.fingerprint);
    for entry in &issue.history {
        let _ = write!(text, "  {}  {}", entry.at, entry.status);
        if let Some(note) = &entry.note {
            let _ = write!(text, "  {note}");
        }
        text.push('\n');
    }
    ctx.out.write_all(text.as_bytes())?;
    Ok(Exit::Ok)
}

pub fn list(ctx: &mut Ctx<'_>) -> Result<Exit> {
    let file = ctx.load()?;
    let filter = Filter::new(&ctx.args.status, &ctx.args.pattern);
    let order = WorkOrder::new(&file.issues).sorted(&file.issues, &filter);
    if ctx.json() {
        let issues: Vec<&Issue> = order.iter().map(|&n| &file.issues[n]).collect();
        write_json(ctx, &issues)?;
        return Ok(Exit::Ok);
    }
    if order.is_empty() {
        let what = if filter.is_empty() {
            "no issues"
        } else {
            "no issue matches"
        };
        ctx.note(&format!("{what} in {}", ctx.path.display()))?;
        return Ok(Exit::Ok);
    }
    // Out-of-scope issues are neither to do nor done: listed apart, under their reason.
    let (outside, inside): (Vec<usize>, Vec<usize>) = order
        .iter()
        .partition(|&&n| file.issues[n].status == Status::OutOfScope);
    rows(ctx, &file, &inside)?;
    let mut reasons: Vec<&str> = Vec::new();
    for &n in &outside {
        let why = file.issues[n].reason.as_deref().unwrap_or("out of scope");
        if !reasons.contains(&why) {
            reasons.push(why);
        }
    }
    for why in reasons {
        let group: Vec<usize> = outside
            .iter()
            .copied()
            .filter(|&n| file.issues[n].reason.as_deref().unwrap_or("out of scope") == why)
            .collect();
        let gap = if inside.is_empty() { "" } else { "\n" };
        writeln!(ctx.out, "{gap}{} issues {why}:", group.len())?;
        rows(ctx, &file, &group)?;
    }
    Ok(Exit::Ok)
}

fn rows(ctx: &mut Ctx<'_>, file: &IssuesFile, order: &[usize]) -> Result<()> {
    let width = order
        .iter()
        .map(|&n| file.issues[n].id.len())
        .max()
        .unwrap_or(0);
    let mut text = String::new();
    for &n in order {
        render::row(&mut text, ctx.style, &file.issues[n], width);
    }
    ctx.out.write_all(text.as_bytes())?;
    Ok(())
}

#[derive(Serialize)]
struct CheckJson<'a> {
    complete: bool,
    total: usize,
    by_status: &'a BTreeMap<String, usize>,
    pending: Vec<&'a Issue>,
}

pub fn check_complete(ctx: &mut Ctx<'_>) -> Result<Exit> {
    let file = ctx.load()?;
    let pending_filter = Filter::default().pending_only();
    let order = WorkOrder::new(&file.issues).sorted(&file.issues, &pending_filter);
    let summary = issue_model::Summary::of(&file.issues);
    let complete = order.is_empty();
    if ctx.json() {
        write_json(
            ctx,
            &CheckJson {
                complete,
                total: file.issues.len(),
                by_status: &summary.by_status,
                pending: order.iter().map(|&n| &file.issues[n]).collect(),
            },
        )?;
    } else if complete {
        let count = |s: &str| summary.by_status.get(s).copied().unwrap_or(0);
        let out_of_scope = match count("out_of_scope") {
            0 => String::new(),
            n => format!(", {n} out of scope"),
        };
        writeln!(
            ctx.out,
            "complete: all {} issues are handled ({} fixed, {} skipped{out_of_scope})",
            file.issues.len(),
            count("fixed"),
            count("skipped")
        )?;
    } else {
        let blocking = order
            .iter()
            .filter(|&&n| file.issues[n].blocking.is_some())
            .count();
        writeln!(
            ctx.out,
            "incomplete: {} of {} issues pending{}",
            order.len(),
            file.issues.len(),
            if blocking == 0 {
                String::new()
            } else {
                format!(
                    " ({blocking} blocking: the run stops on the NPU until {} fixed; listed first)",
                    if blocking == 1 { "it is" } else { "they are" }
                )
            }
        )?;
        rows(ctx, &file, &order)?;
        writeln!(ctx.out, "work through them with: {} --next", ctx.command())?;
    }
    Ok(if complete { Exit::Ok } else { Exit::Findings })
}

#[derive(Serialize)]
struct SummaryJson<'a> {
    total: usize,
    by_status: &'a BTreeMap<String, usize>,
    by_pattern: &'a BTreeMap<String, BTreeMap<String, usize>>,
    time: Vec<TimeJson<'a>>,
    seconds_total: i64,
}

#[derive(Serialize)]
struct TimeJson<'a> {
    id: &'a str,
    pattern: &'a str,
    status: Status,
    seconds: i64,
}

pub fn summary(ctx: &mut Ctx<'_>) -> Result<Exit> {
    let file = ctx.load()?;
    let summary = issue_model::Summary::of(&file.issues);
    let order = WorkOrder::new(&file.issues).sorted(&file.issues, &Filter::default());
    let time: Vec<TimeJson<'_>> = order
        .iter()
        .map(|&n| &file.issues[n])
        .filter_map(|i| {
            seconds_spent(i).map(|seconds| TimeJson {
                id: &i.id,
                pattern: &i.pattern,
                status: i.status,
                seconds,
            })
        })
        .collect();
    let seconds_total = time.iter().map(|t| t.seconds).sum();
    if ctx.json() {
        write_json(
            ctx,
            &SummaryJson {
                total: summary.total,
                by_status: &summary.by_status,
                by_pattern: &summary.by_pattern,
                time,
                seconds_total,
            },
        )?;
        return Ok(Exit::Ok);
    }
    let count = |m: &BTreeMap<String, usize>, s: Status| m.get(s.as_str()).copied().unwrap_or(0);
    // The out-of-scope column only when a scan left files out.
    let statuses: Vec<Status> = Status::ALL
        .into_iter()
        .filter(|&s| s != Status::OutOfScope || count(&summary.by_status, s) > 0)
        .collect();
    let mut header = vec!["pattern".to_owned()];
    header.extend(statuses.iter().map(|s| s.as_str().to_owned()));
    header.push("total".to_owned());
    let mut table: Vec<Vec<String>> = summary
        .by_pattern
        .iter()
        .map(|(pattern, counts)| {
            let mut row = vec![pattern.clone()];
            row.extend(statuses.iter().map(|&s| count(counts, s).to_string()));
            row.push(counts.values().sum::<usize>().to_string());
            row
        })
        .collect();
    let mut total_row = vec!["total".to_owned()];
    total_row.extend(
        statuses
            .iter()
            .map(|&s| count(&summary.by_status, s).to_string()),
    );
    total_row.push(summary.total.to_string());
    table.push(total_row);
    let mut text = format!(
        "{}: {} issues, {} pending\n\n",
        ctx.path.display(),
        summary.total,
        count(&summary.by_status, Status::Pending)
    );
    text.push_str(&render::table(&header, &table));
    text.push_str(
        "\ntime spent (shown by --next, reopened or regressed, until fixed or skipped):\n",
    );
    if time.is_empty() {
        text.push_str("  none measured yet\n");
    } else {
        let width = time.iter().map(|t| t.id.len()).max().unwrap_or(0);
        for t in &time {
            let _ = writeln!(
                text,
                "  {:<width$}  {:>7}  {}",
                t.id,
                human(t.seconds),
                t.status
            );
        }
        let _ = writeln!(
            text,
            "  {:<width$}  {:>7}  over {} issues",
            "total",
            human(seconds_total),
            time.len()
        );
    }
    ctx.out.write_all(text.as_bytes())?;
    Ok(Exit::Ok)
}

/// Pretty JSON with a trailing newline.
pub fn write_json(ctx: &mut Ctx<'_>, value: &impl Serialize) -> Result<()> {
    serde_json::to_writer_pretty(&mut *ctx.out, value).map_err(std::io::Error::from)?;
    ctx.out.write_all(b"\n")?;
    Ok(())
}
