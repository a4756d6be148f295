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

/// The CPU-fallback check passes, or (torch 2.1 with torch-npu 2.1.0.post17) warns only about
/// `clip_grad_norm_`'s foreach path: torch 2.1 sends `aten::_foreach_mul_.Tensor` to the device,
/// and that wheel has no NPU kernel for it (its kernel table), so it runs on the CPU each step.
fn only_the_foreach_clip_falls_back(check: &serde_json::Value) -> bool {
    if check["status"] == "pass" {
        return true;
    }
    check["status"] == "warn"
        && check["data"]["torch_npu"] == "2.1.0.post17"
        && check["data"]["ops"].as_array().is_some_and(|ops| {
            !ops.is_empty() && ops.iter().all(|o| o["op"] == "aten::_foreach_mul_.Tensor")
        })
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
    // The fixed demo computes its loss for the whole batch: no per-sample loop, no CPU fallback.
    let fallback = check(&report, "pipeline.cpu_fallback");
    assert!(only_the_foreach_clip_falls_back(fallback), "{fallback:#}");
    for name in ["pipeline.per_sample", "pipeline.profile"] {
        assert_eq!(
            check(&report, name)["status"],
            "pass",
            "{:#}",
            check(&report, name)
        );
    }
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

/// The fixed demo with the original `tiny_vla/losses.py` put back: its planted per-sample loss loop
/// (`P_VEC`) and numpy round trip (`P_TGT`), in a project that otherwise trains on the NPU.
fn demo_with_the_original_loss(dir: &Path) -> std::path::PathBuf {
    let root = demo(dir, "tiny-vla-fixed");
    let original =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/demo/tiny-vla/tiny_vla/losses.py");
    std::fs::copy(original, root.join("tiny_vla/losses.py")).unwrap();
    let policy = root.join("tiny_vla/policy.py");
    let text = std::fs::read_to_string(&policy).unwrap();
    let call = "flow_matching_targets(batch[\"actions\"])";
    assert!(
        text.contains(call),
        "tiny_vla/policy.py changed: update this test"
    );
    let text = text
        .replacen("import torch\n", "import numpy as np\nimport torch\n", 1)
        .replace(
            call,
            "flow_matching_targets(batch[\"actions\"], np.random.default_rng(0))",
        );
    std::fs::write(&policy, text).unwrap();
    root
}

#[test]
fn the_step_profile_finds_the_demos_per_sample_loop_and_host_round_trip_by_line() {
    let dir = tempfile::tempdir().unwrap();
    let root = demo_with_the_original_loss(dir.path());
    let (code, report, stderr) = verify(&root, &["--pipeline", "--config", "configs/train.yaml"]);
    assert_eq!(
        code,
        Some(0),
        "warnings only: {:#?}\n{stderr}",
        failures(&report)
    );
    let per_sample = check(&report, "pipeline.per_sample");
    assert_eq!(per_sample["status"], "warn", "{per_sample:#}");
    let detail = per_sample["detail"].as_str().unwrap();
    assert!(
        detail.contains("tiny_vla/losses.py:32 ran 32 times per step"),
        "{per_sample:#}"
    );
    assert!(
        detail.contains("per sample of the batch of 32"),
        "{per_sample:#}"
    );
    let syncs = check(&report, "pipeline.syncs");
    assert_eq!(syncs["status"], "warn", "{syncs:#}");
    let detail = syncs["detail"].as_str().unwrap();
    // Two scalar reads per sample (the slice bound `:n` of pred and of target), and the `.cpu()` round trip.
    assert!(
        detail.contains("64 at tiny_vla/losses.py:32 (_local_scalar_dense)"),
        "{syncs:#}"
    );
    assert!(
        detail.contains("1 at tiny_vla/losses.py:14 (copy to host)"),
        "{syncs:#}"
    );
    let fallback = check(&report, "pipeline.cpu_fallback");
    assert!(only_the_foreach_clip_falls_back(fallback), "{fallback:#}");
    let profile = check(&report, "pipeline.profile");
    assert_eq!(profile["data"]["profiled_steps"], 1, "{profile:#}");
    assert_eq!(profile["data"]["batch_sizes"], serde_json::json!([32]));

    // --no-profile: none of the profile's checks, and the fallback check reads torch_npu's warnings.
    let (_, report, _) = verify(
        &root,
        &[
            "--pipeline",
            "--config",
            "configs/train.yaml",
            "--no-profile",
        ],
    );
    let names: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(
        !names.contains(&"pipeline.per_sample") && !names.contains(&"pipeline.syncs"),
        "{names:?}"
    );
    let detail = check(&report, "pipeline.cpu_fallback")["detail"].clone();
    // The report names the transfer_to_npu that ran: the wheel's, which pairs with the torch under test.
    let on_torch_2_1 = report.to_string().contains("torch-npu 2.1.0.post17");
    assert!(
        detail == "no CPU-fallback warning was seen"
            || (on_torch_2_1
                && detail == "operators fell back to the CPU: aten::_foreach_mul_ (1x)"),
        "{detail}"
    );
}

/// A policy with a Beta head (its log-density calls `lgamma`, which no torch-npu release gives an
/// NPU kernel), a `scatter_reduce` (an NPU kernel from torch-npu 2.14.0 on) and a per-sample
/// `.item()` loop.
const BETA_PROBE: &str = "\
import torch
import torch_npu
from runtime_patches import build_vla_patcher

build_vla_patcher().apply()


def main():
    policy = torch.nn.Linear(4, 2).to(\"npu\")
    opt = torch.optim.SGD(policy.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.rand(64) * 0.8 + 0.1)
    for obs, act in torch.utils.data.DataLoader(data, batch_size=8):
        obs, act = obs.to(\"npu\"), act.to(\"npu\")
        ab = torch.nn.functional.softplus(policy(obs)) + 1.0
        log_p = torch.distributions.Beta(ab[:, 0], ab[:, 1]).log_prob(act)
        groups = torch.zeros(2, device=\"npu\").scatter_reduce(0, (act > 0.5).long(), log_p, reduce=\"amax\")
        total = 0.0
        for i in range(obs.shape[0]):
            total += log_p[i].item()
        loss = -log_p.mean() + 0.0 * groups.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == \"__main__\":
    main()
";

#[test]
fn ops_without_an_npu_kernel_in_the_paired_torch_npu_are_reported_with_the_release_lines_and_counts()
 {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("beta");
    common::set_up_migrate(&root);
    std::fs::write(root.join("train.py"), BETA_PROBE).unwrap();
    let (code, report, stderr) = verify(&root, &["--pipeline", "--steps", "3"]);
    assert_eq!(
        code,
        Some(0),
        "warnings only: {:#?}\n{stderr}",
        failures(&report)
    );
    let fallback = check(&report, "pipeline.cpu_fallback");
    let Some(version) = common::paired_torch_npu() else {
        // A torch no pinned release pairs with: the newest older table, named in the check.
        assert_ne!(fallback["status"], "fail", "{fallback:#}");
        return;
    };
    assert_eq!(fallback["status"], "warn", "{fallback:#}");
    assert_eq!(
        fallback["data"]["torch_npu"],
        version.as_str(),
        "{fallback:#}"
    );
    let detail = fallback["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("no NPU kernel in torch_npu {version}")),
        "{fallback:#}"
    );
    assert!(
        detail.contains("aten::lgamma at train.py:15 ("),
        "{fallback:#}"
    );
    let lgamma = fallback["data"]["ops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["op"] == "aten::lgamma")
        .unwrap_or_else(|| panic!("{fallback:#}"));
    assert!(
        lgamma["sites"]["train.py:15"].as_f64().unwrap() >= 1.0,
        "{lgamma:#}"
    );
    // torch-npu 2.14.0 has scatter_reduce.two; the older pinned releases do not.
    let scatter = detail.contains("aten::scatter_reduce.two at train.py:16");
    assert_eq!(scatter, version != "2.14.0", "{version}: {fallback:#}");

    let per_sample = check(&report, "pipeline.per_sample");
    assert_eq!(per_sample["status"], "warn", "{per_sample:#}");
    assert!(
        per_sample["detail"]
            .as_str()
            .unwrap()
            .contains("train.py:19 ran 8 times per step, 1 per sample of the batch of 8"),
        "{per_sample:#}"
    );
    let syncs = check(&report, "pipeline.syncs");
    assert!(
        syncs["detail"]
            .as_str()
            .unwrap()
            .contains("8 at train.py:19 (_local_scalar_dense)"),
        "{syncs:#}"
    );
    // The loop's 8 and more: Beta's argument validation reads `bool()` of device tensors (train.py:15).
    let per_step = syncs["data"]["per_step"].as_array().unwrap();
    assert_eq!(per_step.len(), 2, "{syncs:#}");
    assert!(
        per_step.iter().all(|n| n.as_u64().unwrap() >= 8),
        "{syncs:#}"
    );
}
