//! The real path: the test venv's CPU torch, `--emulate-npu`, and copies of the demo project.
//! Before its fixes the pipeline check must fail for a porting reason; after them it must pass.
//!
//! Needs `NPU_PATCHER_PYTHON` (set by `cargo xtask test`; `cargo xtask venv` prints the path).

mod common;

use assert_cmd::Command;
use common::{check, demo, python, verify_json};
use std::path::Path;

fn verify(root: &Path, args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let args = [&["--emulate-npu", "--timeout", "300"], args].concat();
    verify_json(root, &args, &[])
}

/// The `transfer_to_npu` that must run under `--emulate-npu`: the real one of the pinned torch-npu
/// wheel (`torch-npu/wheels.json`) that pairs with the venv's torch, which `cargo xtask test`
/// extracts before the tests; the stand-in when no pinned wheel pairs with it.
fn expected_transfer_source(report: &serde_json::Value) -> String {
    let detail = check(report, "runtime.torch")["detail"].as_str().unwrap();
    let version = detail.split_whitespace().nth(1).unwrap();
    let base = version.split('+').next().unwrap();
    common::transfer_source_for(base)
}

fn failures(report: &serde_json::Value) -> Vec<String> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .map(|c| format!("{}: {}", c["name"], c["detail"]))
        .collect()
}

#[test]
fn unfixed_demo_fails_the_pipeline_because_it_still_uses_cuda() {
    let dir = tempfile::tempdir().unwrap();
    let root = demo(dir.path(), "tiny-vla");
    let (code, report, stderr) = verify(&root, &["--pipeline", "--config", "configs/train.yaml"]);
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    let run = check(&report, "pipeline.run");
    assert_eq!(run["status"], "fail", "{run:#}");
    assert_eq!(run["emulated"], true);
    assert_eq!(run["data"]["reason"], "cuda-in-use", "{run:#}");
    assert!(
        run["detail"].as_str().unwrap().contains("tiny_vla/"),
        "names the project line: {run:#}"
    );
    assert!(
        run["remedy"].as_str().unwrap().contains("transfer_to_npu"),
        "{run:#}"
    );
    // The entry point does not apply the patcher: the static check says so and the harness applied it.
    assert_eq!(check(&report, "static.entry_patcher")["status"], "fail");
    assert_eq!(check(&report, "pipeline.patches")["status"], "warn");
    assert_eq!(report["emulated"], true);
}

#[test]
fn unfixed_demo_fails_through_its_launch_command_too() {
    let dir = tempfile::tempdir().unwrap();
    let root = demo(dir.path(), "tiny-vla");
    let (code, report, stderr) = verify(
        &root,
        &[
            "--pipeline",
            "--",
            "python",
            "train.py",
            "--config",
            "configs/train.yaml",
        ],
    );
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    assert_eq!(
        check(&report, "pipeline.run")["data"]["reason"],
        "cuda-in-use"
    );
    assert_eq!(report["entry"]["command"][1], "train.py");
}

#[test]
fn launch_scripts_run_under_the_harness_through_python_shims() {
    let dir = tempfile::tempdir().unwrap();
    let unfixed = demo(dir.path(), "tiny-vla");
    let script = "#!/bin/bash\nset -e\npython -c 'print(\"preflight ok\")'\npython train.py --config configs/train.yaml \"$@\"\n";
    std::fs::write(unfixed.join("run_train.sh"), script).unwrap();
    let (code, report, stderr) = verify(&unfixed, &["--pipeline", "--", "bash", "run_train.sh"]);
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    assert_eq!(
        check(&report, "pipeline.run")["data"]["reason"],
        "cuda-in-use"
    );

    // The training command exactly as SKILL.md launches it, through train.sh.
    let fixed = demo(dir.path(), "tiny-vla-fixed");
    let (code, report, stderr) = verify(
        &fixed,
        &[
            "--pipeline",
            "--",
            "bash",
            "migrate_to_cloudrobo/train.sh",
            "python",
            "train.py",
            "--config",
            "configs/train.yaml",
        ],
    );
    assert_eq!(
        code,
        Some(0),
        "failures: {:#?}\n{stderr}",
        failures(&report)
    );
    assert_eq!(check(&report, "pipeline.run")["data"]["steps"], 2);
}

#[test]
fn fixed_demo_passes_runtime_and_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let root = demo(dir.path(), "tiny-vla-fixed");
    let (code, report, stderr) = verify(
        &root,
        &["--runtime", "--pipeline", "--config", "configs/train.yaml"],
    );
    assert_eq!(
        code,
        Some(0),
        "failures: {:#?}\n{stderr}",
        failures(&report)
    );
    for name in [
        "pipeline.run",
        "pipeline.loss",
        "pipeline.params_device",
        "runtime.device_ops",
        "runtime.torch_npu",
    ] {
        assert_eq!(check(&report, name)["status"], "pass", "{name}");
        assert_eq!(check(&report, name)["emulated"], true, "{name}");
    }
    let run = check(&report, "pipeline.run");
    assert_eq!(run["data"]["steps"], 2);
    let params = check(&report, "pipeline.params_device");
    assert!(
        params["detail"].as_str().unwrap().contains("on npu"),
        "{params:#}"
    );
    assert!(
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "runtime.patch.SdpaMaskBroadcast"),
        "each runtime patch self-tests"
    );
    assert_eq!(
        check(&report, "pipeline.patches")["status"],
        "pass",
        "the program applies the patcher itself"
    );
    // The entry imports transfer_to_npu: the report says which one ran over the emulated device.
    let transfer = check(&report, "pipeline.transfer_to_npu");
    assert_eq!(transfer["status"], "pass", "{transfer:#}");
    assert_eq!(
        transfer["data"]["source"],
        expected_transfer_source(&report),
        "{transfer:#}"
    );
    let written: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root.join("migrate_to_cloudrobo/verify-report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(written["checks"], report["checks"]);
}

#[test]
fn fixed_demo_passes_the_data_check_with_its_config_auto_detected() {
    let dir = tempfile::tempdir().unwrap();
    let root = demo(dir.path(), "tiny-vla-fixed");
    let (code, report, stderr) = verify(&root, &["--data", "--batches", "2"]);
    assert_eq!(
        code,
        Some(0),
        "failures: {:#?}\n{stderr}",
        failures(&report)
    );
    assert_eq!(
        report["entry"]["config"], "configs/train.yaml",
        "{:#}",
        report["entry"]
    );
    assert_eq!(check(&report, "data.run")["status"], "pass");
    let batches = check(&report, "data.batches");
    assert!(
        batches["detail"]
            .as_str()
            .unwrap()
            .contains("batch.actions float32"),
        "{batches:#}"
    );
    assert_eq!(check(&report, "data.float64")["status"], "pass");
}

#[test]
fn unfixed_demo_data_shows_its_float64_field() {
    let dir = tempfile::tempdir().unwrap();
    let root = demo(dir.path(), "tiny-vla");
    let (_, report, _) = verify(&root, &["--data", "--config", "configs/train.yaml"]);
    let f64_check = check(&report, "data.float64");
    assert_eq!(f64_check["status"], "warn", "{f64_check:#}");
    assert!(
        f64_check["detail"]
            .as_str()
            .unwrap()
            .contains("batch.state"),
        "{f64_check:#}"
    );
}

#[test]
fn fixed_demo_hydra_entry_passes_with_a_yaml_config() {
    let dir = tempfile::tempdir().unwrap();
    let root = demo(dir.path(), "tiny-vla-fixed");
    let (code, report, stderr) = verify(
        &root,
        &[
            "--pipeline",
            "--entry",
            "train_hydra.py",
            "--config",
            "configs/train.yaml",
        ],
    );
    assert_eq!(
        code,
        Some(0),
        "failures: {:#?}\n{stderr}",
        failures(&report)
    );
    let command = report["entry"]["command"].as_array().unwrap();
    assert!(
        command.iter().any(|a| a == "--config-name=train"),
        "{command:?}"
    );
    assert!(
        command
            .iter()
            .any(|a| a.as_str().unwrap().starts_with("--config-path=")),
        "{command:?}"
    );
}

#[test]
fn a_hanging_program_is_stopped_and_shows_where_it_waited() {
    let dir = tempfile::tempdir().unwrap();
    let root = demo(dir.path(), "tiny-vla-fixed");
    std::fs::write(
        root.join("wait.py"),
        "import time\n\n\ndef wait_for_peers():\n    print('waiting for peers', flush=True)\n    time.sleep(600)\n\n\n\
         if __name__ == '__main__':\n    wait_for_peers()\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = Command::cargo_bin("npu-verify")
        .unwrap()
        .arg(&root)
        .args([
            "--pipeline",
            "--entry",
            "wait.py",
            "--timeout",
            "20",
            "--format",
            "json",
            "--python",
        ])
        .arg(python())
        .output()
        .unwrap();
    assert!(started.elapsed().as_secs() < 120, "stopped by the timeout");
    assert_eq!(
        out.status.code(),
        Some(1),
        "the harness started, so the run is complete and failed"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let hung = check(&report, "pipeline.harness");
    let detail = hung["detail"].as_str().unwrap();
    assert!(detail.contains("did not finish within 20 s"), "{detail}");
    assert!(
        detail.contains("waiting for peers"),
        "the last output: {detail}"
    );
    assert!(
        detail.contains("wait_for_peers"),
        "the stack at the timeout: {detail}"
    );
    assert_eq!(report["harness_runs"][0]["timed_out"], true);
}

#[test]
fn a_cpu_config_fails_the_parameters_on_device_check() {
    let dir = tempfile::tempdir().unwrap();
    let root = demo(dir.path(), "tiny-vla-fixed");
    let (code, report, _) = verify(&root, &["--pipeline", "--config", "configs/debug.yaml"]);
    assert_eq!(code, Some(1));
    let params = check(&report, "pipeline.params_device");
    assert_eq!(params["status"], "fail", "{params:#}");
    assert!(
        params["detail"].as_str().unwrap().contains("cpu"),
        "{params:#}"
    );
}
