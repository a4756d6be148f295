//! Merging a fresh scan into the previous `issues.json`, so progress survives rescans.

use crate::ids::{anchor_part, line_part, short_id};
use crate::schema::{HistoryEntry, HistoryStatus, Issue, IssuesFile, Status, Summary};
use std::collections::{BTreeMap, BTreeSet};

/// What a merge changed, for the scanner to report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergeReport {
    /// Ids found for the first time.
    pub new: Vec<String>,
    /// Ids found again, status kept.
    pub kept: Vec<String>,
    /// Ids that were `fixed` and are found again: now pending, with a `regressed` history entry.
    pub regressed: Vec<String>,
    /// Ids that were pending and are no longer found: now `fixed`, with a `resolved` history entry.
    pub resolved: Vec<String>,
}

/// Merge `fresh` (a scan's result, every issue pending with no history) into `previous`.
///
/// Issues are matched by fingerprint: the whole of it, then its line part (the line's text:
/// files written before fingerprints had an anchor part match this way), then its anchor part
/// among the issues still unmatched (the line's text changed, as when a fix edited another
/// finding on the same line; see [`crate::ids::anchored_fingerprint`]). A matched issue keeps its
/// id, status, reason and history and takes the fresh fingerprint, location, message and snippet. A `fixed` issue found again becomes pending
/// (`regressed`). A pending issue that is gone becomes `fixed` (`resolved`); gone fixed or skipped
/// issues are kept as they are, so the record of the work survives. Ids are unique: a new issue
/// whose short id collides with another gets a longer one.
pub fn merge(
    previous: Option<&IssuesFile>,
    mut fresh: IssuesFile,
    now: &str,
) -> (IssuesFile, MergeReport) {
    let mut report = MergeReport::default();
    let old_issues: &[Issue] = previous.map_or(&[], |p| p.issues.as_slice());

    let mut taken: BTreeSet<String> = previous
        .map(|p| p.issues.iter().map(|i| i.id.clone()).collect())
        .unwrap_or_default();
    // Fingerprints are unique in a file (rescans match on them). The scanner numbers identical
    // findings in one symbol, so a repeated fingerprint is the same finding twice: keep one.
    let mut seen: BTreeSet<String> = BTreeSet::new();
    fresh.issues.retain(|i| seen.insert(i.fingerprint.clone()));
    let matched = match_previous(old_issues, &fresh.issues);
    for (issue, old) in fresh.issues.iter_mut().zip(&matched) {
        if let Some(old) = old.map(|o| &old_issues[o]) {
            issue.id.clone_from(&old.id);
            issue.reason.clone_from(&old.reason);
            issue.history.clone_from(&old.history);
            issue.status = old.status;
            if old.status == Status::Fixed {
                issue.status = Status::Pending;
                issue.history.push(HistoryEntry {
                    at: now.to_owned(),
                    status: HistoryStatus::Regressed,
                    note: Some("marked fixed, but a rescan found it again".to_owned()),
                });
                report.regressed.push(issue.id.clone());
            } else {
                report.kept.push(issue.id.clone());
            }
        } else {
            issue.id = unique_id(&issue.pattern, &issue.fingerprint, &taken);
            issue.status = Status::Pending;
            issue.reason = None;
            issue.history = vec![HistoryEntry {
                at: now.to_owned(),
                status: HistoryStatus::Found,
                note: None,
            }];
            report.new.push(issue.id.clone());
        }
        taken.insert(issue.id.clone());
    }

    let matched_old: BTreeSet<usize> = matched.iter().flatten().copied().collect();
    if let Some(previous) = previous {
        for (index, old) in previous.issues.iter().enumerate() {
            if matched_old.contains(&index) {
                continue;
            }
            let mut gone = old.clone();
            if gone.status == Status::Pending {
                gone.status = Status::Fixed;
                gone.history.push(HistoryEntry {
                    at: now.to_owned(),
                    status: HistoryStatus::Resolved,
                    note: Some("no longer found by a rescan".to_owned()),
                });
                report.resolved.push(gone.id.clone());
            }
            fresh.issues.push(gone);
        }
    }

    fresh.summary = Summary::of(&fresh.issues);
    (fresh, report)
}

/// For each fresh issue, the index of the previous issue it is, if any: matched by the whole
/// fingerprint, then by its line part, then by its anchor part, each previous issue at most once.
fn match_previous(old: &[Issue], fresh: &[Issue]) -> Vec<Option<usize>> {
    let mut matched: Vec<Option<usize>> = vec![None; fresh.len()];
    let mut used: BTreeSet<usize> = BTreeSet::new();
    let keys: [fn(&Issue) -> Option<&str>; 3] = [
        |i| Some(i.fingerprint.as_str()),
        |i| Some(line_part(&i.fingerprint)),
        |i| anchor_part(&i.fingerprint),
    ];
    for key in keys {
        let mut by_key: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for (index, issue) in old.iter().enumerate() {
            if used.contains(&index) {
                continue;
            }
            if let Some(k) = key(issue) {
                by_key.entry((issue.pattern.as_str(), k)).or_insert(index);
            }
        }
        for (slot, issue) in matched.iter_mut().zip(fresh) {
            if slot.is_some() {
                continue;
            }
            let Some(k) = key(issue) else { continue };
            if let Some(&index) = by_key.get(&(issue.pattern.as_str(), k))
                && used.insert(index)
            {
                *slot = Some(index);
            }
        }
    }
    matched
}

/// The shortest id for `fingerprint` (6 hex digits, then 8, 10, ...) that nothing has taken.
fn unique_id(pattern: &str, fingerprint: &str, taken: &BTreeSet<String>) -> String {
    let mut len = 6;
    loop {
        let id = short_id(pattern, fingerprint, len);
        if !taken.contains(&id) {
            return id;
        }
        if len >= fingerprint.len() {
            // The same fingerprint twice: number the copies.
            // `taken` is finite, so one of its length + 2 candidates is free.
            return (2..taken.len() + 3)
                .map(|n| format!("{id}-{n}"))
                .find(|candidate| !taken.contains(candidate))
                .unwrap_or(id);
        }
        len += 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_id_numbers_exhausted_fingerprints() {
        let taken: BTreeSet<String> = ["RND-ab", "RND-ab-2"].map(str::to_owned).into();
        assert_eq!(unique_id("P_RND", "ab", &taken), "RND-ab-3");
    }
}
