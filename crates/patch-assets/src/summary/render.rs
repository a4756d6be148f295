//! Markdown for each `<!-- npu-assets:NAME -->` marker of the summary template.

use super::Inputs;
use super::git::Inventory;
use super::records::{Span, Verify};
use super::timing::{self, format_duration, format_time};
use issue_model::{HistoryStatus, Issue, Status};
use jiff::{SignedDuration, Timestamp};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The names of every `<!-- npu-assets:NAME -->` marker the summary fills, in template order.
pub const MARKERS: [&str; 6] = [
    "overview",
    "workflow",
    "issues",
    "inventory",
    "verify",
    "known-issues",
];

const HOW_TO_USE: &str = "<!-- How to use this template.";

/// The template with every marker line replaced and the how-to comment removed.
pub fn fill(template: &str, inputs: &Inputs) -> String {
    let mut out = String::with_capacity(template.len() * 2);
    let mut in_how_to = false;
    for line in template.lines() {
        if line.starts_with(HOW_TO_USE) {
            in_how_to = !line.contains("-->");
            continue;
        }
        if in_how_to {
            in_how_to = !line.contains("-->");
            continue;
        }
        let marker = line
            .trim()
            .strip_prefix("<!-- npu-assets:")
            .and_then(|rest| rest.strip_suffix("-->"))
            .map(str::trim);
        match marker.and_then(|name| section(name, inputs)) {
            Some(text) => out.push_str(text.trim_end()),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    // Removing the how-to comment leaves two blank lines after the title.
    out.replace("\n\n\n", "\n\n")
}

fn section(name: &str, inputs: &Inputs) -> Option<String> {
    Some(match name {
        "overview" => overview(inputs),
        "workflow" => workflow(inputs),
        "issues" => issues(inputs),
        "inventory" => inventory(&inputs.inventory),
        "verify" => verify(inputs),
        "known-issues" => known_issues(inputs),
        _ => return None,
    })
}

fn overview(inputs: &Inputs) -> String {
    format!(
        "**Project:** `{}` · **Draft:** {} by npu-assets {} from the tools' records. \
         Sections marked \"(write this)\" need a person.",
        inputs.project_name,
        format_time(inputs.now),
        env!("CARGO_PKG_VERSION"),
    )
}

fn all_issues(inputs: &Inputs) -> &[Issue] {
    inputs.issues.as_ref().map_or(&[], |(_, f)| &f.issues)
}

fn count(issues: &[Issue], status: Status) -> usize {
    issues.iter().filter(|i| i.status == status).count()
}

/// "not recorded", where the tools kept no time.
const NOT_RECORDED: &str = "not recorded";

fn span_total(spans: &[Span]) -> Option<SignedDuration> {
    spans
        .iter()
        .map(|s| s.finished.duration_since(s.started))
        .reduce(|a, b| a + b)
}

fn workflow(inputs: &Inputs) -> String {
    let issues = all_issues(inputs);
    let histories: Vec<&[issue_model::HistoryEntry]> =
        issues.iter().map(|i| i.history.as_slice()).collect();
    let scanned = timing::first(&histories, &[HistoryStatus::Found]);
    let fix_start = timing::first(&histories, &[HistoryStatus::Shown]);
    let fix_end = timing::last(&histories, &[HistoryStatus::Fixed, HistoryStatus::Skipped]);
    let per_issue: Option<SignedDuration> = issues
        .iter()
        .filter_map(|i| timing::time_spent(&i.history))
        .reduce(|a, b| a + b);
    let pending = count(issues, Status::Pending);

    let when = |t: Option<Timestamp>| t.map_or_else(|| NOT_RECORDED.to_owned(), format_time);
    let took =
        |d: Option<SignedDuration>| d.map_or_else(|| NOT_RECORDED.to_owned(), format_duration);
    let mut rows: Vec<[String; 5]> = Vec::new();
    let created = inputs.created_at.as_deref().and_then(|t| t.parse().ok());
    rows.push([
        "1".into(),
        "Create `migrate_to_cloudrobo/` (`npu-assets init`)".into(),
        when(created),
        NOT_RECORDED.into(),
        if created.is_some() {
            "start: `migrate_to_cloudrobo/.npu-assets.json` (written by `npu-assets init`)".into()
        } else {
            "no record of `npu-assets init`".into()
        },
    ]);
    let scan_record = match &inputs.issues {
        Some((path, file)) => format!(
            "start: the first `found` in `{path}`'s issue histories; {} issues",
            file.issues.len()
        ),
        None => "no issues.json".into(),
    };
    rows.push([
        "2".into(),
        "Scan (`npu-scan`)".into(),
        when(scanned),
        NOT_RECORDED.into(),
        scan_record,
    ]);
    let span = match (fix_start, fix_end) {
        (Some(a), Some(b)) if b >= a => Some(b.duration_since(a)),
        _ => None,
    };
    rows.push([
        "3".into(),
        "Fix every issue (`npu-progress --next/--fixed/--skip`)".into(),
        when(fix_start),
        took(span),
        format!(
            "{} fixed, {} skipped, {pending} pending; time: issues.json histories, first `--next` to last `--fixed`/`--skip` (on the issues themselves: {})",
            count(issues, Status::Fixed),
            count(issues, Status::Skipped),
            took(per_issue)
        ),
    ]);
    rows.push([
        "4".into(),
        "`npu-progress --check-complete`".into(),
        NOT_RECORDED.into(),
        NOT_RECORDED.into(),
        match (&inputs.issues, pending) {
            (None, _) => "no issues.json".into(),
            (Some(_), 0) => "complete (no pending issue in issues.json)".into(),
            (Some(_), n) => format!("{n} issues still pending"),
        },
    ]);
    let verify_runs = &inputs.verify_runs;
    let last_report = match &inputs.verify {
        Verify::Report { checks, .. } => format!("last report: {}", tally(checks)),
        Verify::Absent => "no report".into(),
        Verify::Unreadable(_) => "report unreadable".into(),
    };
    rows.push([
        "5–6".into(),
        "Verify runtime, pipeline and data (`npu-verify`)".into(),
        when(verify_runs.iter().map(|s| s.started).min()),
        took(span_total(verify_runs)),
        if verify_runs.is_empty() {
            format!("{last_report}; no run recorded in `migrate_to_cloudrobo/logs/verify-runs.jsonl`")
        } else {
            format!(
                "{last_report}; time: {} run(s) in `migrate_to_cloudrobo/logs/verify-runs.jsonl`, added up",
                verify_runs.len()
            )
        },
    ]);
    let runs = &inputs.runs;
    rows.push([
        "7".into(),
        "Train (`train.sh` or `npu-train`)".into(),
        when(runs.spans.iter().map(|s| s.started).min()),
        took(span_total(&runs.spans)),
        if runs.logs.is_empty() {
            "no training log".into()
        } else {
            format!(
                "{} run(s) logged in `migrate_to_cloudrobo/logs/`, last exit code {}; time: each log's `# started:` line to its last write, added up ({} of {} logs have both)",
                runs.logs.len(),
                runs.last_exit.as_deref().unwrap_or(NOT_RECORDED),
                runs.spans.len(),
                runs.logs.len()
            )
        },
    ]);
    rows.push([
        "8".into(),
        "Write this summary".into(),
        format_time(inputs.now),
        NOT_RECORDED.into(),
        "start: this draft by `npu-assets summary`".into(),
    ]);
    table(&["Step", "What", "Started", "Took", "Record"], &rows)
}

fn tally(checks: &[super::records::Check]) -> String {
    let mut by: BTreeMap<&str, usize> = BTreeMap::new();
    for c in checks {
        *by.entry(c.status.as_str()).or_default() += 1;
    }
    if by.is_empty() {
        return "no checks".into();
    }
    by.iter()
        .map(|(s, n)| format!("{n} {s}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn location(issue: &Issue) -> String {
    match &issue.symbol {
        Some(sym) => format!("`{}:{}` ({sym})", issue.file, issue.line),
        None => format!("`{}:{}`", issue.file, issue.line),
    }
}

fn note(issue: &Issue) -> String {
    issue
        .reason
        .clone()
        .or_else(|| issue.history.iter().rev().find_map(|h| h.note.clone()))
        .unwrap_or_default()
}

fn issues(inputs: &Inputs) -> String {
    let Some((path, file)) = &inputs.issues else {
        return format!(
            "_No issues.json found (looked at {}). Run `npu-assets summary <project> --issues PATH`._",
            inputs
                .issues_looked
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let list = &file.issues;
    let mut out = format!(
        "From `{path}`: {} issues, {} fixed, {} skipped, {} pending.\n\n",
        list.len(),
        count(list, Status::Fixed),
        count(list, Status::Skipped),
        count(list, Status::Pending)
    );
    if list.is_empty() {
        out.push_str("_The scanner found nothing to fix._\n");
        return out;
    }
    let mut by_pattern: BTreeMap<&str, Vec<&Issue>> = BTreeMap::new();
    for issue in list {
        by_pattern.entry(&issue.pattern).or_default().push(issue);
    }
    let rows: Vec<[String; 6]> = by_pattern
        .iter()
        .map(|(pattern, items)| {
            let spent = items
                .iter()
                .filter_map(|i| timing::time_spent(&i.history))
                .reduce(|a, b| a + b);
            let n = |s| items.iter().filter(|i| i.status == s).count().to_string();
            [
                format!("`{pattern}`"),
                items[0].category.as_str().to_owned(),
                n(Status::Fixed),
                n(Status::Skipped),
                n(Status::Pending),
                spent.map_or_else(|| "—".into(), format_duration),
            ]
        })
        .collect();
    out.push_str(&table(
        &["Pattern", "Category", "Fixed", "Skipped", "Pending", "Time"],
        &rows,
    ));
    out.push('\n');
    let mut sorted: Vec<&Issue> = list.iter().collect();
    sorted.sort_by(|a, b| {
        (&a.pattern, &a.file, a.line, &a.id).cmp(&(&b.pattern, &b.file, b.line, &b.id))
    });
    let rows: Vec<[String; 6]> = sorted
        .iter()
        .map(|i| {
            [
                format!("`{}`", i.id),
                format!("`{}`", i.pattern),
                location(i),
                i.status.as_str().to_owned(),
                timing::time_spent(&i.history).map_or_else(|| "—".into(), format_duration),
                note(i),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "Issue",
            "Pattern",
            "Where",
            "Status",
            "Time",
            "Reason / note",
        ],
        &rows,
    ));
    out
}

fn inventory(inventory: &Result<Inventory, String>) -> String {
    let inv = match inventory {
        Ok(inv) => inv,
        Err(why) => return format!("_{why}._"),
    };
    let mut out = if inv.changes.is_empty() {
        format!("Base `{}`: {}. No changes.\n", inv.base, inv.base_why)
    } else {
        let added: u64 = inv.changes.iter().filter_map(|c| c.added).sum();
        let removed: u64 = inv.changes.iter().filter_map(|c| c.removed).sum();
        let mut out = format!(
            "Base `{}`: {}. {} files, +{added} / −{removed} lines.\n\n",
            inv.base,
            inv.base_why,
            inv.changes.len()
        );
        let num = |n: Option<u64>| n.map_or_else(|| "binary".into(), |n| n.to_string());
        let rows: Vec<[String; 4]> = inv
            .changes
            .iter()
            .map(|c| {
                [
                    c.kind.as_str().to_owned(),
                    format!("`{}`", c.path),
                    num(c.added),
                    num(c.removed),
                ]
            })
            .collect();
        out.push_str(&table(&["Change", "File", "+", "−"], &rows));
        out
    };
    let listed = |paths: &[String]| {
        const SHOWN: usize = 20;
        let mut text = paths
            .iter()
            .take(SHOWN)
            .map(|p| format!("`{p}`"))
            .collect::<Vec<_>>()
            .join(", ");
        if paths.len() > SHOWN {
            let _ = write!(text, " and {} more", paths.len() - SHOWN);
        }
        text
    };
    if !inv.artifacts.is_empty() {
        let _ = write!(
            out,
            "\nNot counted as changes: {} untracked file(s) written while a training or verify run was going (its outputs): {}.\n",
            inv.artifacts.len(),
            listed(&inv.artifacts)
        );
    }
    if !inv.ignored.is_empty() {
        let _ = write!(
            out,
            "\nNot counted as changes: what `.gitignore` leaves out: {}.\n",
            listed(&inv.ignored)
        );
    }
    out
}

fn verify(inputs: &Inputs) -> String {
    match &inputs.verify {
        Verify::Absent => format!(
            "_No verify report at `{}`. Run `npu-verify <project> --runtime --pipeline --config <config>` and `--data`._",
            inputs.verify_path
        ),
        Verify::Unreadable(why) => {
            format!(
                "_The verify report `{}` could not be read: {why}._",
                inputs.verify_path
            )
        }
        Verify::Report { at, checks } => {
            let mut out = format!("Last report `{}`", inputs.verify_path);
            if let Some(at) = at {
                let _ = write!(out, " ({at})");
            }
            let _ = writeln!(out, ": {}.\n", tally(checks));
            if checks.iter().all(|c| c.configuration.is_none()) {
                let rows: Vec<[String; 3]> = checks
                    .iter()
                    .map(|c| [c.name.clone(), c.status.clone(), c.detail.clone()])
                    .collect();
                out.push_str(&table(&["Check", "Status", "Detail"], &rows));
                out.push_str(&parity(checks));
                return out;
            }
            // The latest result of each check in each configuration it ran in (the report
            // keeps them all), grouped by configuration.
            let mut sorted: Vec<&super::records::Check> = checks.iter().collect();
            sorted.sort_by(|a, b| a.configuration.cmp(&b.configuration));
            let rows: Vec<[String; 5]> = sorted
                .iter()
                .map(|c| {
                    [
                        c.name.clone(),
                        c.configuration.clone().unwrap_or_else(|| "-".to_owned()),
                        c.at.clone().unwrap_or_default(),
                        c.status.clone(),
                        c.detail.clone(),
                    ]
                })
                .collect();
            out.push_str(&table(
                &["Check", "Configuration", "Ran", "Status", "Detail"],
                &rows,
            ));
            out.push_str(&parity(checks));
            out
        }
    }
}

/// The `--parity` result: the loss per step, reference against port, and the first divergence.
fn parity(checks: &[super::records::Check]) -> String {
    let Some(loss) = checks.iter().find(|c| c.name == "parity.loss") else {
        return String::new();
    };
    let number = |v: &serde_json::Value| {
        v.as_f64().map_or_else(
            || v.as_str().unwrap_or("-").to_owned(),
            |x| format!("{x:.6}"),
        )
    };
    let rows: Vec<[String; 4]> = loss
        .data
        .as_ref()
        .and_then(|d| d["steps"].as_array())
        .map(|steps| {
            steps
                .iter()
                .map(|s| {
                    [
                        s["step"].to_string(),
                        number(&s["reference"]),
                        number(&s["port"]),
                        s["relative_error"]
                            .as_f64()
                            .map_or_else(|| "-".to_owned(), |e| format!("{e:.2e}")),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    let mut out = String::from(
        "

Parity (`npu-verify --parity`), the loss per step:

",
    );
    out.push_str(&table(
        &["Step", "Reference (CPU)", "Port", "Relative error"],
        &rows,
    ));
    if let Some(modules) = checks.iter().find(|c| c.name == "parity.modules") {
        let _ = write!(
            out,
            "

Modules: {} — {}",
            modules.status,
            one_line(&modules.detail)
        );
    }
    // What the re-runs found (`parity.why`) and, when they found nothing, the msprobe configuration.
    for (name, label) in [("parity.why", "Why"), ("parity.msprobe", "msprobe")] {
        if let Some(check) = checks.iter().find(|c| c.name == name) {
            let _ = write!(out, "\n\n{label}: {}", one_line(&check.detail));
        }
    }
    out
}

fn known_issues(inputs: &Inputs) -> String {
    let mut bullets = Vec::new();
    let mut sorted: Vec<&Issue> = all_issues(inputs).iter().collect();
    sorted.sort_by(|a, b| (&a.pattern, &a.id).cmp(&(&b.pattern, &b.id)));
    for i in &sorted {
        let head = format!("`{}` ({}, {})", i.id, i.pattern, location(i));
        if i.status == Status::Skipped {
            bullets.push(format!(
                "{head}: skipped, {}",
                i.reason.as_deref().unwrap_or("no reason given")
            ));
        }
        if i.history
            .iter()
            .any(|h| h.status == HistoryStatus::Regressed)
        {
            bullets.push(format!(
                "{head}: regressed (found again after it was fixed), now {}",
                i.status
            ));
        } else if i.status == Status::Pending {
            bullets.push(format!("{head}: still pending"));
        }
    }
    if let Verify::Report { checks, .. } = &inputs.verify {
        for c in checks {
            if !matches!(
                c.status.as_str(),
                "pass" | "ok" | "passed" | "skip" | "skipped"
            ) {
                let detail = if c.detail.is_empty() {
                    String::new()
                } else {
                    format!(": {}", c.detail)
                };
                let during = c
                    .configuration
                    .as_ref()
                    .map(|label| format!(" ({label})"))
                    .unwrap_or_default();
                bullets.push(format!(
                    "verify check `{}`{during} is {}{detail}",
                    c.name, c.status
                ));
            }
        }
    }
    if bullets.is_empty() {
        return "_None recorded by the tools._".into();
    }
    bullets
        .iter()
        .map(|b| format!("- {}", one_line(b)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A Markdown table; cells are made safe for one table row.
fn table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) -> String {
    let mut out = format!("| {} |\n", header.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(N));
    for row in rows {
        let cells: Vec<String> = row.iter().map(|c| cell(c)).collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out
}

fn cell(text: &str) -> String {
    let text = one_line(text).replace('|', "\\|");
    if text.chars().count() > 200 {
        let cut: String = text.chars().take(199).collect();
        format!("{cut}…")
    } else {
        text
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parity_result_shows_the_loss_per_step_and_the_first_divergence() {
        let check = |name: &str, status: &str, detail: &str, data: serde_json::Value| {
            super::super::records::Check {
                name: name.into(),
                status: status.into(),
                detail: detail.into(),
                configuration: None,
                at: None,
                data: Some(data),
            }
        };
        let checks = vec![
            check(
                "parity.loss",
                "pass",
                "",
                serde_json::json!({"steps": [
                    {"step": 1, "reference": 1.0, "port": 1.01, "relative_error": 0.01},
                    {"step": 2, "reference": 0.9, "port": "nan", "relative_error": null},
                ]}),
            ),
            check(
                "parity.modules",
                "fail",
                "first divergence: Policy.attn (Attention)",
                serde_json::json!({}),
            ),
            check(
                "parity.why",
                "fail",
                "your change at train.py:71 (in Policy.attn's class) makes Policy.attn compute differently",
                serde_json::json!({}),
            ),
        ];
        let text = parity(&checks);
        assert!(
            text.contains("| 1 | 1.000000 | 1.010000 | 1.00e-2 |"),
            "{text}"
        );
        assert!(text.contains("| 2 | 0.900000 | nan | - |"), "{text}");
        assert!(
            text.contains("Modules: fail — first divergence: Policy.attn (Attention)"),
            "{text}"
        );
        assert!(
            text.contains("\n\nWhy: your change at train.py:71 (in Policy.attn's class)"),
            "{text}"
        );
        assert_eq!(parity(&checks[1..]), "");
    }

    #[test]
    fn cells_stay_in_their_row() {
        assert_eq!(cell("a | b\nc"), "a \\| b c");
        assert_eq!(cell(&"x".repeat(300)).chars().count(), 200);
    }

    #[test]
    fn the_template_has_exactly_the_markers_we_fill() {
        let template = String::from_utf8_lossy(crate::get(super::super::TEMPLATE).unwrap());
        let found: Vec<&str> = template
            .lines()
            .filter_map(|l| l.trim().strip_prefix("<!-- npu-assets:"))
            .filter_map(|r| r.strip_suffix("-->"))
            .map(str::trim)
            .collect();
        assert_eq!(found, MARKERS);
    }
}
