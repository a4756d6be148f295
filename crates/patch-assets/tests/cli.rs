//! `npu-assets` as a user runs it: exit codes, stdout and stderr together.

use issue_model::{
    Category, HistoryEntry, HistoryStatus, Issue, IssuesFile, SCHEMA_VERSION, Severity, Status,
    Summary, Tool,
};
use patch_assets::catalog::Source;
use patch_assets::install::{self, Action};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn npu_assets(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_npu-assets"))
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn assets_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets")
}

#[test]
fn list_show_and_unknown_names() {
    let dir = tempfile::tempdir().unwrap();
    let out = npu_assets(&["list"], dir.path());
    assert!(out.status.success());
    let listed: Vec<String> = stdout(&out).lines().map(str::to_owned).collect();
    for name in [
        "templates/env_npu.sh",
        "templates/train.sh",
        "templates/ADAPTATION_SUMMARY.md",
    ] {
        assert!(listed.iter().any(|l| l == name), "{name} not listed");
    }
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(listed, sorted, "list must be sorted");
    assert!(!listed.iter().any(|l| l.rsplit('/').next() == Some(".keep")));

    let json = npu_assets(&["list", "--format", "json"], dir.path());
    let rows: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), listed.len());

    let out = npu_assets(&["show", "train.sh"], dir.path());
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        out.stdout,
        fs::read(assets_dir().join("templates/train.sh")).unwrap()
    );

    let out = npu_assets(&["show", "no-such-asset.txt"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout(&out).is_empty());
    assert!(
        stderr(&out).starts_with("npu-assets: error: no asset named `no-such-asset.txt`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn help_has_examples() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        vec!["--help"],
        vec!["init", "--help"],
        vec!["summary", "--help"],
        vec!["show", "--help"],
    ] {
        let out = npu_assets(&args, dir.path());
        assert!(out.status.success());
        assert!(stdout(&out).contains("npu-assets "), "{args:?}");
        assert!(
            stdout(&out).contains("Example"),
            "{args:?}: {}",
            stdout(&out)
        );
    }
}

#[test]
fn init_from_the_binary_installs_what_it_embeds() {
    let dir = tempfile::tempdir().unwrap();
    let out = npu_assets(&["init", "."], dir.path());
    let mig = dir.path().join("migrate_to_cloudrobo");
    assert!(stdout(&out).contains("created   ./migrate_to_cloudrobo/env_npu.sh\n"));
    assert!(stdout(&out).contains("created   ./migrate_to_cloudrobo/train.sh\n"));
    // Run results (verify's report, training logs) stay out of the port's `git status`.
    let ignore = fs::read_to_string(mig.join(".gitignore")).unwrap();
    assert!(
        ignore.lines().any(|l| l == "verify-report.json") && ignore.lines().any(|l| l == "logs/"),
        "{ignore}"
    );
    let mode = fs::metadata(mig.join("train.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111, "train.sh must be executable");
    if patch_assets::get("runtime_patches.py").is_some() {
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            fs::read(mig.join("runtime_patches.py")).unwrap(),
            patch_assets::get("runtime_patches.py").unwrap()
        );
    } else {
        // Built before assets/runtime_patches.py existed: the gap is an error, not silence.
        assert_eq!(out.status.code(), Some(2));
        assert!(stdout(&out).contains("missing   ./migrate_to_cloudrobo/runtime_patches.py"));
        assert!(stderr(&out).contains("does not contain `runtime_patches.py`"));
    }
    let out = npu_assets(&["init", "no-such-dir"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no-such-dir is not a directory"));
}

/// A copy of `assets/` with a `runtime_patches.py` placeholder if the real one is not there yet.
fn assets_copy() -> (tempfile::TempDir, Source) {
    let copy = tempfile::tempdir().unwrap();
    let templates = copy.path().join("templates");
    fs::create_dir_all(&templates).unwrap();
    for name in ["env_npu.sh", "train.sh", "ADAPTATION_SUMMARY.md"] {
        fs::copy(
            assets_dir().join("templates").join(name),
            templates.join(name),
        )
        .unwrap();
    }
    let patches = assets_dir().join("runtime_patches.py");
    if patches.is_file() {
        fs::copy(&patches, copy.path().join("runtime_patches.py")).unwrap();
    } else {
        fs::write(copy.path().join("runtime_patches.py"), "# placeholder\n").unwrap();
    }
    let source = Source::Dir(copy.path().to_owned());
    (copy, source)
}

fn actions(outcomes: &[install::Outcome]) -> Vec<(String, Action)> {
    outcomes
        .iter()
        .map(|o| {
            (
                o.target.file_name().unwrap().to_string_lossy().into_owned(),
                o.action,
            )
        })
        .collect()
}

#[test]
fn init_never_overwrites_a_user_change_but_updates_its_own_old_copies() {
    let (_copy, source) = assets_copy();
    let project = tempfile::tempdir().unwrap();
    let mig = project.path().join("migrate_to_cloudrobo");
    let first = install::init(project.path(), false, &source).unwrap();
    assert!(
        first.iter().all(|o| o.action == Action::Created),
        "{first:?}"
    );
    assert!(mig.join("runtime_patches.py").is_file());
    assert!(install::created_at(project.path()).is_some());

    let again = install::init(project.path(), false, &source).unwrap();
    assert!(
        again.iter().all(|o| o.action == Action::Unchanged),
        "{again:?}"
    );

    // The user edits train.sh; a new release changes env_npu.sh.
    fs::write(mig.join("train.sh"), "#!/bin/sh\n# my launcher\n").unwrap();
    let env_path = source_path(&source, "templates/env_npu.sh");
    let mut newer = fs::read(&env_path).unwrap();
    newer.extend_from_slice(b"# a newer release\n");
    fs::write(&env_path, &newer).unwrap();

    let third = install::init(project.path(), false, &source).unwrap();
    assert_eq!(
        actions(&third),
        [
            ("env_npu.sh".to_owned(), Action::Updated),
            ("train.sh".to_owned(), Action::Kept),
            ("runtime_patches.py".to_owned(), Action::Unchanged),
            (".gitignore".to_owned(), Action::Unchanged),
        ]
    );
    assert_eq!(fs::read(mig.join("env_npu.sh")).unwrap(), newer);
    assert_eq!(
        fs::read_to_string(mig.join("train.sh")).unwrap(),
        "#!/bin/sh\n# my launcher\n"
    );

    let forced = install::init(project.path(), true, &source).unwrap();
    assert_eq!(forced[1].action, Action::Replaced);
    assert_eq!(
        fs::read(mig.join("train.sh")).unwrap(),
        fs::read(source_path(&source, "templates/train.sh")).unwrap()
    );
}

fn source_path(source: &Source, asset: &str) -> PathBuf {
    match source {
        Source::Dir(root) => root.join(asset),
        Source::Embedded => unreachable!(),
    }
}

#[test]
fn init_from_the_binary_keeps_an_edited_file_and_says_how_to_compare() {
    let dir = tempfile::tempdir().unwrap();
    npu_assets(&["init", "."], dir.path());
    let train = dir.path().join("migrate_to_cloudrobo/train.sh");
    fs::write(&train, "# mine\n").unwrap();
    let out = npu_assets(&["init", "."], dir.path());
    assert!(stdout(&out).contains("kept      ./migrate_to_cloudrobo/train.sh\n"));
    let err = stderr(&out);
    assert!(
        err.contains(
            "compare: npu-assets show templates/train.sh | diff - ./migrate_to_cloudrobo/train.sh"
        ),
        "{err}"
    );
    assert!(err.contains("replace: npu-assets init . --force"), "{err}");
    assert_eq!(fs::read_to_string(&train).unwrap(), "# mine\n");
    let out = npu_assets(&["init", ".", "--force"], dir.path());
    assert!(stdout(&out).contains("replaced  ./migrate_to_cloudrobo/train.sh\n"));
    assert_eq!(
        fs::read(&train).unwrap(),
        patch_assets::get("templates/train.sh").unwrap()
    );
}

#[test]
fn extract_writes_every_asset_and_keeps_differences() {
    let dir = tempfile::tempdir().unwrap();
    let out = npu_assets(&["extract", "out"], dir.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let listed = stdout(&npu_assets(&["list"], dir.path()));
    for asset in listed.lines() {
        let path = dir.path().join("out").join(asset);
        assert_eq!(
            fs::read(&path).unwrap(),
            patch_assets::get(asset).unwrap(),
            "{asset}"
        );
    }
    let train = dir.path().join("out/templates/train.sh");
    assert_ne!(
        fs::metadata(&train).unwrap().permissions().mode() & 0o100,
        0
    );
    fs::write(&train, "changed").unwrap();
    let out = npu_assets(&["extract", "out"], dir.path());
    assert!(stdout(&out).contains("kept      out/templates/train.sh\n"));
    assert!(stderr(&out).contains("replace: npu-assets extract out --force"));
    assert_eq!(fs::read_to_string(&train).unwrap(), "changed");
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
}

fn issue(
    id: &str,
    pattern: &str,
    status: Status,
    history: &[(&str, HistoryStatus)],
    reason: Option<&str>,
) -> Issue {
    Issue {
        id: id.into(),
        pattern: pattern.into(),
        category: Category::Device,
        severity: Severity::Error,
        performance: false,
        file: "model.py".into(),
        line: 3,
        column: 5,
        end_line: 3,
        end_column: 20,
        symbol: Some("Policy.forward".into()),
        message: "m".into(),
        snippet: "s".into(),
        related: vec![],
        fix_template: format!("references/fix-templates/{pattern}.md"),
        fix: None,
        fingerprint: format!("fp-{id}"),
        status,
        reason: reason.map(str::to_owned),
        history: history
            .iter()
            .map(|(at, s)| HistoryEntry {
                at: (*at).into(),
                status: *s,
                note: None,
            })
            .collect(),
        blocking: None,
        measured: None,
        measurement: None,
    }
}

/// A git project on its way through the port: init committed, code changed, issues handled.
fn ported_project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    fs::write(p.join("model.py"), "import torch\nx = 1\ny = 2\n").unwrap();
    fs::write(p.join("old.py"), "gone\n").unwrap();
    git(p, &["init", "-q"]);
    git(p, &["add", "."]);
    git(p, &["commit", "-qm", "original"]);
    npu_assets(&["init", "."], p);
    git(p, &["add", "migrate_to_cloudrobo"]);
    git(p, &["commit", "-qm", "start the port"]);
    fs::write(
        p.join("model.py"),
        "import torch\nimport torch_npu\nx = 1\n",
    )
    .unwrap();
    fs::remove_file(p.join("old.py")).unwrap();
    fs::write(p.join("npu_utils.py"), "a\nb\n").unwrap();
    let issues = vec![
        issue(
            "RND-aaaaaa",
            "P_RND",
            Status::Fixed,
            &[
                ("2026-01-01T10:00:00Z", HistoryStatus::Found),
                ("2026-01-01T10:05:00Z", HistoryStatus::Shown),
                ("2026-01-01T10:09:05Z", HistoryStatus::Fixed),
            ],
            None,
        ),
        issue(
            "FLA-bbbbbb",
            "P_FLA",
            Status::Skipped,
            &[
                ("2026-01-01T10:00:00Z", HistoryStatus::Found),
                ("2026-01-01T10:10:00Z", HistoryStatus::Shown),
                ("2026-01-01T10:12:00Z", HistoryStatus::Skipped),
            ],
            Some("behind a | fallback that works on NPU"),
        ),
        issue(
            "RND-cccccc",
            "P_RND",
            Status::Pending,
            &[
                ("2026-01-01T10:00:00Z", HistoryStatus::Found),
                ("2026-01-01T10:13:00Z", HistoryStatus::Shown),
                ("2026-01-01T10:20:00Z", HistoryStatus::Fixed),
                ("2026-01-01T11:00:00Z", HistoryStatus::Regressed),
            ],
            None,
        ),
    ];
    let file = IssuesFile {
        schema_version: SCHEMA_VERSION,
        tool: Tool {
            name: "npu-scan".into(),
            version: "0.1.0".into(),
        },
        root: ".".into(),
        scanned_at: "2026-01-01T10:00:00Z".into(),
        summary: Summary::default(),
        issues,
        unparsed: vec![],
        scope: None,
    };
    issue_model::save(&p.join("issues.json"), &file).unwrap();
    fs::write(
        p.join("migrate_to_cloudrobo/verify-report.json"),
        r#"{"generated_at": "2026-01-01T12:00:00Z", "checks": [
            {"name": "torch_npu import", "status": "pass", "detail": "2.6.0"},
            {"name": "bf16", "status": "fail", "detail": "910A has no bf16"}]}"#,
    )
    .unwrap();
    dir
}

#[test]
fn summary_drafts_from_issues_git_and_verify() {
    let dir = ported_project();
    let p = dir.path();
    let out = npu_assets(&["summary", "."], p);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "created   ./migrate_to_cloudrobo/ADAPTATION_SUMMARY.md\n"
    );
    let text = fs::read_to_string(p.join("migrate_to_cloudrobo/ADAPTATION_SUMMARY.md")).unwrap();
    // Every marker was filled, and the how-to comment is gone.
    assert!(!text.contains("<!-- npu-assets:overview"), "{text}");
    assert!(!text.contains("How to use this template"), "{text}");
    // Issues: per pattern with time, per issue with reason, escaped for the table.
    assert!(
        text.contains("3 issues, 1 fixed, 1 skipped, 1 pending"),
        "{text}"
    );
    assert!(
        text.contains("| `P_RND` | DEVICE | 1 | 0 | 1 | 11m 05s |"),
        "{text}"
    );
    assert!(
        text.contains("| `P_FLA` | DEVICE | 0 | 1 | 0 | 2m 00s |"),
        "{text}"
    );
    assert!(
        text.contains("| `FLA-bbbbbb` | `P_FLA` | `model.py:3` (Policy.forward) | skipped | 2m 00s | behind a \\| fallback that works on NPU |"),
        "{text}"
    );
    // Inventory: against the last commit before the port began (the parent of the commit that
    // added migrate_to_cloudrobo/), untracked files included, the tools' own records left out.
    assert!(
        text.contains("the last commit before the port began: the parent of `"),
        "{text}"
    );
    assert!(text.contains("(\"start the port\")"), "{text}");
    assert!(text.contains("`npu-assets summary . --base REV`"), "{text}");
    assert!(text.contains("| modified | `model.py` | 1 | 1 |"), "{text}");
    assert!(text.contains("| removed | `old.py` | 0 | 1 |"), "{text}");
    assert!(
        text.contains("| added (untracked) | `npu_utils.py` | 2 | 0 |"),
        "{text}"
    );
    assert!(!text.contains("`issues.json`"), "{text}");
    // The port added the launchers.
    assert!(
        text.contains("| added | `migrate_to_cloudrobo/train.sh` |"),
        "{text}"
    );
    // Verify and known issues.
    assert!(
        text.contains("| bf16 | fail | 910A has no bf16 |"),
        "{text}"
    );
    assert!(
        text.contains(
            "- `FLA-bbbbbb` (P_FLA, `model.py:3` (Policy.forward)): skipped, behind a | fallback"
        ),
        "{text}"
    );
    assert!(
        text.contains("`RND-cccccc` (P_RND, `model.py:3` (Policy.forward)): regressed"),
        "{text}"
    );
    assert!(
        text.contains("- verify check `bf16` is fail: 910A has no bf16"),
        "{text}"
    );
    // Workflow timing: the fix phase spans first shown to last fixed/skipped.
    assert!(text.contains("| 3 | Fix every issue"), "{text}");
    assert!(text.contains("2026-01-01 10:05 UTC | 15m 00s |"), "{text}");

    // Regenerating an untouched draft is fine; an edited one is kept unless --force.
    let again = npu_assets(&["summary", "."], p);
    assert!(stdout(&again).starts_with("updated "), "{}", stderr(&again));
    let path = p.join("migrate_to_cloudrobo/ADAPTATION_SUMMARY.md");
    let edited = fs::read_to_string(&path)
        .unwrap()
        .replace("(write this) The request", "Port OpenVLA.");
    fs::write(&path, &edited).unwrap();
    let refused = npu_assets(&["summary", "."], p);
    assert_eq!(refused.status.code(), Some(1));
    assert!(stderr(&refused).contains("was edited after `npu-assets summary` wrote it"));
    assert!(stderr(&refused).contains("--stdout | diff -"));
    assert_eq!(fs::read_to_string(&path).unwrap(), edited);
    let shown = npu_assets(&["summary", ".", "--stdout"], p);
    assert!(shown.status.success());
    assert!(stdout(&shown).starts_with("# NPU adaptation summary"));
    assert_eq!(fs::read_to_string(&path).unwrap(), edited);
    let forced = npu_assets(&["summary", ".", "--force"], p);
    assert!(stdout(&forced).starts_with("replaced "));
}

/// The first line of the summary's inventory (`Base ...`), from `npu-assets summary . --stdout`.
fn base_line(p: &Path) -> String {
    let out = npu_assets(&["summary", ".", "--stdout"], p);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    text.lines()
        .find(|l| l.starts_with("Base `"))
        .unwrap_or_else(|| panic!("no base line: {text}"))
        .to_owned()
}

fn head_of(p: &Path, rev: &str) -> String {
    let out = Command::new("git")
        .args(["rev-parse", rev])
        .current_dir(p)
        .output()
        .unwrap();
    stdout(&out).trim().chars().take(12).collect()
}

/// A repository with the original code committed.
fn original_project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    fs::write(p.join("model.py"), "import torch\nx = 1\n").unwrap();
    fs::write(p.join("README.md"), "a model\n").unwrap();
    git(p, &["init", "-q"]);
    git(p, &["add", "."]);
    git(p, &["commit", "-qm", "original"]);
    dir
}

const PORTED_MODEL: &str = "try:\n    import torch_npu\nexcept ImportError:\n    torch_npu = None\n_NPU_PATCHER = None\nimport torch\nx = 1\n";

#[test]
fn summary_base_is_the_commit_before_the_port_when_migrate_to_cloudrobo_is_never_committed() {
    let dir = original_project();
    let p = dir.path();
    let original = head_of(p, "HEAD");
    npu_assets(&["init", "."], p);
    fs::write(p.join(".gitignore"), "migrate_to_cloudrobo/\nissues.json\n").unwrap();
    fs::write(p.join("model.py"), PORTED_MODEL).unwrap();
    git(p, &["add", "."]);
    git(p, &["commit", "-qm", "run on the NPU"]);
    fs::write(p.join("README.md"), "a model, on NPUs too\n").unwrap();
    git(p, &["commit", "-qam", "docs"]);
    let line = base_line(p);
    assert!(
        line.starts_with(&format!(
            "Base `{original}`: the last commit before the port began: the parent of `"
        )),
        "{line}"
    );
    assert!(line.contains("(\"run on the NPU\")"), "{line}");
    let out = npu_assets(&["summary", ".", "--stdout"], p);
    let text = stdout(&out);
    assert!(text.contains("| modified | `model.py` |"), "{text}");
    assert!(text.contains("| modified | `README.md` |"), "{text}");
}

#[test]
fn summary_base_is_before_a_commit_that_holds_the_port_and_its_assets_together() {
    let dir = original_project();
    let p = dir.path();
    let original = head_of(p, "HEAD");
    npu_assets(&["init", "."], p);
    fs::write(p.join("model.py"), PORTED_MODEL).unwrap();
    git(p, &["add", "."]);
    git(p, &["commit", "-qm", "port"]);
    let line = base_line(p);
    assert!(line.starts_with(&format!("Base `{original}`:")), "{line}");
    let text = stdout(&npu_assets(&["summary", ".", "--stdout"], p));
    assert!(text.contains("| modified | `model.py` | 5 | 0 |"), "{text}");
}

#[test]
fn summary_base_is_head_while_the_port_is_uncommitted() {
    let dir = original_project();
    let p = dir.path();
    let head = head_of(p, "HEAD");
    npu_assets(&["init", "."], p);
    fs::write(p.join("model.py"), PORTED_MODEL).unwrap();
    let line = base_line(p);
    assert!(
        line.starts_with(&format!("Base `{head}`: HEAD, since no commit touches `migrate_to_cloudrobo/`, issues.json or the NPU setup: the port is not committed")),
        "{line}"
    );
    assert!(line.contains("`npu-assets summary . --base REV`"), "{line}");
}

#[test]
fn summary_base_option_and_missing_records() {
    let dir = ported_project();
    let p = dir.path();
    let out = npu_assets(&["summary", ".", "--base", "no-such-rev", "--stdout"], p);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("`no-such-rev` is not a commit"),
        "{}",
        stderr(&out)
    );
    let out = npu_assets(&["summary", ".", "--base", "HEAD~1", "--stdout"], p);
    assert!(out.status.success());
    // Against the original commit, the port's own files show up as added.
    assert!(stdout(&out).contains("| added | `migrate_to_cloudrobo/train.sh` |"));

    let bare = tempfile::tempdir().unwrap();
    let out = npu_assets(&["summary", ".", "--stdout"], bare.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("_No issues.json found"), "{text}");
    assert!(text.contains("_no git inventory:"), "{text}");
    assert!(text.contains("_No verify report at"), "{text}");
    assert!(stderr(&out).contains("npu-assets: note: no issues.json"));

    let out = npu_assets(&["summary", ".", "--issues", "missing.json"], bare.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("missing.json"));
}

#[test]
fn summary_times_every_recorded_step_and_keeps_run_outputs_out_of_the_changes() {
    let dir = ported_project();
    let p = dir.path();
    // A training run that wrote a checkpoint, an ignored folder, and a verify run on record.
    let started = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(90);
    fs::write(p.join(".gitignore"), "wandb/\n").unwrap();
    // The port's new module and the .gitignore were written before the run.
    let before = std::time::SystemTime::now() - std::time::Duration::from_hours(1);
    for name in ["npu_utils.py", ".gitignore"] {
        fs::File::options()
            .write(true)
            .open(p.join(name))
            .and_then(|f| f.set_modified(before))
            .unwrap();
    }
    fs::create_dir_all(p.join("outputs")).unwrap();
    fs::write(p.join("outputs/replay_buffer.npz"), [0u8, 1, 2]).unwrap();
    fs::create_dir_all(p.join("wandb/run-1")).unwrap();
    fs::write(p.join("wandb/run-1/log.txt"), "x\n").unwrap();
    let logs = p.join("migrate_to_cloudrobo/logs");
    fs::create_dir_all(&logs).unwrap();
    fs::write(
        logs.join("train_20260101_100000.log"),
        format!(
            "# command: python train.py\n# started: {}\nstep 1\n# exit code: 0\n",
            started.strftime("%Y-%m-%dT%H:%M:%S%z")
        ),
    )
    .unwrap();
    fs::write(
        logs.join("verify-runs.jsonl"),
        "{\"started_at\": \"2026-01-01T11:00:00Z\", \"finished_at\": \"2026-01-01T11:01:10Z\", \"modes\": [\"static\", \"runtime\"]}\n\
         {\"started_at\": \"2026-01-01T11:05:00Z\", \"finished_at\": \"2026-01-01T11:05:20Z\", \"modes\": [\"static\", \"data\"]}\n",
    )
    .unwrap();
    let out = npu_assets(&["summary", ".", "--stdout"], p);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    // Steps with a record have a time and say where it comes from; the rest say so.
    assert!(
        text.contains("| 5–6 | Verify runtime, pipeline and data (`npu-verify`) | 2026-01-01 11:00 UTC | 1m 30s | last report: 1 fail, 1 pass; time: 2 run(s) in `migrate_to_cloudrobo/logs/verify-runs.jsonl`, added up |"),
        "{text}"
    );
    let train_row = text
        .lines()
        .find(|l| l.starts_with("| 7 |"))
        .unwrap_or_default();
    assert!(
        train_row.contains("| 1m 3")
            && train_row.contains("each log's `# started:` line to its last write"),
        "{train_row}"
    );
    assert!(
        text.contains("| 4 | `npu-progress --check-complete` | not recorded | not recorded |"),
        "{text}"
    );
    assert!(!text.contains("| — |"), "{text}");
    // The checkpoint is the run's output and the ignored folder is listed apart: neither is a change.
    assert!(!text.contains("| `outputs/replay_buffer.npz` |"), "{text}");
    assert!(
        text.contains("1 untracked file(s) written while a training or verify run was going (its outputs): `outputs/replay_buffer.npz`."),
        "{text}"
    );
    assert!(
        text.contains(
            "what `.gitignore` leaves out: `migrate_to_cloudrobo/logs/`, \
             `migrate_to_cloudrobo/verify-report.json`, `wandb/`."
        ),
        "{text}"
    );
    // A file written outside any run is still the port's own new code.
    assert!(
        text.contains("| added (untracked) | `npu_utils.py` | 2 | 0 |"),
        "{text}"
    );
}

/// A fake interpreter whose torch is `version` (it answers the metadata query only).
fn fake_python(dir: &Path, version: Option<&str>) -> PathBuf {
    let path = dir.join("python");
    let body = match version {
        Some(v) => format!("#!/bin/sh\necho {v}\n"),
        None => "#!/bin/sh\necho \"PackageNotFoundError: No package metadata was found for torch\" >&2\nexit 1\n"
            .to_owned(),
    };
    fs::write(&path, body).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn init_with_the_emulator_readies_the_real_transfer_to_npu_or_says_why_not() {
    use patch_assets::torch_npu_layer;
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("p");
    fs::create_dir(&project).unwrap();
    // A cache that already holds the layer of the release pinned for torch 2.6.0.
    let release = torch_npu_layer::pairing("2.6.0").unwrap();
    let cache = dir.path().join("cache");
    let layer = cache.join(&release.version);
    fs::create_dir_all(layer.join("torch_npu/contrib")).unwrap();
    fs::write(layer.join("torch_npu/contrib/transfer_to_npu.py"), "").unwrap();
    fs::write(layer.join(".complete"), format!("{}\n", release.sha256)).unwrap();
    let python = fake_python(dir.path(), Some("2.6.0+cpu"));
    let out = Command::new(env!("CARGO_BIN_EXE_npu-assets"))
        .args(["init", ".", "--emulator", "--python"])
        .arg(&python)
        .env("NPU_PATCHER_TORCH_NPU_DIR", &cache)
        .current_dir(&project)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!(
            "cached    torch-npu {} (pairs with torch 2.6.0+cpu)",
            release.version
        )),
        "{}",
        stdout(&out)
    );
    // Without torch in the interpreter, init still succeeds and warns in one line.
    let python = fake_python(dir.path(), None);
    let out = Command::new(env!("CARGO_BIN_EXE_npu-assets"))
        .args(["init", ".", "--emulator", "--python"])
        .arg(&python)
        .env("NPU_PATCHER_TORCH_NPU_DIR", &cache)
        .current_dir(&project)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(
            "npu-assets: warning: the emulated runs will use the emulator's stand-in transfer_to_npu, \
             not the real one of the torch-npu release that pairs with the project's torch: cannot read \
             the torch version"
        ) && err.contains("to fetch it later: `npu-assets fetch-torch-npu --python"),
        "{err}"
    );
}

#[test]
fn summary_reports_the_latest_result_of_each_configuration() {
    let dir = ported_project();
    let p = dir.path();
    fs::write(
        p.join("migrate_to_cloudrobo/verify-report.json"),
        r#"{"generated_at": "2026-01-03T12:00:00Z", "checks": [
            {"name": "static.migrate_dir", "status": "pass", "detail": "ok"},
            {"name": "pipeline.run", "status": "fail", "detail": "rank 1 hung",
             "configuration": {"processes": 2, "emulated": true, "label": "2 processes under torchrun, emulated npu, torch 2.6.0"}},
            {"name": "pipeline.run", "status": "pass", "detail": "2 optimizer steps ran",
             "from_run": "2026-01-02T09:00:00Z",
             "configuration": {"processes": 1, "emulated": true, "label": "1 process, emulated npu, torch 2.6.0"}}]}"#,
    )
    .unwrap();
    let out = npu_assets(&["summary", "."], p);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = fs::read_to_string(p.join("migrate_to_cloudrobo/ADAPTATION_SUMMARY.md")).unwrap();
    assert!(
        text.contains("| Check | Configuration | Ran | Status | Detail |"),
        "{text}"
    );
    assert!(
        text.contains(
            "| pipeline.run | 1 process, emulated npu, torch 2.6.0 | 2026-01-02T09:00:00Z | pass | 2 optimizer steps ran |"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "| pipeline.run | 2 processes under torchrun, emulated npu, torch 2.6.0 | 2026-01-03T12:00:00Z | fail | rank 1 hung |"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "verify check `pipeline.run` (2 processes under torchrun, emulated npu, torch 2.6.0) is fail: rank 1 hung"
        ),
        "{text}"
    );
    assert!(
        !text.contains("verify check `pipeline.run` (1 process"),
        "{text}"
    );
}
