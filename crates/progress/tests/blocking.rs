//! `--next` and `--list` put the issues that stop the run on the NPU (device allow-lists) first:
//! on the scanner's multi-policy project, scanned by the scanner's library.

use assert_cmd::Command;
use std::path::PathBuf;

#[test]
fn next_and_list_show_blocking_issues_first() {
    let project =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scan/tests/projects/multi_policy_port");
    let dir = tempfile::tempdir().unwrap();
    let settings = scan::Settings {
        threads: 1,
        ..scan::Settings::default()
    };
    let result = scan::scan(&project, &settings).unwrap();
    scan::write_issues_json(dir.path(), "multi_policy", &result).unwrap();
    let issues = dir.path().join("issues.json");
    let file = issue_model::load(&issues).unwrap();
    let blocking: Vec<&str> = file
        .issues
        .iter()
        .filter(|i| i.blocking.is_some())
        .map(|i| i.id.as_str())
        .collect();
    assert_eq!(blocking.len(), 5, "{:#?}", file.issues);
    // Without the blocking order, the entry point's P_ENT issue (train.py) would come first.
    let out = Command::cargo_bin("npu-progress")
        .unwrap()
        .arg(&issues)
        .arg("--next")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    let first = shown.split_whitespace().next().unwrap_or_default();
    assert!(blocking.contains(&first), "{shown}");
    assert!(shown.contains("BLOCKING: "), "{shown}");

    let out = Command::cargo_bin("npu-progress")
        .unwrap()
        .arg(&issues)
        .arg("--list")
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    let ids: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| file.issues.iter().any(|i| i.id == *w))
        .collect();
    assert!(ids.len() > 5, "{listed}");
    for (n, id) in ids.iter().enumerate() {
        assert_eq!(blocking.contains(id), n < 5, "{listed}");
    }

    let out = Command::cargo_bin("npu-progress")
        .unwrap()
        .arg(&issues)
        .arg("--check-complete")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains(
            "issues pending (5 blocking: the run stops on the NPU until they are fixed; listed first)"
        ),
        "{shown}"
    );
}
