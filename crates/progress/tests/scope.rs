//! `npu-progress --scope LAUNCH`: setting, changing and dropping the port's scope on the
//! multi-policy project of the scanner's tests (`crates/scan/tests/projects/multi_policy`).

use assert_cmd::Command;
use issue_model::{HistoryStatus, Status};
use std::path::Path;

const ACT: &str = "robolearn/policies/act.py";
const DIFFUSION: &str = "robolearn/policies/diffusion.py";
const TEST: &str = "tests/test_diffusion.py";

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The project under `<tmp>/proj`, scanned (`P_DEV` and `P_VEC`) into `<tmp>/issues.json` with
/// `scope`.
fn scanned(scope: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scan/tests/projects/multi_policy");
    copy(&from, &dir.path().join("proj"));
    let settings = scan::Settings {
        select: vec!["P_DEV".to_owned(), "P_VEC".to_owned()],
        scope: scope.map(str::to_owned),
        ..scan::Settings::default()
    };
    let result = scan::scan(&dir.path().join("proj"), &settings).unwrap();
    scan::write_issues_json(dir.path(), "proj", &result).unwrap();
    dir
}

fn progress(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::cargo_bin("npu-progress")
        .unwrap()
        .current_dir(dir)
        .arg("issues.json")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn statuses(dir: &Path, file: &str) -> Vec<Status> {
    issue_model::load(&dir.join("issues.json"))
        .unwrap()
        .issues
        .into_iter()
        .filter(|i| i.file == file)
        .map(|i| i.status)
        .collect()
}

#[test]
fn changing_the_scope_brings_the_other_policy_back_as_pending() {
    let dir = scanned(Some("python train.py --config configs/act.yaml"));
    let root = dir.path();
    assert_eq!(statuses(root, DIFFUSION), [Status::OutOfScope; 2]);
    let (code, _, err) = progress(root, &["--check-complete"]);
    assert_eq!(code, Some(1), "A's finding is pending: {err}");

    // The listing shows out-of-scope issues apart, under their reason.
    let (code, list, _) = progress(root, &["--list"]);
    assert_eq!(code, Some(0));
    let (pending, outside) = list
        .split_once("issues out of scope: not reached by `python train.py --config configs/act.yaml` (entry train.py):")
        .unwrap_or_else(|| panic!("{list}"));
    assert!(
        pending.contains(ACT) && !pending.contains(DIFFUSION),
        "{list}"
    );
    assert!(
        outside.contains(DIFFUSION) && outside.contains(TEST),
        "{list}"
    );

    let launch = "python train.py --config configs/diffusion.yaml";
    let (code, out, err) = progress(root, &["--scope", launch]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("1 issues now out of scope, 2 pending again"),
        "{out}"
    );
    assert_eq!(statuses(root, DIFFUSION), [Status::Pending; 2]);
    assert_eq!(statuses(root, ACT), [Status::OutOfScope]);
    assert_eq!(statuses(root, TEST), [Status::OutOfScope]);
    let file = issue_model::load(&root.join("issues.json")).unwrap();
    assert_eq!(file.scope.as_ref().map(|s| s.launch.as_str()), Some(launch));
    let act = file.issues.iter().find(|i| i.file == ACT).unwrap();
    assert_eq!(
        act.reason.as_deref(),
        Some(format!("out of scope: not reached by `{launch}` (entry train.py)").as_str())
    );
    let b = file.issues.iter().find(|i| i.file == DIFFUSION).unwrap();
    assert_eq!(
        b.history.last().map(|h| h.status),
        Some(HistoryStatus::Reopened)
    );

    // A later scan keeps the scope npu-progress set.
    let settings = scan::Settings {
        select: vec!["P_DEV".to_owned(), "P_VEC".to_owned()],
        scope: file.scope.map(|s| s.launch),
        ..scan::Settings::default()
    };
    let result = scan::scan(&root.join("proj"), &settings).unwrap();
    scan::write_issues_json(root, "proj", &result).unwrap();
    assert_eq!(statuses(root, DIFFUSION), [Status::Pending; 2]);
    assert_eq!(statuses(root, ACT), [Status::OutOfScope]);

    // `--scope none`: every issue the scope left out is pending again.
    let (code, out, _) = progress(root, &["--scope", "none", "--format", "json"]);
    assert_eq!(code, Some(0));
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["scope"], serde_json::Value::Null);
    assert_eq!(json["pending"], 5, "{json}");
    assert_eq!(
        issue_model::load(&root.join("issues.json")).unwrap().scope,
        None
    );
}

#[test]
fn scoping_an_unscoped_port_and_a_bad_launch() {
    let dir = scanned(None);
    let root = dir.path();
    assert_eq!(statuses(root, DIFFUSION), [Status::Pending; 2]);
    let (code, out, err) = progress(root, &["--scope", "python train.py"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(statuses(root, DIFFUSION), [Status::OutOfScope; 2]);
    assert_eq!(statuses(root, ACT), [Status::Pending]);

    let before = std::fs::read(root.join("issues.json")).unwrap();
    let (code, _, err) = progress(root, &["--scope", "python nope.py"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains(
            "--scope `python nope.py`: its entry (`nope.py`) is not a Python file of the project"
        ),
        "{err}"
    );
    assert_eq!(std::fs::read(root.join("issues.json")).unwrap(), before);
}
