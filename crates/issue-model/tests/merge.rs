//! The rescan merge: ids, statuses and history survive rescans; regressions and resolutions
//! are recorded.

use issue_model::{
    Category, HistoryStatus, Issue, IssuesFile, Severity, Status, Summary, Tool, fingerprint, merge,
};
use std::collections::BTreeSet;

const T0: &str = "2025-01-01T00:00:00Z";
const T1: &str = "2025-01-02T00:00:00Z";

fn issue(pattern: &str, file: &str, snippet: &str, line: u32) -> Issue {
    let fp = fingerprint(pattern, file, Some("M.forward"), snippet, 0);
    Issue {
        id: String::new(),
        pattern: pattern.to_owned(),
        category: Category::Device,
        severity: Severity::Error,
        performance: false,
        file: file.to_owned(),
        line,
        column: 5,
        end_line: line,
        end_column: 20,
        symbol: Some("M.forward".to_owned()),
        message: "m".to_owned(),
        snippet: snippet.to_owned(),
        related: vec![],
        fix_template: format!("references/fix-templates/{pattern}.md"),
        fix: None,
        fingerprint: fp,
        status: Status::Pending,
        reason: None,
        history: vec![],
        blocking: None,
        measured: None,
        measurement: None,
    }
}

fn scan(issues: Vec<Issue>) -> IssuesFile {
    IssuesFile {
        schema_version: issue_model::SCHEMA_VERSION,
        tool: Tool {
            name: "npu-scan".to_owned(),
            version: "0.1.0".to_owned(),
        },
        root: "proj".to_owned(),
        scanned_at: T0.to_owned(),
        summary: Summary::default(),
        issues,
        unparsed: vec![],
        scope: None,
    }
}

fn find<'a>(file: &'a IssuesFile, id: &str) -> &'a Issue {
    file.issues
        .iter()
        .find(|i| i.id == id)
        .unwrap_or_else(|| panic!("no issue {id}"))
}

#[test]
fn first_scan_gives_ids_and_found_entries() {
    let (merged, report) = merge(None, scan(vec![issue("P_RND", "a.py", "x", 3)]), T0);
    let only = &merged.issues[0];
    assert!(
        only.id.starts_with("RND-") && only.id.len() == 10,
        "{}",
        only.id
    );
    assert_eq!(only.status, Status::Pending);
    assert_eq!(only.history.len(), 1);
    assert_eq!(only.history[0].status, HistoryStatus::Found);
    assert_eq!(report.new, vec![only.id.clone()]);
    assert_eq!(merged.summary.total, 1);
    assert_eq!(merged.summary.by_status["pending"], 1);
}

#[test]
fn kept_issues_keep_id_status_reason_and_take_the_new_location() {
    let (mut first, _) = merge(
        None,
        scan(vec![
            issue("P_RND", "a.py", "x", 3),
            issue("P_RND", "a.py", "y", 9),
        ]),
        T0,
    );
    first.issues[0].status = Status::Skipped;
    first.issues[0].reason = Some("seeded on purpose".to_owned());
    let (skipped_id, pending_id) = (first.issues[0].id.clone(), first.issues[1].id.clone());

    // The code moved down by ten lines.
    let (second, report) = merge(
        Some(&first),
        scan(vec![
            issue("P_RND", "a.py", "x", 13),
            issue("P_RND", "a.py", "y", 19),
        ]),
        T1,
    );
    assert_eq!(report.kept, vec![skipped_id.clone(), pending_id.clone()]);
    assert!(report.new.is_empty() && report.regressed.is_empty() && report.resolved.is_empty());
    let skipped = find(&second, &skipped_id);
    assert_eq!(skipped.status, Status::Skipped);
    assert_eq!(skipped.reason.as_deref(), Some("seeded on purpose"));
    assert_eq!(skipped.line, 13);
    assert_eq!(find(&second, &pending_id).line, 19);
    assert_eq!(second.issues.len(), 2);
}

#[test]
fn a_fixed_issue_found_again_is_regressed() {
    let (mut first, _) = merge(None, scan(vec![issue("P_RND", "a.py", "x", 3)]), T0);
    first.issues[0].status = Status::Fixed;
    let id = first.issues[0].id.clone();
    let (second, report) = merge(Some(&first), scan(vec![issue("P_RND", "a.py", "x", 3)]), T1);
    assert_eq!(report.regressed, vec![id.clone()]);
    let again = find(&second, &id);
    assert_eq!(again.status, Status::Pending);
    let last = again.history.last().map(|h| (h.status, h.at.as_str()));
    assert_eq!(last, Some((HistoryStatus::Regressed, T1)));
}

#[test]
fn vanished_pending_issues_are_resolved_and_others_kept() {
    let (mut first, _) = merge(
        None,
        scan(vec![
            issue("P_RND", "a.py", "pending", 1),
            issue("P_RND", "a.py", "fixed", 2),
            issue("P_RND", "a.py", "skipped", 3),
        ]),
        T0,
    );
    first.issues[1].status = Status::Fixed;
    first.issues[2].status = Status::Skipped;
    first.issues[2].reason = Some("r".to_owned());
    let ids: Vec<String> = first.issues.iter().map(|i| i.id.clone()).collect();

    let (second, report) = merge(Some(&first), scan(vec![]), T1);
    assert_eq!(report.resolved, vec![ids[0].clone()]);
    assert_eq!(second.issues.len(), 3, "the record of the work is kept");
    let resolved = find(&second, &ids[0]);
    assert_eq!(resolved.status, Status::Fixed);
    assert_eq!(
        resolved.history.last().map(|h| h.status),
        Some(HistoryStatus::Resolved)
    );
    assert_eq!(find(&second, &ids[1]).status, Status::Fixed);
    assert_eq!(find(&second, &ids[1]).history.len(), 1);
    assert_eq!(find(&second, &ids[2]).status, Status::Skipped);
    assert_eq!(second.summary.by_status.get("pending"), None);
}

#[test]
fn colliding_short_ids_get_longer() {
    let mut a = issue("P_RND", "a.py", "x", 1);
    let mut b = issue("P_RND", "b.py", "y", 1);
    a.fingerprint = "abcdef0011111111".to_owned();
    b.fingerprint = "abcdef0022222222".to_owned();
    let (merged, _) = merge(None, scan(vec![a.clone(), b.clone()]), T0);
    assert_eq!(merged.issues[0].id, "RND-abcdef");
    assert_eq!(merged.issues[1].id, "RND-abcdef00");

    // An id already taken in the previous file is never given to a new issue.
    let mut c = issue("P_RND", "c.py", "z", 1);
    c.fingerprint = "abcdef0033333333".to_owned();
    let (second, report) = merge(Some(&merged), scan(vec![c, a, b]), T1);
    assert_eq!(report.new, vec!["RND-abcdef0033".to_owned()]);
    assert_eq!(
        report.kept,
        vec!["RND-abcdef".to_owned(), "RND-abcdef00".to_owned()]
    );
    let ids: BTreeSet<&str> = second.issues.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids.len(), 3);
}

#[test]
fn a_repeated_fingerprint_is_kept_once() {
    let a = issue("P_RND", "a.py", "x", 1);
    let (first, _) = merge(None, scan(vec![a.clone()]), T0);
    let (second, report) = merge(Some(&first), scan(vec![a.clone(), a]), T1);
    assert_eq!(report.kept, vec![first.issues[0].id.clone()]);
    assert!(report.new.is_empty());
    assert_eq!(second.issues.len(), 1);
    issue_model::parse(
        std::path::Path::new("m.json"),
        issue_model::to_json(&second).as_bytes(),
    )
    .unwrap_or_else(|e| panic!("the merged file must be valid: {e}"));
}

/// `issue` with an anchored fingerprint: the line part from `snippet`, the anchor from
/// `message` and the `occurrence` among equal anchors.
fn anchored(snippet: &str, line: u32, message: &str, occurrence: usize) -> Issue {
    let mut i = issue("P_F64", "a.py", snippet, line);
    message.clone_into(&mut i.message);
    i.fingerprint = issue_model::anchored_fingerprint(
        &i.fingerprint,
        "P_F64",
        "a.py",
        i.symbol.as_deref(),
        message,
        (0, 13),
        occurrence,
    );
    i
}

#[test]
fn an_edit_of_the_line_by_another_fix_keeps_the_id() {
    let before = anchored("y = x.to(torch.float64); ok = d == \"cuda\"", 4, "f64", 0);
    let (mut first, _) = merge(None, scan(vec![before]), T0);
    first.issues[0].status = Status::Skipped;
    first.issues[0].reason = Some("host cast".to_owned());
    let id = first.issues[0].id.clone();
    // The device comparison on the same line was fixed: the line's text changed.
    let after = anchored(
        "y = x.to(torch.float64); ok = d in (\"cuda\", \"npu\")",
        4,
        "f64",
        0,
    );
    let (second, report) = merge(Some(&first), scan(vec![after.clone()]), T1);
    assert_eq!(report.kept, vec![id.clone()]);
    assert!(report.new.is_empty() && report.resolved.is_empty());
    assert_eq!(second.issues.len(), 1);
    let kept = find(&second, &id);
    assert_eq!(kept.status, Status::Skipped);
    assert_eq!(kept.fingerprint, after.fingerprint);
    assert_eq!(kept.snippet, after.snippet);
}

#[test]
fn a_file_written_before_anchors_keeps_its_ids() {
    let old = issue("P_F64", "a.py", "y = x.double()", 4);
    let (first, _) = merge(None, scan(vec![old]), T0);
    let id = first.issues[0].id.clone();
    assert_eq!(first.issues[0].fingerprint.len(), 16);
    let (second, report) = merge(
        Some(&first),
        scan(vec![anchored("y = x.double()", 9, "f64", 0)]),
        T1,
    );
    assert_eq!(report.kept, vec![id.clone()]);
    assert_eq!(find(&second, &id).line, 9);
}

#[test]
fn fixing_one_of_two_equal_findings_resolves_that_one() {
    // Two float64 casts with the same anchor in one function, on different lines.
    let a = anchored("a = x.to(torch.float64)", 3, "f64", 0);
    let b = anchored("b = y.to(torch.float64)", 4, "f64", 1);
    let (first, _) = merge(None, scan(vec![a, b]), T0);
    let (a_id, b_id) = (first.issues[0].id.clone(), first.issues[1].id.clone());
    // `a` is fixed: `b` is now the first of its anchor, but its line is unchanged.
    let b_again = anchored("b = y.to(torch.float64)", 4, "f64", 0);
    let (second, report) = merge(Some(&first), scan(vec![b_again]), T1);
    assert_eq!(report.kept, vec![b_id.clone()]);
    assert_eq!(report.resolved, vec![a_id.clone()]);
    assert_eq!(find(&second, &a_id).status, Status::Fixed);
    assert_eq!(find(&second, &b_id).status, Status::Pending);
}

/// The scanner's mark of a finding an inline `# npu: ignore` comment suppresses.
fn ignored(mut issue: Issue, why: &str) -> Issue {
    issue.status = Status::Skipped;
    issue.reason = Some(format!("{} {why}", issue_model::INLINE_IGNORE));
    issue
}

#[test]
fn an_inline_ignore_is_skipped_with_its_reason_never_fixed_and_survives_rescans() {
    let a = issue("P_VEC", "a.py", "for x in xs:", 3);
    let (first, _) = merge(None, scan(vec![a.clone()]), T0);
    let id = first.issues[0].id.clone();
    // The comment is added: the rescan sees the finding suppressed, not gone.
    let (second, report) = merge(
        Some(&first),
        scan(vec![ignored(a.clone(), "runs once")]),
        T1,
    );
    let it = find(&second, &id);
    assert_eq!(it.status, Status::Skipped, "{it:?}");
    assert_eq!(
        it.reason.as_deref(),
        Some("ignored inline: runs once"),
        "the comment's reason is recorded"
    );
    assert_eq!(report.ignored, vec![id.clone()]);
    assert!(report.resolved.is_empty(), "an ignore comment is not a fix");
    assert_eq!(
        it.history.last().map(|h| h.status),
        Some(HistoryStatus::Skipped)
    );
    // Rescanned with the comment still there: nothing changes.
    let (third, report) = merge(
        Some(&second),
        scan(vec![ignored(a.clone(), "runs once")]),
        T1,
    );
    assert_eq!(find(&third, &id), find(&second, &id));
    assert_eq!(report.kept, vec![id.clone()]);
    // The comment is removed: pending again.
    let (fourth, report) = merge(Some(&third), scan(vec![a]), T1);
    let it = find(&fourth, &id);
    assert_eq!(it.status, Status::Pending);
    assert_eq!(it.reason, None);
    assert_eq!(
        it.history.last().map(|h| h.status),
        Some(HistoryStatus::Reopened)
    );
    assert_eq!(report.reopened, vec![id]);
}

#[test]
fn a_new_finding_under_an_ignore_comment_is_recorded_skipped() {
    let a = ignored(issue("P_VEC", "a.py", "for x in xs:", 3), "runs once");
    let (file, report) = merge(None, scan(vec![a]), T0);
    let it = &file.issues[0];
    assert_eq!(it.status, Status::Skipped);
    let kinds: Vec<_> = it.history.iter().map(|h| h.status).collect();
    assert_eq!(kinds, [HistoryStatus::Found, HistoryStatus::Skipped]);
    assert_eq!(report.new, report.ignored);
    assert_eq!(file.summary.by_status["skipped"], 1);
    let text = issue_model::to_json(&file);
    let back = issue_model::parse(std::path::Path::new("issues.json"), text.as_bytes());
    assert!(back.is_ok(), "{back:?}");
}

#[test]
fn a_user_skip_is_not_undone_by_a_rescan_without_a_comment() {
    let a = issue("P_RND", "a.py", "torch.manual_seed(0)", 3);
    let (mut file, _) = merge(None, scan(vec![a.clone()]), T0);
    file.issues[0].status = Status::Skipped;
    file.issues[0].reason = Some("seeded on purpose".to_owned());
    let (again, _) = merge(Some(&file), scan(vec![a]), T1);
    assert_eq!(again.issues[0].status, Status::Skipped);
    assert_eq!(again.issues[0].reason.as_deref(), Some("seeded on purpose"));
}

#[test]
fn an_excluded_file_is_out_of_scope_not_fixed_and_pending_again_when_scanned() {
    let kept = issue("P_VEC", "train.py", "for x in xs:", 3);
    let other = issue("P_VEC", "policies/b/model.py", "for y in ys:", 9);
    let (first, _) = merge(None, scan(vec![kept.clone(), other.clone()]), T0);
    let id = first
        .issues
        .iter()
        .find(|i| i.file == "policies/b/model.py")
        .map(|i| i.id.clone())
        .unwrap_or_default();
    let not_scanned = |i: &Issue| {
        i.file
            .starts_with("policies/b/")
            .then(|| "not scanned: excluded by --exclude `policies/b`".to_owned())
    };
    // Rescanned with the policy excluded: not found, but not fixed either.
    let (second, report) =
        issue_model::merge_scanned(Some(&first), scan(vec![kept.clone()]), T1, &not_scanned);
    let it = find(&second, &id);
    assert_eq!(it.status, Status::OutOfScope, "{it:?}");
    assert_eq!(
        it.reason.as_deref(),
        Some("not scanned: excluded by --exclude `policies/b`")
    );
    assert!(report.resolved.is_empty(), "{report:?}");
    assert_eq!(report.out_of_scope, vec![id.clone()]);
    assert_eq!(second.summary.by_status.get("fixed"), None);
    assert_eq!(second.summary.by_status["out_of_scope"], 1);
    let text = issue_model::to_json(&second);
    assert!(text.contains("\"status\": \"out_of_scope\""), "{text}");
    let back = issue_model::parse(std::path::Path::new("issues.json"), text.as_bytes());
    assert_eq!(back.ok().as_ref(), Some(&second), "out_of_scope reads back");
    // Excluded again: unchanged.
    let (third, report) =
        issue_model::merge_scanned(Some(&second), scan(vec![kept.clone()]), T1, &not_scanned);
    assert_eq!(find(&third, &id), find(&second, &id));
    assert!(report.out_of_scope.is_empty() && report.resolved.is_empty());
    // Scanned again without the exclude: pending again.
    let (fourth, report) = merge(Some(&third), scan(vec![kept.clone(), other]), T1);
    let it = find(&fourth, &id);
    assert_eq!(it.status, Status::Pending);
    assert_eq!(it.reason, None);
    assert_eq!(report.reopened, vec![id.clone()]);
    // Out of scope, then scanned and gone: the rescan checked it, so it is fixed.
    let (fifth, _) = merge(Some(&third), scan(vec![kept]), T1);
    assert_eq!(find(&fifth, &id).status, Status::Fixed);
}

/// The scanner's mark of a finding outside `npu-scan --scope`.
fn outside(mut issue: Issue) -> Issue {
    issue.status = Status::OutOfScope;
    issue.reason =
        Some("out of scope: not reached by `python train.py` (entry train.py)".to_owned());
    issue
}

#[test]
fn a_finding_outside_the_scope_is_out_of_scope_never_fixed_unless_skipped() {
    let fixed = issue("P_VEC", "b/model.py", "for x in xs:", 3);
    let skipped = issue("P_RND", "b/model.py", "torch.rand(3)", 5);
    let fresh = issue("P_DEV", "b/model.py", "x == \"cuda\"", 7);
    let (mut first, _) = merge(None, scan(vec![fixed.clone(), skipped.clone()]), T0);
    first.issues[0].status = Status::Fixed;
    first.issues[1].status = Status::Skipped;
    first.issues[1].reason = Some("seeded on purpose".to_owned());
    let (ids, scoped) = (
        [first.issues[0].id.clone(), first.issues[1].id.clone()],
        vec![
            outside(fixed.clone()),
            outside(skipped.clone()),
            outside(fresh.clone()),
        ],
    );
    let (second, report) = merge(Some(&first), scan(scoped), T1);
    // Found again outside the scope: not fixed (it is still there), not pending.
    assert_eq!(find(&second, &ids[0]).status, Status::OutOfScope);
    assert_eq!(
        find(&second, &ids[0]).history.last().map(|h| h.status),
        Some(HistoryStatus::OutOfScope)
    );
    // A skip is the user's word: kept.
    assert_eq!(find(&second, &ids[1]).status, Status::Skipped);
    assert_eq!(
        find(&second, &ids[1]).reason.as_deref(),
        Some("seeded on purpose")
    );
    // New outside the scope: recorded, out of scope.
    let new = &report.new[0];
    assert_eq!(find(&second, new).status, Status::OutOfScope);
    assert_eq!(report.out_of_scope.len(), 2, "{report:?}");
    assert!(report.resolved.is_empty() && report.regressed.is_empty());
    // A scan that reaches them: pending again.
    let (third, report) = merge(Some(&second), scan(vec![fixed, skipped, fresh]), T1);
    assert_eq!(find(&third, &ids[0]).status, Status::Pending);
    assert_eq!(find(&third, new).status, Status::Pending);
    assert_eq!(find(&third, &ids[1]).status, Status::Skipped);
    assert_eq!(report.reopened.len(), 2, "{report:?}");
}
