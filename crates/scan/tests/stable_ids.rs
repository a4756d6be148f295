//! Issue ids survive edits of their line by other fixes: scan, apply one fix on a line that
//! holds another finding too, rescan, and the other issue keeps its id and status.

use assert_cmd::Command;

fn load(dir: &std::path::Path) -> issue_model::IssuesFile {
    issue_model::load(&dir.join("issues.json")).unwrap()
}

#[test]
fn a_fix_on_a_shared_line_keeps_the_other_issue_and_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let source = "import torch\n\n\ndef widen(x):\n    y = x.to(torch.float64); on_gpu = x.device.type == \"cuda\"\n    return y, on_gpu\n";
    std::fs::write(project.join("ops.py"), source).unwrap();
    let scan = |extra: &[&str]| {
        Command::cargo_bin("npu-scan")
            .unwrap()
            .arg(&project)
            .args(["--select", "P_DEV,P_F64", "--no-progress", "--output"])
            .arg(dir.path())
            .args(extra)
            .output()
            .unwrap()
    };
    scan(&[]);
    let first = load(dir.path());
    let float64 = first
        .issues
        .iter()
        .find(|i| i.pattern == "P_F64")
        .expect("a float64 issue")
        .clone();
    let device = first
        .issues
        .iter()
        .find(|i| i.pattern == "P_DEV")
        .expect("a device comparison issue")
        .clone();
    assert_eq!(float64.line, device.line, "both on one line");
    assert_eq!(
        device.fix.as_ref().map(|f| f.applicability),
        Some(issue_model::Applicability::Safe)
    );
    // The float64 issue is skipped with a reason: that must survive the other fix too.
    issue_model::update(&dir.path().join("issues.json"), |file| {
        let mut file = file.unwrap();
        let issue = file.issues.iter_mut().find(|i| i.id == float64.id).unwrap();
        issue.status = issue_model::Status::Skipped;
        issue.reason = Some("the cast is on the host".to_owned());
        Ok((Some(file), ()))
    })
    .unwrap();

    let fixed = scan(&["--fix"]);
    assert!(
        String::from_utf8_lossy(&fixed.stdout).contains("Applied 1 fix"),
        "{fixed:?}"
    );
    let text = std::fs::read_to_string(project.join("ops.py")).unwrap();
    assert!(
        text.contains("x.device.type in (\"cuda\", \"npu\")"),
        "{text}"
    );
    // A plain rescan afterwards changes nothing either.
    scan(&[]);
    let after = load(dir.path());
    let again: Vec<&issue_model::Issue> = after
        .issues
        .iter()
        .filter(|i| i.pattern == "P_F64")
        .collect();
    assert_eq!(again.len(), 1, "{again:#?}");
    assert_eq!(again[0].id, float64.id);
    assert_eq!(again[0].status, issue_model::Status::Skipped);
    assert_eq!(again[0].reason.as_deref(), Some("the cast is on the host"));
    assert_ne!(
        again[0].snippet, float64.snippet,
        "the line's text did change"
    );
    let gone = after.issues.iter().find(|i| i.id == device.id).unwrap();
    assert_eq!(gone.status, issue_model::Status::Fixed);
}
