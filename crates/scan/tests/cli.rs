//! The `npu-scan` binary: exit codes, stdout and stderr, issues.json and rescans.

use assert_cmd::Command;
use std::path::Path;

fn npu_scan() -> Command {
    Command::cargo_bin("npu-scan").unwrap()
}

/// `npu-scan` with only the engine's own rules, so that the counts below do not change when
/// rules are added.
fn scan_cmd() -> Command {
    let mut cmd = npu_scan();
    cmd.args(["--select", "P_LTM,P_SYN"]);
    cmd
}

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

const TRAIN: &str = "\
import pytorch_lightning as pl

def main():
    trainer = pl.Trainer(gpus=2)
    trainer.fit(None)

if __name__ == \"__main__\":
    main()
";

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "model/train.py", TRAIN);
    write(dir.path(), "model/broken.py", "def f(:\n    pass\n");
    write(
        dir.path(),
        "model/ok.py",
        "import torch\nx = torch.zeros(3)\n",
    );
    dir
}

fn load(path: &Path) -> issue_model::IssuesFile {
    issue_model::load(path).unwrap()
}

#[test]
fn drop_in_scan_writes_issues_json_and_exits_1() {
    let dir = project();
    let out = scan_cmd()
        .current_dir(dir.path())
        .args(["model", "--output", "."])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("P_LTM"), "{stdout}");
    assert!(stdout.contains("P_SYN"), "{stdout}");
    assert!(stdout.contains("Scanned 3 Python files"), "{stdout}");
    assert!(stdout.contains("1 unparsed"), "{stdout}");
    let file = load(&dir.path().join("issues.json"));
    assert_eq!(file.root, "model");
    assert_eq!(file.tool.name, "npu-scan");
    assert_eq!(file.issues.len(), 2);
    let ltm = file.issues.iter().find(|i| i.pattern == "P_LTM").unwrap();
    assert_eq!(ltm.file, "train.py");
    assert_eq!((ltm.line, ltm.column), (4, 26));
    assert_eq!(ltm.symbol.as_deref(), Some("main"));
    assert_eq!(ltm.fix_template, "references/fix-templates/P_LTM.md");
    assert!(ltm.id.starts_with("LTM-"));
    assert_eq!(file.unparsed.len(), 1);
    assert_eq!(file.unparsed[0].file, "broken.py");
    assert_eq!(file.unparsed[0].line, Some(1));
}

#[test]
fn rescan_keeps_ids_and_flags_regressions() {
    let dir = project();
    scan_cmd()
        .current_dir(dir.path())
        .args(["model", "--output", "."])
        .assert()
        .code(1);
    let path = dir.path().join("issues.json");
    let mut file = load(&path);
    let ids: Vec<String> = file.issues.iter().map(|i| i.id.clone()).collect();
    // Mark everything fixed by hand, then edit the code above the finding: the line moves.
    for issue in &mut file.issues {
        issue.status = issue_model::Status::Fixed;
    }
    issue_model::save(&path, &file).unwrap();
    write(
        dir.path(),
        "model/train.py",
        &format!("# a new header line\n{TRAIN}"),
    );
    let out = scan_cmd()
        .current_dir(dir.path())
        .args(["model", "--output", "."])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("2 regressed"), "{stdout}");
    let again = load(&path);
    let again_ids: Vec<String> = again.issues.iter().map(|i| i.id.clone()).collect();
    assert_eq!(ids.len(), again_ids.len());
    for id in &ids {
        assert!(again_ids.contains(id), "{id} lost");
    }
    let ltm = again.issues.iter().find(|i| i.pattern == "P_LTM").unwrap();
    assert_eq!(ltm.line, 5);
    assert_eq!(ltm.status, issue_model::Status::Pending);
    assert!(
        ltm.history
            .iter()
            .any(|h| h.status == issue_model::HistoryStatus::Regressed)
    );
}

#[test]
fn skipped_issues_do_not_fail_the_exit_code_and_exit_zero_works() {
    let dir = project();
    scan_cmd()
        .current_dir(dir.path())
        .args(["model", "--exit-zero"])
        .assert()
        .code(0);
    let path = dir.path().join("issues.json");
    let mut file = load(&path);
    for issue in &mut file.issues {
        issue.status = issue_model::Status::Skipped;
        issue.reason = Some("not used".to_owned());
    }
    issue_model::save(&path, &file).unwrap();
    scan_cmd()
        .current_dir(dir.path())
        .args(["model"])
        .assert()
        .code(0);
}

#[test]
fn clean_project_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "ok.py", "import torch\n");
    let out = scan_cmd()
        .arg(dir.path())
        .args(["--no-write"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .contains("No issues found.")
    );
    assert!(!dir.path().join("issues.json").exists());
}

#[test]
fn formats_are_machine_readable_and_summary_goes_to_stderr() {
    let dir = project();
    let root = dir.path().join("model");
    let out = scan_cmd()
        .arg(&root)
        .args(["--no-write", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let file = issue_model::parse(Path::new("stdout"), &out.stdout).unwrap();
    assert_eq!(file.issues.len(), 2);
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("Scanned 3 Python files")
    );

    let out = scan_cmd()
        .arg(&root)
        .args(["--no-write", "--format", "sarif"])
        .output()
        .unwrap();
    let sarif: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sarif["version"], "2.1.0");
    assert_eq!(sarif["runs"][0]["results"].as_array().unwrap().len(), 2);

    let out = scan_cmd()
        .arg(&root)
        .args(["--no-write", "--format", "csv", "--ignore", "P_SYN"])
        .output()
        .unwrap();
    let csv = String::from_utf8(out.stdout).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("File,Start Line,End Line,OP,Tips"));
    assert!(lines.next().unwrap().starts_with("train.py,4,4,P_LTM,"));
    assert_eq!(lines.next(), None);

    let out = scan_cmd()
        .arg(&root)
        .args(["--no-write", "--format", "text", "--ignore", "P_SYN"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("train.py:4:26: P_LTM [error]"), "{text}");
}

#[test]
fn output_is_identical_for_one_and_two_threads() {
    let dir = project();
    for i in 0..30 {
        write(dir.path(), &format!("model/pkg{}/m{i}.py", i % 4), TRAIN);
    }
    let run = |threads: &str| {
        let out = scan_cmd()
            .arg(dir.path().join("model"))
            .args(["--no-write", "--format", "json", "--threads", threads])
            .output()
            .unwrap();
        let mut file = issue_model::parse(Path::new("stdout"), &out.stdout).unwrap();
        file.scanned_at = String::new();
        issue_model::to_json(&file)
    };
    assert_eq!(run("1"), run("2"));
}

#[test]
fn suppressions_and_unknown_ids() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "t.py",
        "import pytorch_lightning as pl\n\
         a = pl.Trainer(gpus=1)  # npu: ignore[P_LTM] launcher overrides this\n\
         b = pl.Trainer(gpus=1)  # npu: ignore[P_LTN]\n",
    );
    let out = scan_cmd()
        .arg(dir.path())
        .args(["--no-write", "--format", "text"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stdout.contains("t.py:3:16: P_LTM"), "{stdout}");
    assert!(!stdout.contains("t.py:2:"), "{stdout}");
    assert!(stdout.contains("1 suppressed"), "{stdout}");
    assert!(
        stderr.contains(
            "npu-scan: warning: t.py:3:25: unknown rule id `P_LTN` in a suppression comment"
        ),
        "{stderr}"
    );
}

#[test]
fn explain_and_usage_errors() {
    let out = npu_scan().args(["--explain", "P_LTM"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("P_LTM (lightning-gpu-assumptions)"));
    assert!(text.contains("## What it does"));

    let out = npu_scan().args(["--explain", "P_NOPE"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .starts_with("npu-scan: error: unknown rule id `P_NOPE`")
    );

    let out = npu_scan()
        .args([".", "--select", "P_LTX", "--no-write"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("did you mean `P_LTM`?")
    );

    let out = npu_scan()
        .args(["/definitely/not/here", "--no-write"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("cannot scan `/definitely/not/here`")
    );

    npu_scan().args(["--bogus"]).assert().code(2);
}

#[test]
fn corrupt_issues_json_is_not_overwritten() {
    let dir = project();
    std::fs::write(dir.path().join("issues.json"), "{ not json").unwrap();
    let out = scan_cmd()
        .current_dir(dir.path())
        .args(["model", "--output", "."])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("issues.json")
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("issues.json")).unwrap(),
        "{ not json"
    );
}

/// Scan `dir` (with `extra` arguments) into `dir/issues.json`; returns the exit code and stdout.
fn scan_into(dir: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let out = scan_cmd()
        .current_dir(dir)
        .args([".", "--output", "."])
        .args(extra)
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8(out.stdout).unwrap())
}

fn status_of(dir: &Path, file: &str) -> (issue_model::Status, Option<String>) {
    let issues = load(&dir.join("issues.json")).issues;
    let found = issues.iter().find(|i| i.file == file);
    let found = found.unwrap_or_else(|| panic!("no issue in {file}: {issues:?}"));
    (found.status, found.reason.clone())
}

#[test]
fn an_inline_ignore_is_recorded_skipped_with_its_reason_and_pending_again_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let plain = "import pytorch_lightning as pl\na = pl.Trainer(gpus=1)\n";
    write(dir.path(), "t.py", plain);
    let (code, _) = scan_into(dir.path(), &[]);
    assert_eq!(code, Some(1));
    assert_eq!(
        status_of(dir.path(), "t.py").0,
        issue_model::Status::Pending
    );

    write(
        dir.path(),
        "t.py",
        "import pytorch_lightning as pl\na = pl.Trainer(gpus=1)  # npu: ignore[P_LTM] launcher overrides this\n",
    );
    let (code, stdout) = scan_into(dir.path(), &[]);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("0 resolved by edits, 1 skipped by `# npu: ignore` comments"),
        "{stdout}"
    );
    let (status, reason) = status_of(dir.path(), "t.py");
    let count = load(&dir.path().join("issues.json")).issues.len();
    assert_eq!(count, 1, "the same issue, not a new one and a fixed one");
    assert_eq!(
        status,
        issue_model::Status::Skipped,
        "an ignore comment is not a fix"
    );
    assert_eq!(
        reason.as_deref(),
        Some("ignored inline: launcher overrides this (`# npu: ignore` comment on line 2)")
    );
    // A second rescan keeps it skipped.
    scan_into(dir.path(), &[]);
    assert_eq!(
        status_of(dir.path(), "t.py").0,
        issue_model::Status::Skipped
    );

    write(dir.path(), "t.py", plain);
    let (code, _) = scan_into(dir.path(), &[]);
    assert_eq!(code, Some(1));
    assert_eq!(
        status_of(dir.path(), "t.py"),
        (issue_model::Status::Pending, None)
    );
}

#[test]
fn an_excluded_file_is_out_of_scope_never_fixed_and_pending_again_when_scanned() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "train.py", TRAIN);
    write(dir.path(), "policies/other/train.py", TRAIN);
    scan_into(dir.path(), &[]);
    let (code, stdout) = scan_into(dir.path(), &["--exclude", "policies/other"]);
    assert_eq!(code, Some(1), "train.py is still pending: {stdout}");
    assert!(
        stdout.contains("0 resolved by edits, 1 out of scope"),
        "{stdout}"
    );
    let (status, reason) = status_of(dir.path(), "policies/other/train.py");
    assert_eq!(status, issue_model::Status::OutOfScope);
    assert_eq!(
        reason.as_deref(),
        Some("not scanned: excluded by --exclude `policies/other`")
    );
    let file = load(&dir.path().join("issues.json"));
    assert_eq!(
        file.summary.by_status.get("fixed"),
        None,
        "{:?}",
        file.summary
    );

    let (_, stdout) = scan_into(dir.path(), &[]);
    assert!(stdout.contains("1 pending again"), "{stdout}");
    assert_eq!(
        status_of(dir.path(), "policies/other/train.py"),
        (issue_model::Status::Pending, None)
    );
}

/// A project of two policies, one launch (`train.py` trains `act`), a test and an example.
fn two_policies() -> tempfile::TempDir {
    let loader = "import torch\nfrom torch.utils.data import DataLoader\n\n\ndef make(ds, device):\n    return DataLoader(ds, pin_memory=device.type == \"cuda\")\n";
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "train.py",
        "import torch\nfrom policies.act.model import make\n\nif __name__ == \"__main__\":\n    make([], torch.device(\"cpu\"))\n",
    );
    write(root, "policies/__init__.py", "");
    write(root, "policies/act/__init__.py", "");
    write(root, "policies/act/model.py", loader);
    write(root, "policies/other/__init__.py", "");
    write(root, "policies/other/model.py", loader);
    write(
        root,
        "tests/test_other.py",
        "from policies.other.model import make\n\n\ndef test_make():\n    make([], None)\n",
    );
    write(root, "examples/demo.py", loader);
    dir
}

fn by_file(
    dir: &Path,
) -> std::collections::BTreeMap<String, (issue_model::Status, Option<String>)> {
    load(&dir.join("issues.json"))
        .issues
        .into_iter()
        .map(|i| (i.file, (i.status, i.reason)))
        .collect()
}

#[test]
fn scope_keeps_the_launch_path_and_fix_touches_only_it() {
    use issue_model::Status;
    let dir = two_policies();
    let root = dir.path();
    let launch = "python train.py --policy act";
    let scan = |extra: &[&str]| {
        npu_scan()
            .current_dir(root)
            .args([".", "--output", ".", "--select", "P_DEV"])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = scan(&["--scope", launch]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("2 more findings are out of scope: not reached by `{launch}` (entry train.py): recorded in issues.json as out_of_scope, not counted above.")),
        "{stdout}"
    );
    assert!(stdout.contains("total                   1"), "{stdout}");
    let why = format!("out of scope: not reached by `{launch}` (entry train.py)");
    let statuses = by_file(root);
    assert_eq!(statuses["policies/act/model.py"], (Status::Pending, None));
    for outside in ["policies/other/model.py", "examples/demo.py"] {
        assert_eq!(
            statuses[outside],
            (Status::OutOfScope, Some(why.clone())),
            "{outside}"
        );
    }

    // --fix touches the launch path only.
    let other = std::fs::read(root.join("policies/other/model.py")).unwrap();
    let demo = std::fs::read(root.join("examples/demo.py")).unwrap();
    let out = scan(&["--scope", launch, "--fix"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let act = std::fs::read_to_string(root.join("policies/act/model.py")).unwrap();
    assert!(act.contains("device.type in (\"cuda\", \"npu\")"), "{act}");
    assert_eq!(
        std::fs::read(root.join("policies/other/model.py")).unwrap(),
        other
    );
    assert_eq!(std::fs::read(root.join("examples/demo.py")).unwrap(), demo);
    let statuses = by_file(root);
    assert_eq!(statuses["policies/act/model.py"].0, Status::Fixed);
    assert_eq!(statuses["policies/other/model.py"].0, Status::OutOfScope);
    let file = load(&root.join("issues.json"));
    assert_eq!(
        file.summary.by_status.get("pending"),
        None,
        "{:?}",
        file.summary
    );
    assert_eq!(
        file.summary.by_status["fixed"], 1,
        "only the fixed one is fixed"
    );

    // Without the scope (`--scope none`: a plain rescan keeps it), the rest is pending again.
    let out = scan(&["--scope", "none"]);
    assert_eq!(out.status.code(), Some(1));
    let statuses = by_file(root);
    assert_eq!(statuses["policies/other/model.py"], (Status::Pending, None));
    assert_eq!(statuses["examples/demo.py"], (Status::Pending, None));

    // An entry the project does not have is an error, not an empty scope.
    let out = scan(&["--scope", "python nope.py"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains(
            "--scope `python nope.py`: its entry (`nope.py`) is not a Python file of the project"
        ),
        "{stderr}"
    );
}
