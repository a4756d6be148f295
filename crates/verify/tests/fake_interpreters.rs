//! npu-verify against fake interpreters: canned output, hangs, crashes, non-zero exits, partial
//! results. Each test asserts the exit code, the report on stdout and the messages together.

mod common;

use assert_cmd::Command;
use common::check;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A shell script standing in for Python. It is called as `FAKE -u run_harness.py REQUEST.json`.
fn fake_python(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("fake-python");
    let script = format!(
        "#!/bin/sh\nreq=\"$3\"\nresults=$(sed -n 's/.*\"results\":\"\\([^\"]*\\)\".*/\\1/p' \"$req\")\n\
         mode=$(sed -n 's/.*\"mode\":\"\\([a-z]*\\)\".*/\\1/p' \"$req\")\n{body}\n"
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A project whose static checks pass (issues.json aside, which only warns when absent).
fn good_project(dir: &Path) -> PathBuf {
    let root = dir.join("model");
    common::set_up_migrate(&root);
    std::fs::write(
        root.join("train.py"),
        "import torch\nfrom runtime_patches import build_vla_patcher\n\nbuild_vla_patcher().apply()\n\n\
         if __name__ == \"__main__\":\n    pass\n",
    )
    .unwrap();
    root
}

fn verify() -> Command {
    let mut cmd = Command::cargo_bin("npu-verify").unwrap();
    cmd.env_remove("ASCEND_RT_VISIBLE_DEVICES")
        .env_remove("CONDA_PREFIX");
    cmd
}

fn json(output: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

#[test]
fn static_checks_fail_on_a_bare_project_and_write_no_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = verify().arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("FAIL   static.migrate_dir"), "{stdout}");
    assert!(
        stdout.contains("npu-assets init"),
        "the remedy is shown: {stdout}"
    );
    assert!(stdout.contains("FAIL   static.entry_patcher"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the JSON report was not written"),
        "{stderr}"
    );
}

#[test]
fn a_good_project_passes_statically_and_gets_its_report_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = good_project(dir.path());
    let out = verify()
        .arg(&root)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let report = json(&out);
    assert_eq!(check(&report, "static.runtime_patches")["status"], "pass");
    assert_eq!(check(&report, "static.entry_patcher")["status"], "pass");
    assert_eq!(check(&report, "static.issues")["status"], "warn");
    let written: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root.join("migrate_to_cloudrobo/verify-report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(written["checks"], report["checks"]);
    // Each run is also recorded, one line each, for the adaptation summary's timing.
    let runs =
        std::fs::read_to_string(root.join("migrate_to_cloudrobo/logs/verify-runs.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = runs
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{runs}");
    assert_eq!(lines[0]["modes"], serde_json::json!(["static"]));
    assert!(lines[0]["started_at"].as_str().unwrap() <= lines[0]["finished_at"].as_str().unwrap());
    assert_eq!(lines[0]["summary"]["fail"], 0);
}

#[test]
fn a_changed_patch_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let root = good_project(dir.path());
    let path = root.join("migrate_to_cloudrobo/runtime_patches.py");
    let text = std::fs::read_to_string(&path).unwrap();
    let changed = text.replacen(
        "class NanToNumSafe",
        "# local edit\nclass _Unused:\n    pass\n\n\nclass NanToNumSafe",
        1,
    );
    assert_ne!(text, changed, "the shipped file has a NanToNumSafe class");
    std::fs::write(&path, changed).unwrap();
    let out = verify()
        .arg(&root)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let report = json(&out);
    let patches = check(&report, "static.runtime_patches");
    assert_eq!(patches["status"], "warn");
    assert!(
        patches["detail"]
            .as_str()
            .unwrap()
            .contains("added: _Unused"),
        "{patches:#}"
    );

    // A copy that does not parse is broken, whatever it changed.
    std::fs::write(
        &path,
        text.replacen("class NanToNumSafe", "class NanToNumSafe  # edit\nx", 1),
    )
    .unwrap();
    let out = verify()
        .arg(&root)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let patches = check(&json(&out), "static.runtime_patches").clone();
    assert_eq!(patches["status"], "fail", "{patches:#}");
    let detail = patches["detail"].as_str().unwrap_or_default();
    assert!(
        detail.starts_with("runtime_patches.py does not parse: line "),
        "{detail}"
    );
}

#[test]
fn pending_issues_fail_and_fixed_ones_pass() {
    let dir = tempfile::tempdir().unwrap();
    let root = good_project(dir.path());
    let issue = serde_json::json!({
        "id": "RND-4f1a9c", "pattern": "P_RND", "category": "DEVICE", "severity": "error", "performance": false,
        "file": "train.py", "line": 3, "column": 1, "end_line": 3, "end_column": 10, "symbol": null,
        "message": "m", "snippet": "s", "related": [], "fix_template": "references/fix-templates/P_RND.md",
        "fingerprint": "f", "status": "pending", "reason": null, "history": []
    });
    let file = |status: &str| {
        let mut issue = issue.clone();
        issue["status"] = status.into();
        serde_json::json!({
            "schema_version": 1, "tool": {"name": "npu-scan", "version": "0"}, "root": ".",
            "scanned_at": "2026-01-01T00:00:00Z",
            "summary": {"total": 1, "by_status": {status: 1}, "by_pattern": {"P_RND": {status: 1}}},
            "issues": [issue], "unparsed": []
        })
    };
    let issues = root.join("issues.json");
    std::fs::write(&issues, file("pending").to_string()).unwrap();
    let out = verify()
        .arg(&root)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let failed = check(&json(&out), "static.issues").clone();
    assert_eq!(failed["status"], "fail");
    assert!(
        failed["detail"].as_str().unwrap().contains("RND-4f1a9c"),
        "{failed:#}"
    );
    std::fs::write(&issues, file("fixed").to_string()).unwrap();
    let out = verify()
        .arg(&root)
        .args(["--issues"])
        .arg(&issues)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(check(&json(&out), "static.issues")["status"], "pass");
}

#[test]
fn no_interpreter_names_every_place_looked() {
    let dir = tempfile::tempdir().unwrap();
    let root = good_project(dir.path());
    let out = verify()
        .arg(&root)
        .arg("--runtime")
        .env("PATH", dir.path().join("empty"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for place in [
        "--python",
        "--conda-env",
        "$CONDA_PREFIX/bin/python",
        "python3 on PATH",
    ] {
        assert!(stdout.contains(place), "{place} missing: {stdout}");
    }
}

#[test]
fn an_interpreter_that_only_prints_is_reported_with_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let root = good_project(dir.path());
    let py = fake_python(dir.path(), "echo 'Python 2.7.18 says hello'\nexit 0");
    let out = verify()
        .arg(&root)
        .arg("--runtime")
        .arg("--python")
        .arg(&py)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "could not run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("FAIL   runtime.harness"), "{stdout}");
    assert!(
        stdout.contains("did not start the harness (exit status 0)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Python 2.7.18 says hello"),
        "the last output is shown: {stdout}"
    );
    assert!(
        root.join("migrate_to_cloudrobo/verify-report.json")
            .is_file(),
        "the report is still written"
    );
}

#[test]
fn a_hanging_interpreter_is_stopped_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let root = good_project(dir.path());
    let py = fake_python(
        dir.path(),
        "echo 'loading the dataset...'\nsleep 300 &\nsleep 300",
    );
    let started = std::time::Instant::now();
    let out = verify()
        .arg(&root)
        .args(["--runtime", "--timeout", "2", "--python"])
        .arg(&py)
        .output()
        .unwrap();
    assert!(started.elapsed().as_secs() < 60, "the timeout stopped it");
    assert_eq!(out.status.code(), Some(2));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("did not finish within 2 s"), "{stdout}");
    assert!(stdout.contains("loading the dataset..."), "{stdout}");
}

#[test]
fn a_crashing_interpreter_is_reported_with_its_signal() {
    let dir = tempfile::tempdir().unwrap();
    let root = good_project(dir.path());
    let py = fake_python(
        dir.path(),
        "echo 'Fatal Python error: Segmentation fault'\nkill -SEGV $$",
    );
    let out = verify()
        .arg(&root)
        .args(["--runtime", "--python"])
        .arg(&py)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("killed by signal 11"), "{stdout}");
    assert!(stdout.contains("Fatal Python error"), "{stdout}");
}

#[test]
fn a_failing_interpreter_is_reported_with_its_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    let root = good_project(dir.path());
    let py = fake_python(
        dir.path(),
        "echo 'ImportError: libpython3.so: cannot open shared object file' >&2\nexit 3",
    );
    let out = verify()
        .arg(&root)
        .args(["--runtime", "--python"])
        .arg(&py)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("exit status 3"), "{stdout}");
    assert!(
        stdout.contains("cannot open shared object file"),
        "stderr is captured too: {stdout}"
    );
}

#[test]
fn checks_written_before_a_crash_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let root = good_project(dir.path());
    let py = fake_python(
        dir.path(),
        "echo '{\"type\":\"hello\",\"python\":\"3.11.7\"}' >> \"$results\"\n\
         echo '{\"type\":\"check\",\"name\":\"runtime.torch\",\"status\":\"pass\",\"detail\":\"torch 2.6.0\"}' >> \"$results\"\n\
         printf '{\"type\":\"check\",\"name\":\"runtime.tor' >> \"$results\"\n\
         echo 'matmul on npu:0...'\nkill -KILL $$",
    );
    let out = verify()
        .arg(&root)
        .args(["--runtime", "--format", "json", "--python"])
        .arg(&py)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "it ran, and a check failed");
    let report = json(&out);
    assert_eq!(check(&report, "runtime.torch")["status"], "pass");
    let died = check(&report, "runtime.harness");
    assert_eq!(died["status"], "fail");
    let detail = died["detail"].as_str().unwrap();
    assert!(
        detail.contains("died during the runtime run (killed by signal 9)"),
        "{detail}"
    );
    assert!(detail.contains("matmul on npu:0..."), "{detail}");
    assert_eq!(report["interpreter"]["version"], "3.11.7");
    assert_eq!(report["harness_runs"][0]["mode"], "runtime");
}

#[test]
fn canned_results_become_the_report_and_the_device_list_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let root = good_project(dir.path());
    let py = fake_python(
        dir.path(),
        "echo '{\"type\":\"hello\",\"python\":\"3.10.14\"}' >> \"$results\"\n\
         echo '{\"type\":\"check\",\"name\":\"runtime.torch_npu\",\"status\":\"pass\",\"detail\":\"torch_npu 2.6.0.post5\",\"emulated\":false}' >> \"$results\"\n\
         echo '{\"type\":\"fact\",\"name\":\"device_count\",\"value\":2}' >> \"$results\"\n\
         echo '{\"type\":\"done\"}' >> \"$results\"\nexit 0",
    );
    let run = |devices: &str| {
        verify()
            .arg(&root)
            .args(["--runtime", "--format", "json", "--python"])
            .arg(&py)
            .env("ASCEND_RT_VISIBLE_DEVICES", devices)
            .output()
            .unwrap()
    };
    let out = run("0,1");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let report = json(&out);
    assert_eq!(
        check(&report, "runtime.torch_npu")["detail"],
        "torch_npu 2.6.0.post5"
    );
    assert_eq!(check(&report, "runtime.visible_devices")["status"], "pass");

    let out = run("0, 1");
    assert_eq!(out.status.code(), Some(1));
    let devices = check(&json(&out), "runtime.visible_devices").clone();
    assert_eq!(devices["status"], "fail");
    assert!(
        devices["detail"]
            .as_str()
            .unwrap()
            .contains("reads it as `0`"),
        "{devices:#}"
    );

    let out = run("0,1,2,3");
    assert_eq!(out.status.code(), Some(1));
    let devices = check(&json(&out), "runtime.visible_devices").clone();
    assert!(
        devices["detail"]
            .as_str()
            .unwrap()
            .contains("lists 4 devices but torch_npu sees 2"),
        "{devices:#}"
    );
}

#[test]
fn a_launch_command_that_starts_no_python_cannot_run() {
    let dir = tempfile::tempdir().unwrap();
    let root = good_project(dir.path());
    let py = fake_python(dir.path(), "exit 0");
    let out = verify()
        .arg(&root)
        .args(["--pipeline", "--python"])
        .arg(&py)
        .args(["--", "sh", "-c", "echo 'nothing to train'"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("without starting a Python program"),
        "{stdout}"
    );
    assert!(stdout.contains("nothing to train"), "{stdout}");
}

#[test]
fn a_project_without_entry_points_cannot_run_the_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let root = good_project(dir.path());
    std::fs::remove_file(root.join("train.py")).unwrap();
    let py = fake_python(dir.path(), "exit 1");
    let out = verify()
        .arg(&root)
        .args(["--pipeline", "--python"])
        .arg(&py)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("FAIL   entry"), "{stdout}");
    assert!(stdout.contains("no entry point found"), "{stdout}");
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = verify().arg(dir.path().join("missing")).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("npu-verify: error: "), "{stderr}");
    assert!(stderr.contains("not a directory"), "{stderr}");

    let out = verify()
        .arg(dir.path())
        .args(["--pipeline", "--steps", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "clap rejects 0 steps");
    let out = verify()
        .arg(dir.path())
        .args(["--python", "a", "--conda-env", "b"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "--python and --conda-env conflict"
    );
}

#[test]
fn ctrl_c_stops_the_harness_group_and_still_reports() {
    let dir = tempfile::tempdir().unwrap();
    let root = good_project(dir.path());
    let pid_file = dir.path().join("worker.pid");
    let py = fake_python(
        dir.path(),
        &format!(
            "echo '{{\"type\":\"hello\",\"python\":\"3.11\"}}' >> \"$results\"\n\
             sleep 300 &\necho $! > '{}'\necho 'training...'\nwait",
            pid_file.display()
        ),
    );
    let bin = assert_cmd::cargo::cargo_bin("npu-verify");
    let child = std::process::Command::new(bin)
        .arg(&root)
        .args(["--runtime", "--python"])
        .arg(&py)
        .env_remove("ASCEND_RT_VISIBLE_DEVICES")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !pid_file.exists() && started.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let worker: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let verify_pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(verify_pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(started.elapsed().as_secs() < 30, "Ctrl-C ended the run");
    assert_eq!(out.status.code(), Some(2));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("interrupted: the runtime run was stopped"),
        "{stdout}"
    );
    assert!(stdout.contains("training..."), "{stdout}");
    // Gone, or a zombie waiting for a reaper (the container's init may not reap at once).
    let state = std::fs::read_to_string(format!("/proc/{worker}/stat")).unwrap_or_default();
    let alive = state
        .rsplit_once(") ")
        .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'));
    assert!(
        !alive,
        "the harness's background process was stopped with its group: {state}"
    );
}

#[test]
fn the_files_a_pipeline_run_executed_are_written_beside_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let root = good_project(dir.path());
    let py = fake_python(
        dir.path(),
        "echo '{\"type\":\"hello\",\"python\":\"3.10.14\"}' >> \"$results\"\n\
         echo '{\"type\":\"fact\",\"name\":\"executed\",\"value\":{\"entry\":\"train.py\",\"files\":[\"pkg/a.py\",\"train.py\"],\"seconds\":0.0003}}' >> \"$results\"\n\
         echo '{\"type\":\"done\"}' >> \"$results\"\nexit 0",
    );
    verify()
        .arg(&root)
        .args([
            "--pipeline",
            "--entry",
            "train.py",
            "--format",
            "json",
            "--python",
        ])
        .arg(&py)
        .output()
        .unwrap();
    let written = std::fs::read(root.join("migrate_to_cloudrobo/executed-files.json"))
        .unwrap_or_else(|e| panic!("executed-files.json: {e}"));
    let record: serde_json::Value = serde_json::from_slice(&written).unwrap();
    assert_eq!(record["entry"], "train.py", "{record:#}");
    assert_eq!(
        record["files"],
        serde_json::json!(["pkg/a.py", "train.py"]),
        "{record:#}"
    );
    assert_eq!(record["command"][1], "train.py", "{record:#}");
}
