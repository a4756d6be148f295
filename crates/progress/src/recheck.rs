//! Re-checking a fix: scan the issue's file again and see whether the same finding is still
//! there, so `--fixed` cannot mark an issue fixed that is not.

use crate::excerpt;
use issue_model::{Issue, Status, normalize_snippet};
use std::path::Path;

/// The outcome of a re-check.
pub enum Recheck {
    /// The scanner no longer finds it.
    Gone,
    /// The scanner still finds it: these findings (pending issues from the fresh scan), and
    /// the root they were found under.
    Present { root: String, found: Vec<Issue> },
    /// The re-check could not run; the reason.
    Unchecked(String),
    /// An inline `# npu: ignore` comment suppresses it now: not fixed, skipped with this reason.
    Ignored(String),
}

/// Scan `issue`'s file again.
///
/// The finding counts as still present when the scan reports the same finding (same pattern
/// and file, and the same fingerprint by `issue_model::same_finding`, or the same enclosing
/// symbol and normalized code)
/// more times than there are other not-yet-fixed issues with that description: fixing the
/// first of two identical findings renumbers the second, which then has the first one's
/// fingerprint.
///
/// `root` is the issues file's `root`; `others` are its issues.
pub fn recheck(root: &str, others: &[Issue], issues_json: &Path, issue: &Issue) -> Recheck {
    let Some((root, _)) = excerpt::locate(root, issues_json, &issue.file) else {
        let looked: Vec<String> = excerpt::root_candidates(root, issues_json)
            .iter()
            .map(|r| r.join(&issue.file).display().to_string())
            .collect();
        return Recheck::Unchecked(format!(
            "the file is gone (looked at {})",
            looked.join(", ")
        ));
    };
    if let Some(measured) = &issue.measured {
        return remeasure(&root, issues_json, issue, measured);
    }
    let result = match scan_for(&root, issue) {
        Ok(result) => result,
        Err(e) => return Recheck::Unchecked(format!("the scan failed: {e}")),
    };
    if issue.pattern != "P_SYN"
        && let Some(unparsed) = result.unparsed.iter().find(|u| u.file == issue.file)
    {
        return Recheck::Unchecked(format!(
            "{} no longer parses ({}); the next npu-scan will report it",
            issue.file, unparsed.reason
        ));
    }
    // The same finding: pattern and file, and the same fingerprint as `issue_model::same_finding`
    // decides (its line part, or its anchor, which survives edits of the line's text), or the
    // same symbol and code up to whitespace. The cheap fields are compared first; a large
    // issues.json has many issues and few in this file.
    let wanted_code = normalize_snippet(&issue.snippet);
    let same = |i: &Issue| {
        i.pattern == issue.pattern
            && i.file == issue.file
            && (issue_model::same_finding(&i.fingerprint, &issue.fingerprint)
                || (i.symbol == issue.symbol && normalize_snippet(&i.snippet) == wanted_code))
    };
    let mut found: Vec<Issue> = result.issues.into_iter().filter(|i| same(i)).collect();
    if found.is_empty() {
        // Still there, but under an ignore comment: a suppression, not a fix.
        if let Some(ignored) = result.ignored.into_iter().find(|i| same(i)) {
            return Recheck::Ignored(ignored.reason.unwrap_or_default());
        }
        return Recheck::Gone;
    }
    let others_open = others
        .iter()
        .filter(|i| i.id != issue.id && i.status != Status::Fixed && same(i))
        .count();
    if found.len() <= others_open {
        return Recheck::Gone;
    }
    // The one with this issue's own fingerprint first.
    found.sort_by_key(|i| i.fingerprint != issue.fingerprint);
    found.truncate(found.len() - others_open);
    Recheck::Present {
        root: root.display().to_string(),
        found,
    }
}

/// A measured issue (`npu-verify --record-issues`): run the same `npu-verify` command again,
/// recording into a copy of the issues file, and see whether the measurement still shows it.
fn remeasure(
    root: &Path,
    issues_json: &Path,
    issue: &Issue,
    measured: &issue_model::Measured,
) -> Recheck {
    let verify = std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name("npu-verify"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| std::path::PathBuf::from("npu-verify"));
    let copy = std::env::temp_dir().join(format!(
        "npu-progress-remeasure-{}.json",
        std::process::id()
    ));
    if let Err(e) = std::fs::copy(issues_json, &copy) {
        return Recheck::Unchecked(format!("cannot copy {}: {e}", issues_json.display()));
    }
    let run = std::process::Command::new(&verify)
        .arg(root)
        .args(&measured.verify_args)
        .args(["--record-issues", "--quiet", "--format", "json", "--issues"])
        .arg(&copy)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output();
    let outcome = match run {
        Err(e) => Recheck::Unchecked(format!("cannot run {}: {e}", verify.display())),
        Ok(out) if out.status.code() == Some(2) || out.status.code().is_none() => {
            Recheck::Unchecked(format!(
                "npu-verify could not measure again ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
        Ok(_) => match issue_model::load(&copy) {
            Err(e) => Recheck::Unchecked(e.to_string()),
            Ok(file) => match file.issues.into_iter().find(|i| i.id == issue.id) {
                Some(again) if again.status == Status::Pending => Recheck::Present {
                    root: root.display().to_string(),
                    found: vec![again],
                },
                Some(again)
                    if again.status == Status::Skipped
                        && again
                            .reason
                            .as_deref()
                            .is_some_and(|r| r.starts_with(issue_model::INLINE_IGNORE)) =>
                {
                    Recheck::Ignored(again.reason.unwrap_or_default())
                }
                Some(_) => Recheck::Gone,
                None => Recheck::Unchecked("the measurement lost the issue".to_owned()),
            },
        },
    };
    let _ = std::fs::remove_file(&copy);
    outcome
}

/// The issue as a fresh scan of its file (under `root`) finds it now, with its current fix;
/// `None` when the scanner no longer finds it.
pub fn current(root: &Path, issue: &Issue) -> Result<Option<Issue>, String> {
    let result = scan_for(root, issue)?;
    Ok(result
        .issues
        .into_iter()
        .find(|i| i.fingerprint == issue.fingerprint))
}

/// Whether re-checking a finding of `pattern` scans the whole project: the rule says so in the
/// registry (`project_level`); an unknown pattern is treated as project-level, the safe side.
pub fn is_project_level(pattern: &str) -> bool {
    scan::rules::get(pattern).is_none_or(|rule| rule.project_level)
}

/// The scan that decides whether `issue` is still there.
///
/// A file-local finding depends only on its file and that file's path (the module name comes
/// from it), so the file alone is scanned ([`scan::scan_alone`]): a re-check then costs one
/// file, not the project. A project-level finding, or a file whose path the scanner does not
/// take alone, is re-checked by scanning the whole tree.
fn scan_for(root: &Path, issue: &Issue) -> Result<scan::ScanResult, String> {
    if !is_project_level(&issue.pattern) {
        let settings = scan::Settings {
            threads: 1,
            ..scan::Settings::default()
        };
        match scan::scan_alone(root, &issue.file, &settings) {
            Err(scan::Error::NotScannable { .. }) => {}
            result => return result.map_err(|e| e.to_string()),
        }
    }
    scan::scan_files(
        root,
        std::slice::from_ref(&issue.file),
        &scan::Settings::default(),
    )
    .map_err(|e| e.to_string())
}
