//! Re-checking a fix: scan the issue's file again and see whether the same finding is still
//! there, so `--fixed` cannot mark an issue fixed that is not.

use crate::excerpt;
use issue_model::{Issue, IssuesFile, Status, normalize_snippet};
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
}

/// Scan `issue`'s file again.
///
/// The finding counts as still present when the scan reports the same finding (same pattern,
/// enclosing symbol and normalized code, which is its fingerprint up to the occurrence index)
/// more times than there are other not-yet-fixed issues with that description: fixing the
/// first of two identical findings renumbers the second, which then has the first one's
/// fingerprint.
pub fn recheck(file: &IssuesFile, issues_json: &Path, issue: &Issue) -> Recheck {
    let Some((root, _)) = excerpt::locate(&file.root, issues_json, &issue.file) else {
        let looked: Vec<String> = excerpt::root_candidates(&file.root, issues_json)
            .iter()
            .map(|r| r.join(&issue.file).display().to_string())
            .collect();
        return Recheck::Unchecked(format!(
            "the file is gone (looked at {})",
            looked.join(", ")
        ));
    };
    let settings = scan::Settings::default();
    let result = match scan::scan_files(&root, std::slice::from_ref(&issue.file), &settings) {
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
    let key = |i: &Issue| {
        (
            i.pattern.clone(),
            i.file.clone(),
            i.symbol.clone(),
            normalize_snippet(&i.snippet),
        )
    };
    let wanted = key(issue);
    let mut found: Vec<Issue> = result
        .issues
        .into_iter()
        .filter(|i| key(i) == wanted)
        .collect();
    let others_open = file
        .issues
        .iter()
        .filter(|i| i.id != issue.id && i.status != Status::Fixed && key(i) == wanted)
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
