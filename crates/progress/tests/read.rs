//! `--next`, `--show`, `--list`, `--summary`, `--check-complete`, `--help`.

mod common;

use common::{Fixture, T0, assert_contains, issue};
use issue_model::{HistoryEntry, HistoryStatus, Issue, Severity, Status};

fn policy_source() -> String {
    (1..=20)
        .map(|n| {
            if n == 10 {
                "        noise = torch.randn(b, 16)\n".to_owned()
            } else {
                format!("        line_{n} = {n}\n")
            }
        })
        .collect()
}

#[test]
fn help_shows_examples_and_exit_codes() {
    let f = Fixture::empty();
    let (code, out, err) = f.run(&["--help"]);
    assert_eq!(code, 0, "{err}");
    assert_contains(&out, "Examples:");
    assert_contains(&out, "npu-progress issues.json --next");
    assert_contains(&out, "--skip RND-77b0d3 --reason");
    assert_contains(&out, "Exit status: 0 ok; 1 pending");
    assert!(err.is_empty());
}

#[test]
fn no_command_is_a_usage_error() {
    let f = Fixture::new(vec![]);
    let (code, out, err) = f.run(&["issues.json"]);
    assert_eq!(code, 2);
    assert!(out.is_empty());
    assert_contains(&err, "--next");
}

#[test]
fn next_shows_the_issue_with_its_code_and_records_that_it_was_shown() {
    let mut rnd = issue(
        "RND-4f1a9c",
        "P_RND",
        Severity::Error,
        "models/policy.py",
        10,
    );
    rnd.column = 17;
    rnd.end_column = 35;
    rnd.snippet = "noise = torch.randn(b, 16)".to_owned();
    rnd.related.push(issue_model::Related {
        file: "models/policy.py".to_owned(),
        line: 14,
        column: 9,
        note: "drawn again here".to_owned(),
    });
    let f = Fixture::new(vec![
        rnd,
        issue(
            "RND-000002",
            "P_RND",
            Severity::Warning,
            "models/policy.py",
            3,
        ),
    ]);
    f.write("proj/models/policy.py", &policy_source());

    let (code, out, err) = f.run(&["issues.json", "--next"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.is_empty(), "{err}");
    let expected = "\
RND-4f1a9c  error  P_RND  DEVICE
models/policy.py:10:17  in Policy.forward
message of RND-4f1a9c

     7 |         line_7 = 7
     8 |         line_8 = 8
     9 |         line_9 = 9
  > 10 |         noise = torch.randn(b, 16)
       |                 ^^^^^^^^^^^^^^^^^^
    11 |         line_11 = 11
    12 |         line_12 = 12
    13 |         line_13 = 13

related: models/policy.py:14:9  drawn again here
fix template: references/fix-templates/P_RND.md
remaining: 2 pending (this one included)

fixed it?       npu-progress issues.json --fixed RND-4f1a9c
false positive? npu-progress issues.json --skip RND-4f1a9c --reason \"...\"
";
    assert_eq!(out, expected);

    let shown = f.issue("RND-4f1a9c");
    assert_eq!(
        shown.history.iter().map(|h| h.status).collect::<Vec<_>>(),
        [HistoryStatus::Found, HistoryStatus::Shown]
    );
    // Shown again: nothing new is recorded, the file is untouched.
    let before = f.bytes();
    let (code, again, _) = f.run(&["issues.json", "--next"]);
    assert_eq!(code, 0);
    assert_eq!(again, expected);
    assert_eq!(f.bytes(), before);
}

/// Five pending issues and the order `--next` must take them in.
fn ordered_issues() -> (Vec<Issue>, [&'static str; 5]) {
    let issues = vec![
        issue("RND-00000w", "P_RND", Severity::Warning, "a.py", 1),
        issue("RND-0000b9", "P_RND", Severity::Error, "b.py", 9),
        issue("RND-0000t3", "P_RND", Severity::Error, "train.py", 3),
        issue("ENT-0000t8", "P_ENT", Severity::Error, "train.py", 80),
        issue("RND-0000a5", "P_RND", Severity::Error, "a.py", 5),
    ];
    let order = [
        "ENT-0000t8",
        "RND-0000t3",
        "RND-0000a5",
        "RND-0000b9",
        "RND-00000w",
    ];
    (issues, order)
}

/// `--next` then `--fixed`, `count` times, in a file with `pending` pending issues; each issue
/// shown is shown again unchanged by a second `--next`, and ends with one `shown` entry. The
/// ids shown, in order.
fn work_through(f: &Fixture, count: usize, pending: usize) -> Vec<String> {
    let mut seen = Vec::new();
    for _ in 0..count {
        let (code, out, err) = f.run(&["--next", "--format", "json"]);
        assert_eq!(code, 0, "{err}");
        let value: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        let id = value["issue"]["id"].as_str().unwrap_or_default().to_owned();
        assert_eq!(value["remaining"], pending - seen.len(), "{out}");
        let (code, again, err) = f.run(&["--next", "--format", "json"]);
        assert_eq!((code, &again), (0, &out), "{err}");
        let (code, _, err) = f.run(&["--fixed", &id]);
        assert_eq!(code, 0, "{err}");
        seen.push(id);
    }
    let file = f.load();
    for id in &seen {
        let issue = file.issues.iter().find(|i| &i.id == id);
        let statuses: Vec<HistoryStatus> = issue
            .map(|i| i.history.iter().map(|h| h.status).collect())
            .unwrap_or_default();
        assert_eq!(
            statuses,
            [
                HistoryStatus::Found,
                HistoryStatus::Shown,
                HistoryStatus::Fixed
            ],
            "{id}"
        );
    }
    seen
}

#[test]
fn next_order_is_errors_then_entry_points_then_files() {
    let (issues, order) = ordered_issues();
    let f = Fixture::new(issues);
    assert_eq!(work_through(&f, 5, 5), order);
    let (code, out, _) = f.run(&["--next"]);
    assert_eq!(code, 0);
    assert_contains(&out, "nothing pending");
    assert_contains(&out, "npu-progress issues.json --check-complete");
}

/// The same order in a large file, where most issues share a pattern and a file.
#[test]
fn next_order_in_a_large_file_is_the_same() {
    let (mut issues, order) = ordered_issues();
    issues.extend((0..2100u32).map(|n| {
        issue(
            &format!("TGT-{n:06}"),
            "P_TGT",
            Severity::Info,
            "z.py",
            2100 - n,
        )
    }));
    let f = Fixture::new(issues);
    assert_eq!(work_through(&f, 5, 2105), order);
    // The info issues come last line first (by line), and a pattern narrows the pick.
    let (code, out, err) = f.run(&["--next", "--pattern", "tgt", "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let value: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    assert_eq!(value["issue"]["id"], "TGT-002099");
    assert_eq!(value["remaining"], 2100);
}

#[test]
fn next_json_is_stable() {
    let mut rnd = issue(
        "RND-000001",
        "P_RND",
        Severity::Error,
        "models/policy.py",
        10,
    );
    rnd.snippet = "noise = torch.randn(b, 16)".to_owned();
    let f = Fixture::new(vec![rnd]);
    f.write("proj/models/policy.py", &policy_source());
    let (code, out, err) = f.run(&["issues.json", "--next", "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let value: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(value["remaining"], 1);
    assert_eq!(value["issue"]["id"], "RND-000001");
    assert_eq!(value["issue"]["history"][1]["status"], "shown");
    assert_eq!(value["excerpt"]["lines"][3]["number"], 10);
    assert_eq!(value["excerpt"]["lines"][3]["marked"], true);
    assert_eq!(
        value["excerpt"]["lines"][3]["text"],
        "        noise = torch.randn(b, 16)"
    );
    assert_eq!(
        value["excerpt"]["lines"][3]["span"],
        serde_json::json!([5, 10])
    );
    assert!(value["excerpt"].get("note").is_none(), "{out}");
    assert!(value["excerpt_error"].is_null());
}

#[test]
fn next_says_why_the_code_cannot_be_shown() {
    let f = Fixture::new(vec![issue(
        "RND-000001",
        "P_RND",
        Severity::Error,
        "gone.py",
        10,
    )]);
    let (code, out, err) = f.run(&["--next"]);
    assert_eq!(code, 0, "{err}");
    assert_contains(
        &out,
        "(code not shown: cannot find gone.py (looked at proj/gone.py, ./gone.py))",
    );
    assert_contains(&out, "  > snippet of RND-000001");

    // A file shorter than the issue's line changed since the scan.
    f.write("proj/gone.py", "x = 1\n");
    let (_, out, _) = f.run(&["--next"]);
    assert_contains(&out, "has 1 lines, but the issue is on line 10");
}

#[test]
fn root_is_found_relative_to_the_issues_json_directory() {
    let f = Fixture::empty();
    let sub = Fixture::new(vec![issue(
        "RND-000001",
        "P_RND",
        Severity::Error,
        "models/policy.py",
        10,
    )]);
    drop(f);
    sub.write("proj/models/policy.py", &policy_source());
    // Run from the parent of the fixture's directory, naming issues.json by a path.
    let parent = sub
        .dir
        .path()
        .parent()
        .unwrap_or_else(|| panic!("a temp dir has a parent"));
    let name = sub
        .dir
        .path()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let output = sub
        .cmd()
        .current_dir(parent)
        .args([format!("{name}/issues.json").as_str(), "--next"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let out = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0));
    assert_contains(&out, "  > 10 |         noise = torch.randn(b, 16)");
    assert_contains(
        &out,
        &format!("npu-progress {name}/issues.json --fixed RND-000001"),
    );
}

#[cfg(unix)]
#[test]
fn next_on_a_read_only_file_shows_the_issue_and_leaves_the_file_alone() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fixture::new(vec![issue(
        "RND-000001",
        "P_RND",
        Severity::Error,
        "a.py",
        1,
    )]);
    std::fs::set_permissions(f.issues_json(), std::fs::Permissions::from_mode(0o444))
        .unwrap_or_else(|e| panic!("{e}"));
    let before = f.bytes();
    let (code, out, err) = f.run(&["--next"]);
    assert_eq!(code, 0, "{err}");
    assert_contains(&out, "RND-000001  error  P_RND");
    assert_contains(
        &err,
        "npu-progress: warning: cannot record when this issue was shown",
    );
    assert_contains(&err, "read-only");
    assert_eq!(f.bytes(), before);
}

#[test]
fn next_narrowed_to_a_pattern() {
    let f = Fixture::new(vec![
        issue("ENT-000001", "P_ENT", Severity::Error, "a.py", 1),
        issue("RND-000002", "P_RND", Severity::Error, "a.py", 2),
    ]);
    let (code, out, _) = f.run(&["--next", "--pattern", "rnd"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("RND-000002"), "{out}");
    assert_contains(&out, "remaining: 1 pending (this is the last one)");
    let (code, out, _) = f.run(&["--next", "--pattern", "P_FLA"]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "no pending issue of pattern P_FLA (2 pending in all)\n"
    );
}

fn done_fixture() -> Fixture {
    let mut fixed = issue("RND-000001", "P_RND", Severity::Error, "a.py", 1);
    fixed.status = Status::Fixed;
    fixed.history.extend([
        HistoryEntry {
            at: "2025-03-01T08:01:00Z".to_owned(),
            status: HistoryStatus::Shown,
            note: None,
        },
        HistoryEntry {
            at: "2025-03-01T08:05:30Z".to_owned(),
            status: HistoryStatus::Fixed,
            note: Some("device=x.device".to_owned()),
        },
    ]);
    let mut skipped = issue("FLA-000002", "P_FLA", Severity::Warning, "b.py", 2);
    skipped.status = Status::Skipped;
    skipped.reason = Some("only imported for type hints".to_owned());
    skipped.history.extend([
        HistoryEntry {
            at: "2025-03-01T09:00:00Z".to_owned(),
            status: HistoryStatus::Shown,
            note: None,
        },
        HistoryEntry {
            at: "2025-03-01T10:02:00Z".to_owned(),
            status: HistoryStatus::Skipped,
            note: Some("only imported for type hints".to_owned()),
        },
    ]);
    Fixture::new(vec![fixed, skipped])
}

#[test]
fn check_complete_passes_only_when_nothing_is_pending() {
    let f = done_fixture();
    // The seed runs it without naming the file: issues.json in the current directory.
    let (code, out, err) = f.run(&["--check-complete"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "complete: all 2 issues are handled (1 fixed, 1 skipped)\n"
    );

    let (code, _, err) = f.run(&["--reopen", "RND-000001"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = f.run(&["issues.json", "--check-complete"]);
    assert_eq!(code, 1, "{err}");
    assert_contains(&out, "incomplete: 1 of 2 issues pending\n");
    assert_contains(
        &out,
        "RND-000001  pending  error    P_RND   a.py:1:5  message of RND-000001",
    );
    assert_contains(
        &out,
        "work through them with: npu-progress issues.json --next",
    );
    assert!(!out.contains("FLA-000002"));

    let (code, out, _) = f.run(&["--check-complete", "--format", "json"]);
    assert_eq!(code, 1);
    let value: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    assert_eq!(value["complete"], false);
    assert_eq!(value["pending"][0]["id"], "RND-000001");
    assert_eq!(value["by_status"]["skipped"], 1);
}

#[test]
fn check_complete_on_an_empty_scan_passes() {
    let f = Fixture::new(vec![]);
    let (code, out, _) = f.run(&["--check-complete"]);
    assert_eq!(code, 0);
    assert_contains(&out, "complete: all 0 issues are handled");
}

#[test]
fn list_filters_by_status_and_pattern() {
    let f = done_fixture();
    let (code, out, err) = f.run(&["--list"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "RND-000001  fixed    error    P_RND   a.py:1:5  message of RND-000001\n\
         FLA-000002  skipped  warning  P_FLA   b.py:2:5  message of FLA-000002\n"
    );
    let (_, out, _) = f.run(&["--list", "--status", "skipped,pending"]);
    assert!(
        out.starts_with("FLA-000002") && out.lines().count() == 1,
        "{out}"
    );
    let (_, out, _) = f.run(&["--list", "--pattern", "RND", "--format", "json"]);
    let value: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    assert_eq!(value.as_array().map(Vec::len), Some(1));
    assert_eq!(value[0]["id"], "RND-000001");
    let (code, out, err) = f.run(&["--list", "--status", "pending"]);
    assert_eq!(code, 0);
    assert!(out.is_empty());
    assert_contains(&err, "no issue matches");
}

#[test]
fn show_gives_the_whole_story() {
    let f = done_fixture();
    let (code, out, err) = f.run(&["--show", "fla-000002"]);
    assert_eq!(code, 0, "{err}");
    assert_contains(
        &out,
        "FLA-000002  warning  P_FLA  DEVICE\nb.py:2:5  in Policy.forward\n",
    );
    assert_contains(&out, "status: skipped (only imported for type hints)\n");
    assert_contains(&out, "time spent: 1h02m\n");
    assert_contains(
        &out,
        &format!(
            "history:\n  {T0}  found\n  2025-03-01T09:00:00Z  shown\n  2025-03-01T10:02:00Z  skipped  only imported for type hints\n"
        ),
    );
    let (_, out, _) = f.run(&["--show", "RND-000001", "--format", "json"]);
    let value: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    assert_eq!(value["issue"]["status"], "fixed");
    assert_eq!(value["seconds_spent"], 270);
    assert!(
        value["excerpt_error"]
            .as_str()
            .is_some_and(|e| e.contains("cannot find a.py"))
    );
}

#[test]
fn summary_counts_and_times() {
    let f = done_fixture();
    let (code, out, err) = f.run(&["--summary"]);
    assert_eq!(code, 0, "{err}");
    let expected = "\
issues.json: 2 issues, 0 pending

pattern  pending  fixed  skipped  total
P_FLA          0      0        1      1
P_RND          0      1        0      1
total          0      1        1      2

time spent (shown by --next, reopened or regressed, until fixed or skipped):
  RND-000001    4m30s  fixed
  FLA-000002    1h02m  skipped
  total         1h06m  over 2 issues
";
    assert_eq!(out, expected);
    let (_, out, _) = f.run(&["--summary", "--format", "json"]);
    let value: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    assert_eq!(value["seconds_total"], 270 + 3720);
    assert_eq!(value["by_pattern"]["P_RND"]["fixed"], 1);
    assert_eq!(value["time"][1]["id"], "FLA-000002");
}

#[test]
fn flags_that_do_not_fit_the_command_are_usage_errors() {
    let f = done_fixture();
    for args in [
        &["--list", "--reason", "x"][..],
        &["--summary", "--status", "pending"],
        &["--next", "--status", "fixed"],
        &["--check-complete", "--force"],
        &["--next", "--list"],
    ] {
        let before = f.bytes();
        let (code, out, err) = f.run(args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(out.is_empty(), "{args:?}");
        assert!(!err.is_empty(), "{args:?}");
        assert_eq!(f.bytes(), before);
    }
}

#[test]
fn color_only_when_asked_or_on_a_terminal() {
    let f = Fixture::new(vec![issue(
        "RND-000001",
        "P_RND",
        Severity::Error,
        "a.py",
        1,
    )]);
    let (_, plain, _) = f.run(&["--list"]);
    assert!(!plain.contains('\x1b'), "{plain:?}");
    let (code, colored, _) = f.run(&["--list", "--color", "always"]);
    assert_eq!(code, 0);
    assert_contains(&colored, "\x1b[1;31merror\x1b[0m");
    // JSON is never colored.
    let (_, json, _) = f.run(&["--list", "--color", "always", "--format", "json"]);
    assert!(!json.contains('\x1b'));
}

#[test]
fn version_flag() {
    let f = Fixture::empty();
    let (code, out, _) = f.run(&["-V"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("npu-progress "), "{out}");
}

#[test]
fn hints_name_the_command_the_bundle_launcher_was_run_as() {
    let f = Fixture::new(vec![issue(
        "RND-000001",
        "P_RND",
        Severity::Error,
        "models/policy.py",
        10,
    )]);
    let output = f
        .cmd()
        .env("NPU_PATCHER_INVOKED_AS", "python skill/scripts/progress.py")
        .args(["issues.json", "--next"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let out = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{out}");
    assert_contains(
        &out,
        "fixed it?       python skill/scripts/progress.py issues.json --fixed RND-000001",
    );
    assert!(!out.contains("npu-progress issues.json"), "{out}");
}

#[test]
fn out_of_scope_issues_do_not_block_check_complete_and_are_listed_apart() {
    let mut fixed = issue("RND-000001", "P_RND", Severity::Error, "train.py", 1);
    fixed.status = Status::Fixed;
    let mut outside = issue("VEC-000002", "P_VEC", Severity::Warning, "policies/b.py", 3);
    outside.performance = true;
    outside.status = Status::OutOfScope;
    outside.reason =
        Some("out of scope: not reached by `python train.py` (entry train.py)".to_owned());
    let f = Fixture::new(vec![fixed, outside]);
    let (code, out, err) = f.run(&["--check-complete"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "complete: all 2 issues are handled (1 fixed, 0 skipped, 1 out of scope)\n"
    );
    let (code, out, err) = f.run(&["--list", "--status", "out_of_scope"]);
    assert_eq!(code, 0, "{err}");
    assert_contains(&out, "VEC-000002");
    assert!(!out.contains("RND-000001"), "{out}");
    let (code, out, _) = f.run(&["--next"]);
    assert_eq!(code, 0);
    assert!(!out.contains("VEC-000002"), "not pending: {out}");
    let (code, out, err) = f.run(&["--summary"]);
    assert_eq!(code, 0, "{err}");
    assert_contains(&out, "out_of_scope");
}
