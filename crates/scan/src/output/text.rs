//! Human-readable findings and the summary table.

use crate::ScanResult;
use crate::rules;
use issue_model::{Issue, MergeReport};
use std::collections::BTreeMap;
use std::fmt::Write;

/// One finding per block: `file:line:col: ID [severity] message`, the snippet, related places.
/// Blocking findings ([`Issue::blocking`]) come first, each with a `blocking:` line.
pub fn findings(issues: &[Issue]) -> String {
    findings_colored(issues, false)
}

/// [`findings`], with ANSI colors for the location, id and severity when `color` is set.
pub fn findings_colored(issues: &[Issue], color: bool) -> String {
    let paint = |code: &str, text: &str| {
        if color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    };
    let mut out = String::new();
    let blocking = issues.iter().filter(|i| i.blocking.is_some());
    for issue in blocking.chain(issues.iter().filter(|i| i.blocking.is_none())) {
        let severity_color = match issue.severity {
            issue_model::Severity::Error => "1;31",
            issue_model::Severity::Warning => "1;33",
            issue_model::Severity::Info => "1;36",
        };
        let _ = writeln!(
            out,
            "{}: {} [{}{}] {}",
            paint(
                "1",
                &format!("{}:{}:{}", issue.file, issue.line, issue.column)
            ),
            paint("1", &issue.pattern),
            paint(severity_color, issue.severity.as_str()),
            if issue.performance {
                ", performance"
            } else {
                ""
            },
            issue.message
        );
        if let Some(why) = &issue.blocking {
            let _ = writeln!(out, "  {}: {why}", paint("1;31", "blocking"));
        }
        if let Some(symbol) = &issue.symbol {
            let _ = writeln!(out, "  in {symbol}");
        }
        for line in issue.snippet.lines() {
            let _ = writeln!(out, "  | {line}");
        }
        for r in &issue.related {
            let _ = writeln!(
                out,
                "  related: {}:{}:{}: {}",
                r.file, r.line, r.column, r.note
            );
        }
        let _ = writeln!(out, "  id {}  fix: {}", issue.id, issue.fix_template);
    }
    out
}

/// The summary table: counts per pattern with its category, files scanned and unparsed, time.
pub fn summary(result: &ScanResult, merge: Option<&MergeReport>, written: Option<&str>) -> String {
    let mut out = String::new();
    let mut per_pattern: BTreeMap<&str, usize> = BTreeMap::new();
    for issue in &result.issues {
        *per_pattern.entry(issue.pattern.as_str()).or_default() += 1;
    }
    if per_pattern.is_empty() {
        let _ = writeln!(out, "No issues found.");
    } else {
        let _ = writeln!(out, "pattern category   issues  what");
        for (pattern, count) in &per_pattern {
            let (category, summary) =
                rules::get(pattern).map_or(("?", ""), |r| (r.category.as_str(), r.summary));
            let _ = writeln!(out, "{pattern:<7} {category:<10} {count:>6}  {summary}");
        }
        let mut per_category: BTreeMap<&str, usize> = BTreeMap::new();
        for issue in &result.issues {
            *per_category.entry(issue.category.as_str()).or_default() += 1;
        }
        let cats: Vec<String> = per_category
            .iter()
            .map(|(c, n)| format!("{c} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "{:<18} {:>6}  ({})",
            "total",
            result.issues.len(),
            cats.join(", ")
        );
    }
    let blocking: Vec<&str> = result
        .issues
        .iter()
        .filter(|i| i.blocking.is_some())
        .map(|i| i.id.as_str())
        .collect();
    if !blocking.is_empty() {
        let _ = writeln!(
            out,
            "Blocking: {} issue{} stop{} the run on the NPU before anything else does ({}); fix {} first \
             (`npu-progress issues.json --next` shows {} first).",
            blocking.len(),
            if blocking.len() == 1 { "" } else { "s" },
            if blocking.len() == 1 { "s" } else { "" },
            blocking.join(", "),
            if blocking.len() == 1 { "it" } else { "them" },
            if blocking.len() == 1 { "it" } else { "them" },
        );
    }
    let s = &result.stats;
    let _ = writeln!(
        out,
        "Scanned {} Python files ({} lines), {} config files in {:.2}s; {} unparsed; {} suppressed.",
        s.files, s.lines, s.config_files, s.seconds, s.unparsed, s.suppressed
    );
    if let Some(first) = result.out_of_scope.first() {
        let _ = writeln!(
            out,
            "{} more findings are {}: recorded in issues.json as out_of_scope, not counted above.",
            result.out_of_scope.len(),
            first.reason.as_deref().unwrap_or("out of scope")
        );
    }
    if let Some(scope) = &result.scope {
        let ran = if scope.executed.is_empty() {
            String::new()
        } else {
            format!(
                " ({} executed by the recorded verify run)",
                scope.executed.len()
            )
        };
        let _ = writeln!(
            out,
            "Scope: `{}` (entry {}): {} Python files in scope{ran}; kept for rescans (`--scope none` drops it).",
            scope.launch,
            scope.entry,
            scope.files.len()
        );
        for note in &scope.notes {
            let _ = writeln!(out, "  scope: {note}");
        }
    }
    if let Some(m) = merge {
        let _ = writeln!(
            out,
            "issues.json: {} new, {} kept, {} regressed, {} resolved by edits{}{}.",
            m.new.len(),
            m.kept.len(),
            m.regressed.len(),
            m.resolved.len(),
            merge_extras(m),
            written.map_or(String::new(), |p| format!(" ({p})"))
        );
    }
    out
}

/// The rarer outcomes of a merge, when there are any: issues skipped by ignore comments,
/// pending again, and out of scope (files not scanned, or not reached by `--scope`: never
/// counted as resolved).
fn merge_extras(m: &MergeReport) -> String {
    let mut out = String::new();
    for (ids, what) in [
        (&m.ignored, "skipped by `# npu: ignore` comments"),
        (&m.reopened, "pending again"),
        (&m.out_of_scope, "out of scope (not fixed)"),
    ] {
        if !ids.is_empty() {
            let _ = write!(out, ", {} {what}", ids.len());
        }
    }
    out
}

/// `--explain`: the rule's registry row, then its documentation.
pub fn explain(rule: &rules::RuleInfo) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} ({}): {}\ncategory {}, severity {}, {}; fix template {}\n",
        rule.id,
        rule.name,
        rule.summary,
        rule.category,
        rule.severity,
        if rule.performance {
            "performance issue (cannot be skipped)"
        } else {
            "may be skipped with a reason"
        },
        rule.fix_template
    );
    out.push_str(rule.doc);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// `--list-rules`: one line per rule.
pub fn rule_list() -> String {
    let mut out = String::new();
    for r in rules::registry() {
        let _ = writeln!(
            out,
            "{:<6} {:<10} {:<8} {:<5} {}",
            r.id,
            r.category.as_str(),
            r.severity.as_str(),
            if r.performance { "perf" } else { "" },
            r.summary
        );
    }
    out
}

/// What `--fix` / `--diff` did: fixes applied per rule, fixes not applied and why, what is left.
pub fn fix_summary(run: &crate::FixRun, unsafe_fixes: bool, wrote: bool, root: &str) -> String {
    let by_key: BTreeMap<&str, &Issue> = run
        .before
        .issues
        .iter()
        .chain(&run.after.issues)
        .map(|i| (i.fingerprint.as_str(), i))
        .collect();
    let mut out = String::new();
    let applied: std::collections::BTreeSet<&str> = run
        .files
        .iter()
        .flat_map(|f| &f.applied)
        .map(String::as_str)
        .collect();
    let mut per_rule: BTreeMap<&str, usize> = BTreeMap::new();
    for key in &applied {
        if let Some(issue) = by_key.get(key) {
            *per_rule.entry(issue.pattern.as_str()).or_default() += 1;
        }
    }
    let files: std::collections::BTreeSet<&str> = run
        .files
        .iter()
        .filter(|f| !f.applied.is_empty())
        .map(|f| f.file.as_str())
        .collect();
    let rules: Vec<String> = per_rule.iter().map(|(r, n)| format!("{r} {n}")).collect();
    let verb = if wrote { "Applied" } else { "Would apply" };
    let _ = writeln!(
        out,
        "{verb} {} fix{} in {} file{}{}.",
        applied.len(),
        if applied.len() == 1 { "" } else { "es" },
        files.len(),
        if files.len() == 1 { "" } else { "s" },
        if rules.is_empty() {
            String::new()
        } else {
            format!(" ({})", rules.join(", "))
        }
    );
    for (rule, why, keys) in &run.held {
        let mut files: Vec<&str> = keys
            .iter()
            .filter_map(|k| by_key.get(k.as_str()).map(|i| i.file.as_str()))
            .collect();
        files.sort_unstable();
        files.dedup();
        let _ = writeln!(
            out,
            "Not applied: {} {rule} fix{} ({}): {why}",
            keys.len(),
            if keys.len() == 1 { "" } else { "es" },
            files.join(", ")
        );
    }
    for outcome in &run.files {
        for (key, why) in &outcome.dropped {
            let place = by_key.get(key.as_str()).map_or_else(
                || outcome.file.clone(),
                |i| format!("{}:{} {}", i.file, i.line, i.pattern),
            );
            let _ = writeln!(out, "Not applied: {place}: {why}");
        }
    }
    if !run.left_alone.is_empty() {
        let count: usize = run.left_alone.values().map(Vec::len).sum();
        let files: Vec<&str> = run.left_alone.keys().map(String::as_str).collect();
        let shown = if files.len() > 5 {
            format!("{}, and {} more", files[..5].join(", "), files.len() - 5)
        } else {
            files.join(", ")
        };
        let _ = writeln!(
            out,
            "Left alone: {count} fix{} in {} test or example file{} ({shown}); a training run \
             does not execute them. To fix them too: npu-scan {root} --fix --fix-tests-examples",
            if count == 1 { "" } else { "es" },
            files.len(),
            if files.len() == 1 { "" } else { "s" },
        );
    }
    // After a written run the rescan is what is left; after a dry run, what was not applied.
    let remaining: Vec<&Issue> = if wrote {
        run.after.issues.iter().collect()
    } else {
        run.before
            .issues
            .iter()
            .filter(|i| !applied.contains(i.fingerprint.as_str()))
            .collect()
    };
    let unsafe_left = remaining
        .iter()
        .filter(|i| {
            i.fix
                .as_ref()
                .is_some_and(|f| f.applicability == issue_model::Applicability::Unsafe)
        })
        .count();
    let _ = writeln!(
        out,
        "{} issue{} left for judgement{}.",
        remaining.len(),
        if remaining.len() == 1 { "" } else { "s" },
        if unsafe_left > 0 && !unsafe_fixes {
            format!(
                " ({unsafe_left} of them with an unsafe fix: review it, or apply with --fix --unsafe-fixes)"
            )
        } else {
            String::new()
        }
    );
    out
}
