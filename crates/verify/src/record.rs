//! `--record-issues`: the step profile's findings merged into `issues.json` as measured issues.
//!
//! `pipeline.per_sample` lines become `P_VEC` issues, lines of `pipeline.syncs` that sync more
//! than once per step (or every syncing line, when the step's total is over the threshold)
//! `P_TGT` issues, and each op × line of `pipeline.cpu_fallback` a `P_CPU` issue, each with the
//! measurement as evidence ("measured: 16 host syncs per step at train.py:26"). Only the checks
//! this run measured are replaced ([`issue_model::merge_measured`]): a pending issue the profile
//! no longer shows is resolved, one measured again keeps its status. `npu-progress --fixed`
//! re-runs the same `npu-verify` command (`measured.verify_args`) to check a fix.

use crate::cli::Args;
use crate::report::{Check, Report, Status};
use issue_model::{Category, Issue, Measured, Severity};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The checks whose findings are recorded.
pub const CHECKS: [&str; 3] = [
    "pipeline.per_sample",
    "pipeline.syncs",
    "pipeline.cpu_fallback",
];

/// A line that syncs more often than this per step is a `P_TGT` finding.
const LINE_SYNCS_OK: u64 = 1;

/// Record the report's measured findings; the line to print, or why nothing was recorded.
pub fn record(args: &Args, report: &Report) -> Result<String, String> {
    let profiled = report
        .checks
        .iter()
        .any(|c| c.name == "pipeline.profile" && c.status == Status::Pass);
    if !args.pipeline || !profiled {
        return Err(
            "--record-issues needs the step profile of --pipeline (at least --steps 2, without --no-profile); nothing was recorded"
                .to_owned(),
        );
    }
    let root = std::path::absolute(&args.path).unwrap_or_else(|_| args.path.clone());
    let measured: Vec<&Check> = report
        .checks
        .iter()
        .filter(|c| {
            CHECKS.contains(&c.name.as_str()) && matches!(c.status, Status::Pass | Status::Warn)
        })
        .collect();
    let checks: Vec<&str> = measured.iter().map(|c| c.name.as_str()).collect();
    let verify_args = rerun_args(args);
    let fresh = findings(&measured, &root, &verify_args);
    let path = issues_path(args);
    let now = issue_model::now_rfc3339();
    // A new issues file records the root so that npu-progress finds the code from any
    // directory: `.` when the file is in the project root, else the absolute path.
    let beside = path
        .parent()
        .map(|d| {
            if d.as_os_str().is_empty() {
                Path::new(".")
            } else {
                d
            }
        })
        .and_then(|d| std::path::absolute(d).ok());
    let root_text = if beside.as_deref() == Some(root.as_path()) {
        ".".to_owned()
    } else {
        root.display().to_string()
    };
    let count = fresh
        .iter()
        .filter(|i| i.status == issue_model::Status::Pending)
        .count();
    let (merged, folded) = issue_model::update(&path, |previous| {
        let (mut file, mut merge) =
            issue_model::merge_measured(previous, &root_text, fresh, &checks, &now);
        // A measurement in the code of a scanned issue of its pattern is that issue.
        let folded = issue_model::fold_measured(&mut file, &checks, &|relative| {
            std::fs::read_to_string(root.join(relative)).ok()
        });
        for list in [&mut merge.new, &mut merge.kept, &mut merge.regressed] {
            list.retain(|id| !folded.iter().any(|f| &f.measured == id));
        }
        Ok((Some(file), (merge, folded)))
    })
    .map_err(|e| format!("cannot record the measured issues: {e}"))?;
    let mut confirmed: Vec<&str> = folded.iter().map(|f| f.into.as_str()).collect();
    confirmed.dedup();
    Ok(format!(
        "{}: {count} measured issue(s) from {} ({} new, {} again, {} regressed, {} no longer measured: now fixed{}{})",
        path.display(),
        checks.join(", "),
        merged.new.len(),
        merged.kept.len(),
        merged.regressed.len(),
        merged.resolved.len(),
        if merged.ignored.is_empty() {
            String::new()
        } else {
            format!(
                ", {} skipped by `# npu: ignore` comments",
                merged.ignored.len()
            )
        },
        if confirmed.is_empty() {
            String::new()
        } else {
            format!(
                ", {} measured in the code of scanned issues, tracked as those: {}",
                folded.len(),
                confirmed.join(", ")
            )
        }
    ))
}

/// `--issues`, else the `issues.json` the static check finds, else `./issues.json`.
fn issues_path(args: &Args) -> PathBuf {
    if let Some(given) = &args.issues {
        return given.clone();
    }
    crate::statics::find_issues(None, &args.path).unwrap_or_else(|_| PathBuf::from("issues.json"))
}

/// The `npu-verify` arguments after the project's path that measure the same run again.
pub fn rerun_args(args: &Args) -> Vec<String> {
    let mut out: Vec<String> = vec![
        "--pipeline".into(),
        "--steps".into(),
        args.steps.to_string(),
    ];
    out.extend(["--timeout".to_owned(), args.timeout.to_string()]);
    if args.emulate_npu {
        out.push("--emulate-npu".into());
    }
    if let Some(config) = &args.config {
        out.extend(["--config".to_owned(), config.clone()]);
    }
    if let Some(entry) = &args.entry {
        let entry = std::path::absolute(entry).unwrap_or_else(|_| entry.clone());
        out.extend(["--entry".to_owned(), entry.display().to_string()]);
    }
    if let Some(python) = &args.python {
        out.extend(["--python".to_owned(), python.display().to_string()]);
    }
    if let Some(env) = &args.conda_env {
        out.extend(["--conda-env".to_owned(), env.clone()]);
    }
    if let Some(n) = args.nproc_per_node {
        out.extend(["--nproc-per-node".to_owned(), n.to_string()]);
    }
    if !args.launch.is_empty() {
        out.push("--".into());
        out.extend(args.launch.iter().cloned());
    }
    out
}

/// `("tiny_vla/losses.py", 32)` of a profile site (`file:line`, maybe ` (backward)`).
fn parse_site(site: &str) -> Option<(String, u32)> {
    let site = site.strip_suffix(" (backward)").unwrap_or(site);
    let (file, line) = site.rsplit_once(':')?;
    if file.starts_with('<') {
        return None;
    }
    Some((file.to_owned(), line.parse().ok()?))
}

fn max_of(values: &Value) -> u64 {
    values
        .as_array()
        .map_or(0, |v| v.iter().filter_map(Value::as_u64).max().unwrap_or(0))
}

fn min_of(values: &Value) -> u64 {
    values
        .as_array()
        .map_or(0, |v| v.iter().filter_map(Value::as_u64).min().unwrap_or(0))
}

fn per_step(values: &Value) -> String {
    let (low, high) = (min_of(values), max_of(values));
    if low == high {
        low.to_string()
    } else {
        format!("{low}-{high}")
    }
}

struct Finding {
    pattern: &'static str,
    check: &'static str,
    site: String,
    /// What tells two findings of one check at one line apart (the op of a fallback).
    key: String,
    evidence: String,
}

fn findings(checks: &[&Check], root: &Path, verify_args: &[String]) -> Vec<Issue> {
    let mut found: Vec<Finding> = Vec::new();
    let mut per_sample_sites: Vec<String> = Vec::new();
    for check in checks {
        let Some(data) = &check.data else { continue };
        match check.name.as_str() {
            "pipeline.per_sample" if check.status == Status::Warn => {
                for row in data["lines"].as_array().into_iter().flatten() {
                    let site = row["site"].as_str().unwrap_or_default().to_owned();
                    let batch = row["batch_sizes"]
                        .as_array()
                        .map(|b| {
                            b.iter()
                                .map(std::string::ToString::to_string)
                                .collect::<Vec<_>>()
                                .join("/")
                        })
                        .unwrap_or_default();
                    found.push(Finding {
                        pattern: "P_VEC",
                        check: "pipeline.per_sample",
                        evidence: format!(
                            "{} runs per step at {site}, once or more per sample of the batch of {batch} ({} launches and {} host syncs per step)",
                            per_step(&row["runs"]),
                            per_step(&row["launches"]),
                            per_step(&row["syncs"])
                        ),
                        key: String::new(),
                        site: site.clone(),
                    });
                    per_sample_sites.push(site);
                }
            }
            "pipeline.syncs" => {
                let over_total = check.status == Status::Warn;
                // Scalar logging within the harness's allowance is not a finding.
                let logging: Vec<&str> = data["scalar_logging"]["sites"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                for row in data["lines"].as_array().into_iter().flatten() {
                    let site = row["site"].as_str().unwrap_or_default().to_owned();
                    if logging.contains(&site.as_str()) {
                        continue;
                    }
                    let counts = &row["per_step"];
                    let many = max_of(counts) > LINE_SYNCS_OK;
                    let every_step = min_of(counts) >= 1;
                    if !(many || (over_total && every_step)) {
                        continue;
                    }
                    let kinds: Vec<&str> = row["kinds"]
                        .as_object()
                        .map(|k| k.keys().map(String::as_str).collect())
                        .unwrap_or_default();
                    found.push(Finding {
                        pattern: "P_TGT",
                        check: "pipeline.syncs",
                        evidence: format!(
                            "{} host syncs per step at {site} ({})",
                            per_step(counts),
                            kinds.join(", ")
                        ),
                        key: String::new(),
                        site,
                    });
                }
            }
            "pipeline.cpu_fallback" if check.status == Status::Warn => {
                let version = data["torch_npu"].as_str().unwrap_or("?");
                for op in data["ops"].as_array().into_iter().flatten() {
                    let name = op["op"].as_str().unwrap_or("?");
                    let kind = op["kind"].as_str().unwrap_or("fallback");
                    for (site, count) in op["sites"].as_object().into_iter().flatten() {
                        let how = if kind == "fallback" {
                            format!(
                                "{name} has no NPU kernel in torch_npu {version} and runs on the CPU"
                            )
                        } else {
                            format!("torch_npu {version}'s kernel of {name} may run on the CPU")
                        };
                        found.push(Finding {
                            pattern: issue_model::CPU_FALLBACK_PATTERN,
                            check: "pipeline.cpu_fallback",
                            evidence: format!("{how}: {count} per step at {site}"),
                            key: name.to_owned(),
                            site: site.clone(),
                        });
                    }
                }
            }
            _ => {}
        }
    }
    found
        .into_iter()
        .filter(|f| f.check != "pipeline.syncs" || !per_sample_sites.contains(&f.site))
        .filter_map(|f| to_issue(&f, root, verify_args))
        .collect()
}

fn to_issue(f: &Finding, root: &Path, verify_args: &[String]) -> Option<Issue> {
    let (file, line) = parse_site(&f.site)?;
    let text = std::fs::read_to_string(root.join(&file)).ok()?;
    let snippet = text
        .lines()
        .nth(usize::try_from(line).ok()?.checked_sub(1)?)?
        .to_owned();
    // `# npu: ignore[P_TGT] why` on the line (or `ignore-file` in the file) makes it skipped
    // with the comment's reason, as it does npu-scan's findings: never fixed.
    let ignored = scan::suppress::Suppressions::parse_config_text(&text, |_| true)
        .reason(f.pattern, line, line);
    let (category, severity, template) = match scan::rules::get(f.pattern) {
        Some(rule) => (rule.category, rule.severity, rule.fix_template.to_owned()),
        None => (
            Category::Operator,
            Severity::Warning,
            issue_model::MEASURED_PATTERNS
                .iter()
                .find(|(p, _)| *p == f.pattern)
                .map(|(_, t)| (*t).to_owned())?,
        ),
    };
    let width = u32::try_from(snippet.chars().count()).unwrap_or(u32::MAX);
    // The fingerprint leaves out an ignore comment on the line, so that adding one keeps the
    // issue (now skipped) instead of making it a new one and the old one "fixed".
    let code = snippet
        .find("# npu:")
        .or_else(|| snippet.find("#npu:"))
        .map_or(snippet.as_str(), |at| &snippet[..at]);
    let fingerprint = issue_model::fingerprint(
        &format!("{} measured by {}", f.pattern, f.check),
        &file,
        Some(&f.key),
        code,
        0,
    );
    Some(Issue {
        id: String::new(),
        pattern: f.pattern.to_owned(),
        category,
        severity,
        performance: true,
        file,
        line,
        column: 1,
        end_line: line,
        end_column: width.saturating_add(1),
        symbol: enclosing(&text, line),
        message: format!("measured: {}", f.evidence),
        snippet: snippet.trim().to_owned(),
        related: Vec::new(),
        fix_template: template,
        fix: None,
        fingerprint,
        status: if ignored.is_some() {
            issue_model::Status::Skipped
        } else {
            issue_model::Status::Pending
        },
        reason: ignored,
        history: Vec::new(),
        blocking: None,
        measured: Some(Measured {
            check: f.check.to_owned(),
            evidence: f.evidence.clone(),
            verify_args: verify_args.to_vec(),
        }),
        measurement: None,
    })
}

/// `Class.method` (or `function`, `Class`) of the `def`/`class` blocks around 1-based `line`
/// of Python `text`, read from the indentation; `None` at module level.
pub fn enclosing(text: &str, line: u32) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let at = usize::try_from(line).ok()?.checked_sub(1)?;
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut want = indent(lines.get(at)?);
    let mut names = Vec::new();
    for l in lines[..at].iter().rev() {
        if want == 0 {
            break;
        }
        let trimmed = l.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') || indent(l) >= want {
            continue;
        }
        want = indent(l);
        let header = trimmed.strip_prefix("async ").unwrap_or(trimmed);
        let name = header
            .strip_prefix("def ")
            .or_else(|| header.strip_prefix("class "))
            .map(|rest| {
                rest.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .next()
                    .unwrap_or_default()
            });
        if let Some(name) = name.filter(|n| !n.is_empty()) {
            names.push(name.to_owned());
        }
    }
    names.reverse();
    (!names.is_empty()).then(|| names.join("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sites_parse_with_and_without_the_backward_mark() {
        assert_eq!(parse_site("a/b.py:12"), Some(("a/b.py".to_owned(), 12)));
        assert_eq!(
            parse_site("train.py:7 (backward)"),
            Some(("train.py".to_owned(), 7))
        );
        assert_eq!(parse_site("<outside the project>"), None);
    }

    #[test]
    fn the_enclosing_function_is_named_from_the_indentation() {
        let text = "import torch\n\nclass Trainer:\n    rate = 1\n\n    def step(self, batch):\n        \
                    loss = self.model(batch)\n        if loss > 0:\n            # note\n\n            \
                    log(loss.item())\n        return loss\n\n\nasync def main():\n    x = 1\ny = 2\n";
        assert_eq!(enclosing(text, 11).as_deref(), Some("Trainer.step"));
        assert_eq!(enclosing(text, 7).as_deref(), Some("Trainer.step"));
        assert_eq!(enclosing(text, 4).as_deref(), Some("Trainer"));
        assert_eq!(enclosing(text, 16).as_deref(), Some("main"));
        assert_eq!(enclosing(text, 17), None);
        assert_eq!(enclosing(text, 1), None);
        assert_eq!(enclosing(text, 99), None);
    }

    #[test]
    fn scalar_logging_within_the_allowance_is_not_recorded_and_suppressed_lines_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("train.py"),
            "class Loop:\n    def step(self):\n        log(loss.item())\n        log(acc.item())\n        \
             norms = [p.grad.norm().item() for p in ps]\n        \
             x = y.cpu()  # npu: ignore[P_TGT] the host needs the batch here\n",
        )
        .unwrap();
        let mut syncs = Check::warn("pipeline.syncs", "d", "r");
        syncs.data = Some(serde_json::json!({"per_step": [14],
            "scalar_logging": {"allowance": 8, "sites": ["train.py:3", "train.py:4"]},
            "lines": [
            {"site": "train.py:5", "per_step": [10], "kinds": {"_local_scalar_dense": 10.0}},
            {"site": "train.py:3", "per_step": [1], "kinds": {"_local_scalar_dense": 1.0}},
            {"site": "train.py:4", "per_step": [1], "kinds": {"_local_scalar_dense": 1.0}},
            {"site": "train.py:6", "per_step": [2], "kinds": {"copy to host": 2.0}}]}));
        let issues = findings(&[&syncs], dir.path(), &[]);
        let found: Vec<(u32, Option<&str>, issue_model::Status)> = issues
            .iter()
            .map(|i| (i.line, i.symbol.as_deref(), i.status))
            .collect();
        assert_eq!(
            found,
            [
                (5, Some("Loop.step"), issue_model::Status::Pending),
                (6, Some("Loop.step"), issue_model::Status::Skipped)
            ]
        );
        assert_eq!(
            issues[1].reason.as_deref(),
            Some(
                "ignored inline: the host needs the batch here (`# npu: ignore` comment on line 6)"
            )
        );
        // The comment is not part of the fingerprint: adding it keeps the issue.
        let bare_dir = tempfile::tempdir().unwrap();
        let text = std::fs::read_to_string(dir.path().join("train.py")).unwrap();
        let comment = "  # npu: ignore[P_TGT] the host needs the batch here";
        std::fs::write(bare_dir.path().join("train.py"), text.replace(comment, "")).unwrap();
        let bare = findings(&[&syncs], bare_dir.path(), &[]);
        assert_eq!(bare[1].fingerprint, issues[1].fingerprint);
    }

    #[test]
    fn findings_become_measured_issues_under_their_patterns() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("train.py"),
            "import torch\nx = 1\n    for i in range(8): t += y[i].item()\nz = x.cpu()\nw = torch.lgamma(x)\n",
        )
        .unwrap();
        let mut per_sample = Check::warn("pipeline.per_sample", "d", "r");
        per_sample.data = Some(serde_json::json!({"lines": [
            {"site": "train.py:3", "runs": [8], "launches": [16], "syncs": [8], "batch_sizes": [8]}]}));
        let mut syncs = Check::warn("pipeline.syncs", "d", "r");
        syncs.data = Some(serde_json::json!({"per_step": [10], "lines": [
            {"site": "train.py:3", "per_step": [8], "kinds": {"_local_scalar_dense": 8.0}},
            {"site": "train.py:4", "per_step": [2], "kinds": {"copy to host": 2.0}},
            {"site": "train.py:2", "per_step": [0], "kinds": {}}]}));
        let mut fallback = Check::warn("pipeline.cpu_fallback", "d", "r");
        fallback.data = Some(serde_json::json!({"torch_npu": "2.14.0", "ops": [
            {"op": "aten::lgamma", "kind": "fallback", "sites": {"train.py:5": 1.0, "<outside the project>": 2.0}}]}));
        let args = vec!["--pipeline".to_owned()];
        let issues = findings(&[&per_sample, &syncs, &fallback], dir.path(), &args);
        let summary: Vec<(&str, u32, &str)> = issues
            .iter()
            .map(|i| (i.pattern.as_str(), i.line, i.message.as_str()))
            .collect();
        assert_eq!(
            summary,
            [
                (
                    "P_VEC",
                    3,
                    "measured: 8 runs per step at train.py:3, once or more per sample of the batch of 8 (16 launches and 8 host syncs per step)"
                ),
                (
                    "P_TGT",
                    4,
                    "measured: 2 host syncs per step at train.py:4 (copy to host)"
                ),
                (
                    "P_CPU",
                    5,
                    "measured: aten::lgamma has no NPU kernel in torch_npu 2.14.0 and runs on the CPU: 1.0 per step at train.py:5"
                ),
            ]
        );
        let cpu = &issues[2];
        assert_eq!(cpu.fix_template, "references/fix-templates/P_CPU.md");
        assert_eq!(cpu.snippet, "w = torch.lgamma(x)");
        assert_eq!(cpu.measured.as_ref().unwrap().verify_args, args);
        // Line-independent: the same finding on another line has the same fingerprint.
        std::fs::write(
            dir.path().join("train.py"),
            "import torch\n\nx = 1\n    for i in range(8): t += y[i].item()\nz = x.cpu()\nw = torch.lgamma(x)\n",
        )
        .unwrap();
        fallback.data = Some(serde_json::json!({"torch_npu": "2.14.0", "ops": [
            {"op": "aten::lgamma", "kind": "fallback", "sites": {"train.py:6": 1.0}}]}));
        let moved = findings(&[&fallback], dir.path(), &args);
        assert_eq!(moved[0].fingerprint, cpu.fingerprint);
    }
}
