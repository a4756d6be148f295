//! Merging a fresh scan into the previous `issues.json`, so progress survives rescans.

use crate::ids::{anchor_part, line_part, short_id};
use crate::schema::{
    HistoryEntry, HistoryStatus, INLINE_IGNORE, Issue, IssuesFile, Status, Summary,
};
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
    /// Ids now `skipped` by an inline `# npu: ignore` comment, with a `skipped` history entry.
    pub ignored: Vec<String>,
    /// Ids back to pending: their file is scanned again, or their inline ignore comment is gone
    /// (a `reopened` history entry).
    pub reopened: Vec<String>,
    /// Ids that were pending and whose file this scan did not read (`--exclude`): now
    /// `out_of_scope`, never `fixed`.
    pub out_of_scope: Vec<String>,
}

/// How a merge words the history entries it writes, by who measures the issues it owns.
struct Wording {
    /// The note of a `regressed` entry: a `fixed` issue found again.
    regressed: &'static str,
    /// The note of a `resolved` entry: a pending issue no longer found.
    resolved: &'static str,
    /// The note of a new issue's `found` entry.
    found: fn(&Issue) -> Option<String>,
}

/// Merge `fresh` into the issues of `previous` that `owns` picks: a fresh issue that `pair`
/// pairs with an owned one keeps its id, reason, status and history (a `fixed` one becomes
/// pending: `regressed`; an `out_of_scope` one, or one skipped by an inline ignore comment that
/// is gone, becomes pending: `reopened`); an unpaired one is new, with an id nothing in
/// `previous` has. A fresh issue that is `skipped` with a reason (the scanner's mark of a finding
/// an inline `# npu: ignore` comment suppresses) is recorded as skipped with that reason. An
/// owned issue left unpaired that is pending (or out of scope) becomes `out_of_scope` when
/// `not_scanned` gives a reason (its file was not read), else `fixed` (`resolved`). Fresh issues
/// with a fingerprint already seen are dropped. Returns the merged owned issues (fresh ones
/// first, then those gone) and the issues `owns` leaves out, as they were.
#[allow(clippy::too_many_arguments)]
fn merge_owned(
    previous: Vec<Issue>,
    owns: impl Fn(&Issue) -> bool,
    mut fresh: Vec<Issue>,
    pair: fn(&[Issue], &[Issue]) -> Vec<Option<usize>>,
    wording: &Wording,
    not_scanned: &dyn Fn(&Issue) -> Option<String>,
    now: &str,
    report: &mut MergeReport,
) -> (Vec<Issue>, Vec<Issue>) {
    let mut taken: BTreeSet<String> = previous.iter().map(|i| i.id.clone()).collect();
    let (old, others): (Vec<Issue>, Vec<Issue>) = previous.into_iter().partition(|i| owns(i));
    // Fingerprints are unique in a file (rescans match on them). The scanner numbers identical
    // findings in one symbol, so a repeated fingerprint is the same finding twice: keep one.
    let mut seen: BTreeSet<String> = BTreeSet::new();
    fresh.retain(|i| seen.insert(i.fingerprint.clone()));
    let matched = pair(&old, &fresh);
    for (issue, at) in fresh.iter_mut().zip(&matched) {
        // The scanner marks a finding an inline ignore comment suppresses as skipped, with the
        // comment's reason; every other fresh issue is pending.
        let ignored = (issue.status == Status::Skipped)
            .then(|| issue.reason.clone())
            .flatten();
        // And a finding outside the scan's scope (`npu-scan --scope`) as out of scope, with why.
        let outside = (issue.status == Status::OutOfScope)
            .then(|| issue.reason.clone())
            .flatten();
        if let Some(before) = at.map(|o| &old[o]) {
            issue.id.clone_from(&before.id);
            issue.reason.clone_from(&before.reason);
            issue.history.clone_from(&before.history);
            issue.status = before.status;
            let inline_skip = before.status == Status::Skipped
                && before
                    .reason
                    .as_deref()
                    .is_some_and(|r| r.starts_with(INLINE_IGNORE));
            if let Some(why) = ignored {
                if before.status == Status::Skipped && before.reason.as_deref() == Some(&why) {
                    report.kept.push(issue.id.clone());
                } else {
                    issue.reason = Some(why.clone());
                    let entry = (HistoryStatus::Skipped, why.as_str(), now);
                    move_to(issue, Status::Skipped, entry, &mut report.ignored);
                }
            } else if let Some(why) = outside {
                if before.status == Status::Skipped {
                    report.kept.push(issue.id.clone());
                } else if before.status == Status::OutOfScope {
                    issue.reason = Some(why);
                    report.kept.push(issue.id.clone());
                } else {
                    issue.reason = Some(why.clone());
                    let entry = (HistoryStatus::OutOfScope, why.as_str(), now);
                    move_to(issue, Status::OutOfScope, entry, &mut report.out_of_scope);
                }
            } else if before.status == Status::Fixed {
                let entry = (HistoryStatus::Regressed, wording.regressed, now);
                move_to(issue, Status::Pending, entry, &mut report.regressed);
            } else if before.status == Status::OutOfScope || inline_skip {
                let note = if inline_skip {
                    "its inline `# npu: ignore` comment is gone"
                } else if crate::schema::is_scope_reason(before.reason.as_deref()) {
                    "the scope of the scan reaches its file"
                } else {
                    "its file is scanned again"
                };
                issue.reason = None;
                let entry = (HistoryStatus::Reopened, note, now);
                move_to(issue, Status::Pending, entry, &mut report.reopened);
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
                note: (wording.found)(issue),
            }];
            report.new.push(issue.id.clone());
            if let Some(why) = ignored {
                issue.reason = Some(why.clone());
                let entry = (HistoryStatus::Skipped, why.as_str(), now);
                move_to(issue, Status::Skipped, entry, &mut report.ignored);
            } else if let Some(why) = outside {
                issue.reason = Some(why.clone());
                let entry = (HistoryStatus::OutOfScope, why.as_str(), now);
                move_to(issue, Status::OutOfScope, entry, &mut report.out_of_scope);
            }
        }
        taken.insert(issue.id.clone());
    }
    let matched_old: BTreeSet<usize> = matched.iter().flatten().copied().collect();
    for (index, mut gone) in old.into_iter().enumerate() {
        if matched_old.contains(&index) {
            continue;
        }
        if matches!(gone.status, Status::Pending | Status::OutOfScope) {
            if let Some(why) = not_scanned(&gone) {
                if gone.status == Status::Pending {
                    gone.reason = Some(why.clone());
                    let entry = (HistoryStatus::OutOfScope, why.as_str(), now);
                    move_to(
                        &mut gone,
                        Status::OutOfScope,
                        entry,
                        &mut report.out_of_scope,
                    );
                }
            } else {
                gone.reason = None;
                let entry = (HistoryStatus::Resolved, wording.resolved, now);
                move_to(&mut gone, Status::Fixed, entry, &mut report.resolved);
            }
        }
        fresh.push(gone);
    }
    (fresh, others)
}

/// Give `issue` the `status`, with a history entry (its status, note and time), and list its id.
fn move_to(
    issue: &mut Issue,
    status: Status,
    (entry, note, now): (HistoryStatus, &str, &str),
    ids: &mut Vec<String>,
) {
    issue.status = status;
    issue.history.push(HistoryEntry {
        at: now.to_owned(),
        status: entry,
        note: Some(note.to_owned()),
    });
    ids.push(issue.id.clone());
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
    fresh: IssuesFile,
    now: &str,
) -> (IssuesFile, MergeReport) {
    merge_scanned(previous, fresh, now, &|_| None)
}

/// [`merge`], for a scan that did not read every file: a previous pending issue that the scan
/// did not find and for which `not_scanned` gives a reason (its file was excluded) becomes
/// `out_of_scope` with that reason, never `fixed`; found again by a later scan, it is pending.
/// A fresh issue that is `skipped` with a reason (a finding an inline `# npu: ignore` comment
/// suppresses; the reason starts with [`INLINE_IGNORE`]) is recorded as skipped; an issue so
/// skipped that a later scan finds without the comment is pending again. A fresh issue that is
/// `out_of_scope` with a reason (outside `npu-scan --scope`) is recorded so, unless it was
/// skipped; found later in scope, it is pending again.
pub fn merge_scanned(
    previous: Option<&IssuesFile>,
    mut fresh: IssuesFile,
    now: &str,
    not_scanned: &dyn Fn(&Issue) -> Option<String>,
) -> (IssuesFile, MergeReport) {
    let mut report = MergeReport::default();
    let old_issues: Vec<Issue> = previous.map_or_else(Vec::new, |p| p.issues.clone());
    // Measured findings (npu-verify) are not the scanner's: a scan never matches or resolves them.
    let (mut issues, kept_measured) = merge_owned(
        old_issues,
        |i| i.measured.is_none(),
        std::mem::take(&mut fresh.issues),
        match_previous,
        &Wording {
            regressed: "marked fixed, but a rescan found it again",
            resolved: "no longer found by a rescan",
            found: |_| None,
        },
        not_scanned,
        now,
        &mut report,
    );
    issues.extend(kept_measured);
    fresh.issues = issues;
    fresh.summary = Summary::of(&fresh.issues);
    (fresh, report)
}

/// Merge the findings of one `npu-verify` measurement (`fresh`, every one with
/// [`Issue::measured`] set, pending, without history) into `previous` (or a new file with `root`):
/// the measured issues of the checks in `checks` are replaced. A finding measured again keeps its
/// id, status and history (a `fixed` one becomes pending: `regressed`); a pending one the
/// measurement no longer shows becomes `fixed` (`resolved`); scanned issues and the measured
/// issues of other checks are kept as they are.
pub fn merge_measured(
    previous: Option<IssuesFile>,
    root: &str,
    fresh: Vec<Issue>,
    checks: &[&str],
    now: &str,
) -> (IssuesFile, MergeReport) {
    let mut file = previous.unwrap_or_else(|| IssuesFile {
        schema_version: crate::schema::SCHEMA_VERSION,
        tool: crate::schema::Tool {
            name: "npu-verify".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        },
        root: root.to_owned(),
        scanned_at: now.to_owned(),
        summary: Summary::default(),
        issues: Vec::new(),
        unparsed: Vec::new(),
        scope: None,
    });
    let mut report = MergeReport::default();
    let (merged, mut issues) = merge_owned(
        std::mem::take(&mut file.issues),
        |i| {
            i.measured
                .as_ref()
                .is_some_and(|m| checks.contains(&m.check.as_str()))
        },
        fresh,
        match_fingerprint,
        &Wording {
            regressed: "marked fixed, but npu-verify measured it again",
            resolved: "npu-verify no longer measures it",
            found: |i| i.measured.as_ref().map(|m| m.evidence.clone()),
        },
        &|_| None,
        now,
        &mut report,
    );
    issues.extend(merged);
    file.issues = issues;
    file.summary = Summary::of(&file.issues);
    (file, report)
}

/// For each fresh issue, the index of the first previous issue with its whole fingerprint not
/// matched before, if any.
fn match_fingerprint(old: &[Issue], fresh: &[Issue]) -> Vec<Option<usize>> {
    let mut used: BTreeSet<usize> = BTreeSet::new();
    fresh
        .iter()
        .map(|issue| {
            let at = (0..old.len())
                .find(|&o| !used.contains(&o) && old[o].fingerprint == issue.fingerprint)?;
            used.insert(at);
            Some(at)
        })
        .collect()
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

    fn measured(fingerprint: &str, check: &str) -> Issue {
        Issue {
            id: String::new(),
            pattern: "P_TGT".to_owned(),
            category: crate::schema::Category::Structure,
            severity: crate::schema::Severity::Warning,
            performance: true,
            file: "train.py".to_owned(),
            line: 3,
            column: 1,
            end_line: 3,
            end_column: 10,
            symbol: None,
            message: "measured".to_owned(),
            snippet: "x.item()".to_owned(),
            related: Vec::new(),
            fix_template: "references/fix-templates/P_TGT.md".to_owned(),
            fix: None,
            fingerprint: fingerprint.to_owned(),
            status: Status::Pending,
            reason: None,
            history: Vec::new(),
            blocking: None,
            measured: Some(crate::schema::Measured {
                check: check.to_owned(),
                evidence: "8 host syncs per step at train.py:3".to_owned(),
                verify_args: vec!["--pipeline".to_owned()],
            }),
            measurement: None,
        }
    }

    #[test]
    fn a_measurement_keeps_status_resolves_what_it_no_longer_sees_and_a_scan_leaves_it_alone() {
        let checks = ["pipeline.syncs"];
        let (file, first) = merge_measured(
            None,
            "proj",
            vec![
                measured("aaaaaaaaaaaaaaaa", "pipeline.syncs"),
                measured("bbbbbbbbbbbbbbbb", "pipeline.syncs"),
            ],
            &checks,
            "t1",
        );
        assert_eq!(first.new.len(), 2);
        assert_eq!(file.root, "proj");
        assert_eq!(file.summary.total, 2);
        let (file, second) = merge_measured(
            Some(file),
            "proj",
            vec![measured("aaaaaaaaaaaaaaaa", "pipeline.syncs")],
            &checks,
            "t2",
        );
        assert_eq!(second.kept, [first.new[0].clone()]);
        assert_eq!(second.resolved, [first.new[1].clone()]);
        // A scan that finds nothing keeps both measured issues as they are.
        let scan = IssuesFile {
            issues: Vec::new(),
            ..file.clone()
        };
        let (after_scan, report) = merge(Some(&file), scan, "t3");
        assert!(report.resolved.is_empty(), "{report:?}");
        assert_eq!(after_scan.issues, file.issues);
        // Another check's measurement does not touch these.
        let (other, report) = merge_measured(
            Some(file.clone()),
            "proj",
            Vec::new(),
            &["pipeline.cpu_fallback"],
            "t4",
        );
        assert!(report.resolved.is_empty());
        assert_eq!(other.issues, file.issues);
    }

    #[test]
    fn unique_id_numbers_exhausted_fingerprints() {
        let taken: BTreeSet<String> = ["RND-ab", "RND-ab-2"].map(str::to_owned).into();
        assert_eq!(unique_id("P_RND", "ab", &taken), "RND-ab-3");
    }
}
