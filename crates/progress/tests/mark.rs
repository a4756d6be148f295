//! `--fixed`, `--skip`, `--reopen`, bad issues.json files, and concurrent writers.

mod common;

use common::{Fixture, assert_contains, issue};
use issue_model::{HistoryStatus, Severity, Status};
use std::process::Stdio;

#[test]
fn fixed_marks_once_and_a_repeat_is_harmless() {
    let f = Fixture::new(vec![
        issue("RND-000001", "P_RND", Severity::Error, "a.py", 1),
        issue("RND-000002", "P_RND", Severity::Error, "a.py", 2),
    ]);
    let (code, out, err) = f.run(&["issues.json", "--fixed", "RND-000001"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "RND-000001: marked fixed (1 pending)\n");
    // The project is not there, so the fix could not be re-checked: said, and accepted.
    assert_contains(
        &err,
        "npu-progress: warning: cannot re-check RND-000001: the file is gone (looked at proj/a.py, ./a.py); marking it fixed anyway",
    );
    assert_contains(&err, "npu-progress: next: npu-progress issues.json --next");
    let fixed = f.issue("RND-000001");
    assert_eq!(fixed.status, Status::Fixed);
    assert_eq!(
        fixed.history.last().map(|h| h.status),
        Some(HistoryStatus::Fixed)
    );

    let before = f.bytes();
    let (code, out, _) = f.run(&["issues.json", "--fixed", "RND-000001"]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "RND-000001 is already fixed; nothing changed (1 pending)\n"
    );
    assert_eq!(f.bytes(), before, "a repeated --fixed writes nothing");

    let (code, out, _) = f.run(&[
        "--fixed",
        "RND-000002",
        "--reason",
        "moved to the device",
        "-q",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0);
    let value: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    assert_eq!(value["changed"], true);
    assert_eq!(value["pending"], 0);
    assert_eq!(value["status"], "fixed");
    assert_eq!(
        f.issue("RND-000002")
            .history
            .last()
            .and_then(|h| h.note.clone())
            .as_deref(),
        Some("moved to the device")
    );
}

#[test]
fn unknown_ids_get_the_closest_ones() {
    let f = Fixture::new(vec![
        issue("RND-4f1a9c", "P_RND", Severity::Error, "a.py", 1),
        issue("FLA-77b0d3", "P_FLA", Severity::Error, "a.py", 2),
    ]);
    let before = f.bytes();
    for args in [
        &["--fixed", "RND-4f1a9d"][..],
        &["--skip", "RND-4f1a9d", "--reason", "r"],
        &["--reopen", "RND-4f1a9d"],
        &["--show", "RND-4f1a9d"],
    ] {
        let (code, out, err) = f.run(args);
        assert_eq!(code, 2, "{args:?}");
        assert!(out.is_empty());
        assert_eq!(
            err,
            "npu-progress: error: no issue `RND-4f1a9d` in issues.json; did you mean RND-4f1a9c?\n"
        );
    }
    let (_, _, err) = f.run(&["--fixed", "nothing-like-it"]);
    assert_contains(
        &err,
        "no issue `nothing-like-it` in issues.json; list the ids with --list",
    );
    assert_eq!(f.bytes(), before);
}

#[test]
fn skip_needs_a_reason() {
    let f = Fixture::new(vec![issue(
        "RND-000001",
        "P_RND",
        Severity::Error,
        "a.py",
        1,
    )]);
    let before = f.bytes();
    for args in [
        &["issues.json", "--skip", "RND-000001"][..],
        &["issues.json", "--skip", "RND-000001", "--reason", "   "],
    ] {
        let (code, out, err) = f.run(args);
        assert_eq!(code, 2);
        assert!(out.is_empty());
        assert_eq!(
            err,
            "npu-progress: error: a skip needs a reason: npu-progress issues.json --skip RND-000001 --reason \"why this is a false positive\"\n"
        );
    }
    assert_eq!(f.bytes(), before);

    let (code, out, err) = f.run(&[
        "issues.json",
        "--skip",
        "RND-000001",
        "--reason",
        "runs on the CPU",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "RND-000001: marked skipped (0 pending)\n");
    assert_contains(
        &err,
        "nothing pending; confirm with: npu-progress issues.json --check-complete",
    );
    let skipped = f.issue("RND-000001");
    assert_eq!(skipped.status, Status::Skipped);
    assert_eq!(skipped.reason.as_deref(), Some("runs on the CPU"));
    // The same skip again changes nothing; a new reason replaces the old one.
    let before = f.bytes();
    let (_, out, _) = f.run(&["--skip", "RND-000001", "--reason", "runs on the CPU"]);
    assert_eq!(
        out,
        "RND-000001 is already skipped; nothing changed (0 pending)\n"
    );
    assert_eq!(f.bytes(), before);
    f.run(&["--skip", "RND-000001", "--reason", "CPU-only data worker"]);
    assert_eq!(
        f.issue("RND-000001").reason.as_deref(),
        Some("CPU-only data worker")
    );
}

#[test]
fn performance_issues_cannot_be_skipped() {
    let mut tgt = issue("TGT-000001", "P_TGT", Severity::Warning, "train.py", 40);
    tgt.performance = true;
    let f = Fixture::new(vec![tgt]);
    let before = f.bytes();
    let (code, out, err) = f.run(&[
        "issues.json",
        "--skip",
        "TGT-000001",
        "--reason",
        "too slow to fix",
    ]);
    assert_eq!(code, 2);
    assert!(out.is_empty());
    assert_contains(
        &err,
        "TGT-000001 is a performance issue (P_TGT) and cannot be skipped",
    );
    assert_contains(&err, "follow references/fix-templates/P_TGT.md");
    assert_contains(&err, "npu-progress issues.json --fixed TGT-000001");
    assert_contains(
        &err,
        "`# npu: ignore[P_TGT] <why>` at the end of line 40 of train.py",
    );
    assert_eq!(f.bytes(), before);
    assert_contains(&err, "train.py and rescan");
    // --next does not offer a skip for it either.
    let (_, out, _) = f.run(&["--next"]);
    assert_contains(&out, "a performance issue cannot be skipped; fix it");

    // A measured issue: the comment takes effect at the next measurement, not at a rescan.
    let mut measured = issue("TGT-000002", "P_TGT", Severity::Warning, "train.py", 41);
    measured.performance = true;
    measured.measured = Some(issue_model::Measured {
        check: "pipeline.syncs".to_owned(),
        evidence: "3 host syncs per step at train.py:41".to_owned(),
        verify_args: vec!["--pipeline".to_owned()],
    });
    let f = Fixture::new(vec![measured]);
    let (code, _, err) = f.run(&["issues.json", "--skip", "TGT-000002", "--reason", "logging"]);
    assert_eq!(code, 2);
    assert_contains(
        &err,
        "at the end of line 41 of train.py and run `npu-progress issues.json --fixed TGT-000002` (it measures \
         again; npu-verify records no finding on a line with that comment)",
    );
}

#[test]
fn reopen_puts_an_issue_back() {
    let f = Fixture::new(vec![issue(
        "RND-000001",
        "P_RND",
        Severity::Error,
        "a.py",
        1,
    )]);
    let (code, out, _) = f.run(&["--reopen", "RND-000001"]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "RND-000001 is already pending; nothing changed (1 pending)\n"
    );
    f.run(&["--skip", "RND-000001", "--reason", "r"]);
    let (code, out, _) = f.run(&["--reopen", "RND-000001", "--reason", "was wrong"]);
    assert_eq!(code, 0);
    assert_eq!(out, "RND-000001: marked pending (1 pending)\n");
    let reopened = f.issue("RND-000001");
    assert_eq!(reopened.status, Status::Pending);
    assert_eq!(reopened.reason, None);
    let last = reopened.history.last();
    assert_eq!(last.map(|h| h.status), Some(HistoryStatus::Reopened));
    assert_eq!(last.and_then(|h| h.note.as_deref()), Some("was wrong"));
}

/// Every bad issues.json: a clear error naming the file, exit 2, and the bytes untouched.
#[test]
fn bad_files_are_refused_and_never_damaged() {
    let good = issue_model::to_json(&common::file_with(vec![issue(
        "RND-000001",
        "P_RND",
        Severity::Error,
        "a.py",
        1,
    )]));
    let cases: Vec<(String, &str)> = vec![
        (
            String::new(),
            "issues.json is empty; run `npu-scan <project> --output <dir>`",
        ),
        (good[..good.len() / 2].to_owned(), "issues.json:"),
        (
            r#"{"name": "left-pad"}"#.to_owned(),
            "is not an issues.json written by npu-scan",
        ),
        (
            good.replacen("\"schema_version\": 1", "\"schema_version\": 7", 1),
            "has schema_version 7, but this tool reads version 1",
        ),
        (
            good.replacen("\"line\": 1,", "\"line\": 0,", 1),
            "issue RND-000001 has line 0",
        ),
    ];
    for (text, message) in cases {
        let f = Fixture::empty();
        f.write("issues.json", &text);
        for args in [
            &["--next"][..],
            &["--fixed", "RND-000001"],
            &["--skip", "RND-000001", "--reason", "r"],
            &["--check-complete"],
            &["--list"],
            &["--summary"],
        ] {
            let (code, out, err) = f.run(args);
            assert_eq!(code, 2, "{args:?} on {text:?}");
            assert!(out.is_empty(), "{out}");
            assert!(err.starts_with("npu-progress: error: issues.json"), "{err}");
            assert_contains(&err, message);
            assert_eq!(f.bytes(), text.as_bytes(), "{args:?} changed the file");
        }
    }
}

#[test]
fn a_corrupt_file_error_names_line_and_column() {
    let f = Fixture::empty();
    f.write(
        "issues.json",
        "{\n  \"schema_version\": 1,\n  \"tool\": {\n    \"name\": \"npu-scan\",,\n",
    );
    let (code, _, err) = f.run(&["--next"]);
    assert_eq!(code, 2);
    assert_contains(
        &err,
        "npu-progress: error: issues.json:4:24: invalid issues.json:",
    );
}

#[test]
fn a_missing_file_says_how_to_make_one() {
    let f = Fixture::empty();
    for args in [&["--next"][..], &["--fixed", "X"], &["--check-complete"]] {
        let (code, out, err) = f.run(args);
        assert_eq!(code, 2);
        assert!(out.is_empty());
        assert_eq!(
            err,
            "npu-progress: error: issues.json does not exist; create it with `npu-scan /path/to/model --output <dir>`\n"
        );
    }
    assert!(!f.issues_json().exists());
    assert!(!f.path("issues.json.lock").exists());
}

#[cfg(unix)]
#[test]
fn a_read_only_file_is_refused_and_kept() {
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
    let (code, out, err) = f.run(&["--fixed", "RND-000001", "--force"]);
    assert_eq!(code, 2);
    assert!(out.is_empty());
    assert_contains(
        &err,
        "npu-progress: error: issues.json is read-only; make it writable (chmod u+w) and retry",
    );
    assert_eq!(f.bytes(), before);
}

/// Many processes, each marking a different issue at the same moment: every change lands.
#[test]
fn concurrent_processes_marking_different_issues_all_land() {
    concurrent_marks(12);
}

/// The same in a large file, where each process holds the lock longer.
#[test]
fn concurrent_processes_marking_issues_of_a_large_file_all_land() {
    concurrent_marks(2100);
}

/// `total` issues; twelve processes mark the first twelve at the same moment.
fn concurrent_marks(total: usize) {
    const N: usize = 12;
    let ids: Vec<String> = (0..total).map(|n| format!("RND-{n:06}")).collect();
    let f = Fixture::new(
        ids.iter()
            .enumerate()
            .map(|(n, id)| {
                issue(
                    id,
                    "P_RND",
                    Severity::Error,
                    "a.py",
                    u32::try_from(n + 1).unwrap_or(1),
                )
            })
            .collect(),
    );
    let ids = &ids[..N];
    let children: Vec<std::process::Child> = ids
        .iter()
        .enumerate()
        .map(|(n, id)| {
            let mut cmd = std::process::Command::new(common::BIN);
            cmd.current_dir(f.dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            if n % 3 == 0 {
                cmd.args(["issues.json", "--skip", id, "--reason", "concurrent skip"]);
            } else {
                cmd.args(["issues.json", "--fixed", id, "--force"]);
            }
            cmd.spawn().unwrap_or_else(|e| panic!("{e}"))
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let file = f.load();
    for (n, id) in ids.iter().enumerate() {
        let issue = file
            .issues
            .iter()
            .find(|i| &i.id == id)
            .unwrap_or_else(|| panic!("{id}"));
        // A forced mark is recorded as skipped too, with a reason of its own.
        let want = if n % 3 == 0 {
            "concurrent skip"
        } else {
            "--fixed --force (not re-checked): the scanner is wrong here (no --reason given)"
        };
        assert_eq!(issue.status, Status::Skipped, "{id} did not land");
        assert_eq!(issue.reason.as_deref(), Some(want), "{id} did not land");
        assert_eq!(issue.history.len(), 2, "{id}");
    }
    assert_eq!(
        file.summary.by_status.get("pending").copied().unwrap_or(0),
        total - N
    );
    assert_eq!(file.summary, issue_model::Summary::of(&file.issues));
}
