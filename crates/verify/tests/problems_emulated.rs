//! Small projects with one NPU porting problem each, run with `--pipeline --emulate-npu` on the
//! test venv's CPU torch: verify must fail (or warn) for that reason and point at the line.
//!
//! Needs `NPU_PATCHER_PYTHON` (set by `cargo xtask test`; `cargo xtask venv` prints the path).

mod common;

use assert_cmd::Command;
use common::{check, python, verify_json};
use std::path::{Path, PathBuf};

/// A project whose `train.py` builds a model on the npu and runs `body` as its training loop.
fn project(dir: &Path, body: &str) -> PathBuf {
    let root = dir.join("toy");
    common::set_up_migrate(&root);
    let mut text = String::from(
        "import torch\nimport torch_npu\nfrom runtime_patches import build_vla_patcher\n\n\
         build_vla_patcher().apply()\n\n\ndef main():\n    model = torch.nn.Linear(4, 2).to(\"npu\")\n    \
         opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    x = torch.randn(8, 4, device=\"npu\")\n",
    );
    for line in body.lines() {
        text.push_str("    ");
        text.push_str(line);
        text.push('\n');
    }
    text.push_str("\n\nif __name__ == \"__main__\":\n    main()\n");
    std::fs::write(root.join("train.py"), text).unwrap();
    root
}

fn run(root: &Path, env: &[(&str, &str)]) -> (Option<i32>, serde_json::Value) {
    let args = ["--pipeline", "--emulate-npu", "--timeout", "300"];
    let (code, report, _) = verify_json(root, &args, env);
    (code, report)
}

/// The `transfer_to_npu` that `--emulate-npu` runs: the real one of the pinned torch-npu wheel
/// (`torch-npu/wheels.json`) that pairs with the venv's torch (`cargo xtask test` extracts the
/// wheels first), else the stand-in.
fn expected_transfer_source() -> String {
    let out = std::process::Command::new(python())
        .args(["-c", "import torch; print(torch.__version__.split('+')[0])"])
        .output()
        .unwrap();
    let base = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    common::transfer_source_for(&base)
}

const STEP: &str = "for _ in range(5):\n    loss = model(x).square().mean()\n    opt.zero_grad()\n    loss.backward()\n    opt.step()";

#[test]
fn a_capability_gate_that_transfer_to_npu_turns_true_fails_at_its_cuda_only_path() {
    // P_DEV's capability gate: under transfer_to_npu `x.is_cuda` is `x.is_npu`, so the branch for
    // CUDA runs on the NPU and imports a CUDA-only kernel library, which Ascend does not have.
    let dir = tempfile::tempdir().unwrap();
    let root = project(
        dir.path(),
        &format!(
            "from torch_npu.contrib import transfer_to_npu\nif x.is_cuda:\n    \
             import flash_attn_2_cuda as kernels\n    x = kernels.fwd(x)\n{STEP}"
        ),
    );
    let (code, report) = run(&root, &[]);
    assert_eq!(code, Some(1), "{report:#}");
    let failed = check(&report, "pipeline.run");
    assert_eq!(failed["status"], "fail", "{failed:#}");
    assert!(
        failed["detail"].as_str().unwrap().contains("train.py:14"),
        "fails at the import behind the gate: {failed:#}"
    );
    assert!(
        failed["detail"]
            .as_str()
            .unwrap()
            .contains("flash_attn_2_cuda"),
        "{failed:#}"
    );
    let transfer = check(&report, "pipeline.transfer_to_npu");
    assert_eq!(
        transfer["data"]["source"],
        expected_transfer_source(),
        "{transfer:#}"
    );
    // Without transfer_to_npu the gate stays false and the same loop trains.
    let plain = project(
        &dir.path().join("plain"),
        &format!(
            "if x.is_cuda:\n    import flash_attn_2_cuda as kernels\n    x = kernels.fwd(x)\n{STEP}"
        ),
    );
    let (code, report) = run(&plain, &[]);
    assert_eq!(code, Some(0), "{report:#}");
}

#[test]
fn offline_the_stand_in_transfer_to_npu_runs_and_the_report_says_how_to_fetch_the_real_one() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(
        dir.path(),
        &format!("from torch_npu.contrib import transfer_to_npu\n{STEP}"),
    );
    let empty = dir.path().join("no-wheels");
    std::fs::create_dir(&empty).unwrap();
    // No index and no local wheels: pip cannot find the release, as on a machine without network.
    let env = [
        ("NPU_PATCHER_TORCH_NPU_DIR", empty.to_str().unwrap()),
        ("PIP_NO_INDEX", "1"),
        ("PIP_FIND_LINKS", ""),
    ];
    let (code, report, stderr) = verify_json(&root, &["--pipeline", "--emulate-npu"], &env);
    let warned = check(&report, "emulator.transfer_to_npu");
    assert_eq!(warned["status"], "warn", "{warned:#}");
    assert!(
        warned["remedy"]
            .as_str()
            .unwrap()
            .contains("npu-assets fetch-torch-npu"),
        "{warned:#}"
    );
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.contains("stand-in transfer_to_npu runs instead"))
            .count(),
        1,
        "{stderr}"
    );
    let transfer = check(&report, "pipeline.transfer_to_npu");
    assert_eq!(transfer["data"]["source"], "stand-in", "{transfer:#}");
    assert_eq!(check(&report, "pipeline.run")["status"], "pass", "{code:?}");
}

#[test]
fn a_clean_loop_passes() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path(), STEP);
    let (code, report) = run(&root, &[]);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(
        check(&report, "pipeline.run")["data"]["steps"],
        2,
        "stopped after --steps 2 of 5"
    );
    assert_eq!(check(&report, "pipeline.params_device")["status"], "pass");
}

#[test]
fn a_host_tensor_meeting_device_tensors_is_a_device_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(
        dir.path(),
        &format!(
            "noise = torch.randn(8, 2)\n{}",
            STEP.replace("model(x)", "(model(x) + noise)")
        ),
    );
    let (code, report) = run(&root, &[]);
    assert_eq!(code, Some(1));
    let run = check(&report, "pipeline.run");
    assert_eq!(run["data"]["reason"], "device-mismatch", "{run:#}");
    assert_eq!(run["data"]["group"], "device_mismatch", "{run:#}");
    assert!(
        run["detail"].as_str().unwrap().contains("train.py:14"),
        "{run:#}"
    );
    assert!(run["remedy"].as_str().unwrap().contains("P_RND"), "{run:#}");
}

#[test]
fn numpy_on_a_device_tensor_fails_without_its_patch() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path(), &format!("print(x.numpy().shape)\n{STEP}"));
    let (code, report) = run(&root, &[("NPU_PATCHES_DISABLE", "TensorNumpySafe")]);
    assert_eq!(code, Some(1));
    let failed = &check(&report, "pipeline.run")["data"];
    assert_eq!(failed["reason"], "numpy-on-device");
    assert_eq!(failed["group"], "numpy", "the emulator's restriction group");
    // With the patch the same program runs, and the report says the patch fired and where.
    let (code, report) = run(&root, &[]);
    assert_eq!(code, Some(0), "{report:#}");
    let patches = check(&report, "pipeline.patches");
    let detail = patches["detail"].as_str().unwrap();
    assert!(detail.contains("TensorNumpySafe 1x, first at"), "{detail}");
    assert!(detail.contains("train.py:12"), "{detail}");
}

#[test]
fn a_non_finite_loss_fails() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(
        dir.path(),
        &STEP.replace(".mean()", ".mean() * float(\"nan\")"),
    );
    let (code, report) = run(&root, &[]);
    assert_eq!(code, Some(1));
    let loss = check(&report, "pipeline.loss");
    assert_eq!(loss["status"], "fail", "{loss:#}");
    assert!(
        loss["detail"]
            .as_str()
            .unwrap()
            .contains("not finite at step 1"),
        "{loss:#}"
    );
}

#[test]
fn float64_tensors_on_the_device_are_counted_with_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(
        dir.path(),
        &STEP.replace(
            "opt.step()",
            "opt.step()\n    t = torch.ones(2, dtype=torch.float64, device=\"npu\") + 1",
        ),
    );
    let (code, report) = run(&root, &[("NPU_PATCHES_DISABLE", "Float64To32")]);
    assert_eq!(code, Some(0), "float64 warns: {report:#}");
    let f64_check = check(&report, "pipeline.float64");
    assert_eq!(f64_check["status"], "warn", "{f64_check:#}");
    assert!(
        f64_check["detail"]
            .as_str()
            .unwrap()
            .contains("train.py:17"),
        "{f64_check:#}"
    );
}

#[test]
fn float32_tensors_are_not_counted_as_float64_when_the_harness_applies_the_patcher() {
    // The entry applies no patcher, so the harness applies ours before the program runs; its
    // Float64To32 makes the name `torch.float64` float32, which must not turn every float32
    // tensor of the program into a "float64 tensor".
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("toy");
    common::set_up_migrate(&root);
    std::fs::write(
        root.join("train.py"),
        "import torch\nimport torch_npu\n\n\ndef main():\n    model = torch.nn.Linear(4, 2).to(\"npu\")\n    \
         opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    x = torch.randn(8, 4, device=\"npu\")\n    \
         for _ in range(3):\n        loss = model(x).square().mean()\n        opt.zero_grad()\n        \
         loss.backward()\n        opt.step()\n\n\nif __name__ == \"__main__\":\n    main()\n",
    )
    .unwrap();
    let (_, report) = run(&root, &[]);
    assert_eq!(check(&report, "static.entry_patcher")["status"], "fail");
    assert_eq!(
        check(&report, "pipeline.run")["status"],
        "pass",
        "{report:#}"
    );
    assert_eq!(
        check(&report, "pipeline.patches")["status"],
        "warn",
        "the harness applied the patcher"
    );
    let f64_check = check(&report, "pipeline.float64");
    assert_eq!(f64_check["status"], "pass", "{f64_check:#}");
}

#[test]
fn a_program_without_optimizer_steps_fails() {
    let dir = tempfile::tempdir().unwrap();
    // No `.step()` anywhere: the report says the script does not train, not "0 of 2 steps".
    let root = project(dir.path(), "print(model(x).sum())");
    let (code, report) = run(&root, &[]);
    assert_eq!(code, Some(1));
    assert_eq!(report["entry"]["trains"], false, "{:#}", report["entry"]);
    let ran = check(&report, "pipeline.run");
    assert_eq!(ran["data"]["reason"], "no-optimizer", "{ran:#}");
    let detail = ran["detail"].as_str().unwrap();
    assert!(detail.contains("ran no optimizer step"), "{ran:#}");
    assert!(!detail.contains("0 of 2"), "{ran:#}");

    // A training loop that ends early is counted.
    let root = project(dir.path(), &STEP.replace("range(5)", "range(1)"));
    let (code, report) = run(&root, &[]);
    assert_eq!(code, Some(1));
    let run = check(&report, "pipeline.run");
    assert_eq!(run["data"]["reason"], "too-few-steps", "{run:#}");
    assert!(
        run["detail"]
            .as_str()
            .unwrap()
            .contains("returned normally after 1 of 2 optimizer steps"),
        "{run:#}"
    );
}

#[test]
fn a_named_entry_that_does_not_train_is_not_told_to_name_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path(), "print(model(x).sum())");
    let args = [
        "--pipeline",
        "--emulate-npu",
        "--timeout",
        "300",
        "--",
        "python",
        "train.py",
    ];
    let (code, report, _) = verify_json(&root, &args, &[]);
    assert_eq!(code, Some(1));
    let ran = check(&report, "pipeline.run");
    assert_eq!(ran["data"]["reason"], "no-optimizer", "{ran:#}");
    let remedy = ran["remedy"].as_str().unwrap();
    assert!(!remedy.contains("point verify at"), "{remedy}");
    assert!(remedy.contains("the command you named"), "{remedy}");
}

#[test]
fn a_failed_run_keeps_its_traceback_in_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path(), STEP);
    std::fs::write(root.join("helpers.py"), "def scale(v):\n    return v / 0\n").unwrap();
    let text = std::fs::read_to_string(root.join("train.py")).unwrap();
    std::fs::write(
        root.join("train.py"),
        text.replace(
            "def main():\n",
            "def main():\n    from helpers import scale\n    scale(1)\n",
        ),
    )
    .unwrap();
    let (code, report) = run(&root, &[]);
    assert_eq!(code, Some(1));
    let ran = check(&report, "pipeline.run");
    let traceback = ran["data"]["traceback"].as_str().unwrap_or_default();
    assert!(
        traceback.contains("helpers.py\", line 2, in scale")
            && traceback.contains("ZeroDivisionError"),
        "{ran:#}"
    );
    assert!(
        !ran["remedy"]
            .as_str()
            .unwrap()
            .contains("in the harness output"),
        "{ran:#}"
    );
    // The text report shows it under the check.
    let out = Command::cargo_bin("npu-verify")
        .unwrap()
        .arg(&root)
        .args(["--pipeline", "--emulate-npu", "--python"])
        .arg(python())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("| ZeroDivisionError: division by zero")),
        "{stdout}"
    );
}

#[test]
fn an_emulator_fault_is_not_blamed_on_the_program() {
    // What the emulated device raises when it cannot run a call itself (npu_emulator's
    // EmulatorLimitation): told apart from the program's errors by its class.
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path(), STEP);
    std::fs::write(
        root.join("fake_device.py"),
        "class EmulatorLimitation(RuntimeError):\n    def __init__(self, op, cause):\n        \
         super().__init__('emulator limitation, not your code: ' + op + ' failed (' + cause + ')')\n        \
         self.op, self.cause = op, cause\n\n\ndef kernel():\n    raise EmulatorLimitation('aten.fancy_op.default', 'no CPU kernel')\n",
    )
    .unwrap();
    let text = std::fs::read_to_string(root.join("train.py")).unwrap();
    std::fs::write(
        root.join("train.py"),
        text.replace(
            "        opt.step()\n",
            "        opt.step()\n        import fake_device\n        fake_device.kernel()\n",
        ),
    )
    .unwrap();
    let (code, report) = run(&root, &[]);
    let ran = check(&report, "pipeline.run");
    assert_eq!(ran["status"], "warn", "{ran:#}");
    assert_eq!(ran["data"]["reason"], "emulator-limitation", "{ran:#}");
    let detail = ran["detail"].as_str().unwrap();
    assert!(
        detail.contains("emulator limitation, not your code: aten.fancy_op.default"),
        "{detail}"
    );
    assert!(
        !ran["remedy"].as_str().unwrap().contains("fix the error"),
        "{ran:#}"
    );
    // No verdict either way: verify could not finish what it was asked.
    assert_eq!(code, Some(2), "{report:#}");
}

#[test]
fn data_names_the_data_loader_it_sampled() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path(), STEP);
    std::fs::write(
        root.join("train.py"),
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\
         def loaders():\n    val = DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=2)\n    \
         train = DataLoader(TensorDataset(torch.randn(16, 3)), batch_size=4)\n    return train, val\n\n\n\
         if __name__ == \"__main__\":\n    train, val = loaders()\n    for batch in train:\n        pass\n",
    )
    .unwrap();
    let (_, report, _) = verify_json(&root, &["--data", "--emulate-npu"], &[]);
    let ran = check(&report, "data.run");
    assert_eq!(ran["status"], "pass", "{ran:#}");
    let detail = ran["detail"].as_str().unwrap();
    assert!(
        detail.contains("the DataLoader built at train.py:6") && detail.contains("of 2 built"),
        "{ran:#}"
    );
    assert_eq!(ran["data"]["site"], "train.py:6", "{ran:#}");
}

#[test]
fn an_argument_error_is_an_early_exit() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(
        dir.path(),
        "import sys\nsys.exit('usage: train.py --data DIR')",
    );
    let (code, report) = run(&root, &[]);
    assert_eq!(code, Some(1));
    let run = check(&report, "pipeline.run");
    assert_eq!(run["data"]["reason"], "exit", "{run:#}");
}

#[test]
fn a_dataset_error_in_a_worker_is_traced_to_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path(), STEP);
    std::fs::write(
        root.join("train.py"),
        "import torch\nfrom torch.utils.data import DataLoader, Dataset\n\n\nclass Episodes(Dataset):\n    \
         def __len__(self):\n        return 64\n\n    def __getitem__(self, i):\n        if i == 5:\n            \
         raise ValueError(f\"corrupt episode {i}\")\n        return {\"obs\": torch.randn(3)}\n\n\n\
         if __name__ == \"__main__\":\n    for batch in DataLoader(Episodes(), batch_size=4, num_workers=2):\n        pass\n",
    )
    .unwrap();
    let mut cmd = Command::cargo_bin("npu-verify").unwrap();
    let out = cmd
        .arg(&root)
        .args(["--data", "--emulate-npu", "--format", "json", "--python"])
        .arg(python())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let workers = check(&report, "data.workers");
    assert_eq!(workers["data"]["reason"], "worker-error", "{workers:#}");
    let detail = workers["detail"].as_str().unwrap();
    assert!(detail.contains("train.py:11 in __getitem__"), "{detail}");
    assert!(detail.contains("ValueError: corrupt episode 5"), "{detail}");
}

#[test]
fn conda_env_runs_the_harness_through_conda_run() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path(), STEP);
    let conda = dir.path().join("conda");
    let log = dir.path().join("conda-args");
    std::fs::write(
        &conda,
        format!(
            "#!/bin/sh\necho \"$@\" > '{}'\nshift 5\nexec '{}' \"$@\"\n",
            log.display(),
            python().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&conda, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::cargo_bin("npu-verify")
        .unwrap()
        .arg(&root)
        .args([
            "--runtime",
            "--emulate-npu",
            "--format",
            "json",
            "--conda-env",
            "npu-env",
        ])
        .env("CONDA_EXE", &conda)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    assert_eq!(report["interpreter"]["source"], "--conda-env npu-env");
    let args = std::fs::read_to_string(&log).unwrap();
    assert!(
        args.starts_with("run --no-capture-output -n npu-env python -u "),
        "{args}"
    );
    assert_eq!(check(&report, "runtime.device_ops")["status"], "pass");
}

/// A loop that reads one value of the batch at a time (`.item()` per sample) and its fix.
const PER_SAMPLE: &str = "import torch\nimport torch_npu\nfrom runtime_patches import build_vla_patcher\n\nbuild_vla_patcher().apply()\n\n\ndef main():\n    model = torch.nn.Linear(4, 1).to(\"npu\")\n    opt = torch.optim.SGD(model.parameters(), lr=0.01)\n    data = torch.utils.data.TensorDataset(torch.randn(48, 4))\n    for (x,) in torch.utils.data.DataLoader(data, batch_size=6):\n        out = model(x.to(\"npu\")).squeeze(1)\n        worst = 0.0\n        for i in range(out.shape[0]):\n            worst = max(worst, out[i].item())\n        loss = out.square().mean()\n        opt.zero_grad()\n        loss.backward()\n        opt.step()\n\n\nif __name__ == \"__main__\":\n    main()\n";

#[test]
fn record_issues_merges_the_measurements_and_progress_fixed_measures_again() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("toy");
    common::set_up_migrate(&root);
    std::fs::write(root.join("train.py"), PER_SAMPLE).unwrap();
    let issues = dir.path().join("issues.json");
    let issues_arg = issues.to_str().unwrap();
    // The workflow's first step: the scan writes issues.json.
    let scanner = assert_cmd::cargo::cargo_bin("npu-verify").with_file_name("npu-scan");
    assert!(
        scanner.is_file(),
        "build npu-scan first (`cargo build -p scan`)"
    );
    std::process::Command::new(&scanner)
        .arg(&root)
        .args(["--output", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(issues.is_file());
    let args = [
        "--pipeline",
        "--emulate-npu",
        "--timeout",
        "300",
        "--steps",
        "3",
        "--record-issues",
        "--issues",
        issues_arg,
    ];
    let (code, report, stderr) = verify_json(&root, &args, &[]);
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");
    assert!(stderr.contains("measured issue(s)"), "{stderr}");
    let file = issue_model::load(&issues).unwrap();
    let vec: Vec<&issue_model::Issue> = file
        .issues
        .iter()
        .filter(|i| i.pattern == "P_VEC")
        .collect();
    assert_eq!(vec.len(), 1, "{:#?}", file.issues);
    let issue = vec[0];
    assert_eq!(
        (issue.file.as_str(), issue.line),
        ("train.py", 16),
        "{issue:#?}"
    );
    assert!(
        issue
            .message
            .starts_with("measured: 6 runs per step at train.py:16"),
        "{issue:#?}"
    );
    let measured = issue.measured.as_ref().unwrap();
    assert_eq!(measured.check, "pipeline.per_sample");
    assert!(
        measured.verify_args.contains(&"--emulate-npu".to_owned()),
        "{measured:#?}"
    );
    assert!(issue.performance);
    let id = issue.id.clone();

    // Measured again: the same id, still pending; a rescan leaves it alone.
    let (_, _, stderr) = verify_json(&root, &args, &[]);
    assert!(stderr.contains("0 new"), "{stderr}");
    let again = issue_model::load(&issues).unwrap();
    assert!(
        again
            .issues
            .iter()
            .any(|i| i.id == id && i.status == issue_model::Status::Pending)
    );

    // `npu-progress --fixed` runs the profile again and refuses while the loop is there.
    let progress = assert_cmd::cargo::cargo_bin("npu-verify").with_file_name("npu-progress");
    assert!(
        progress.is_file(),
        "build npu-progress first (`cargo build -p progress`)"
    );
    let refused = std::process::Command::new(&progress)
        .args([issues_arg, "--fixed", &id])
        .env("NPU_PATCHER_PYTHON", python())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&refused.stdout).into_owned()
        + &String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{text}");
    assert!(text.contains("npu-verify still measures it"), "{text}");

    // Vectorised: the re-measurement no longer shows it, so --fixed marks it fixed.
    let fixed = PER_SAMPLE.replace(
        "        for i in range(out.shape[0]):\n            worst = max(worst, out[i].item())\n",
        "        worst = out.detach().max()\n",
    );
    std::fs::write(root.join("train.py"), fixed).unwrap();
    let done = std::process::Command::new(&progress)
        .args([issues_arg, "--fixed", &id])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&done.stdout).into_owned() + &String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(0), "{text}");
    let after = issue_model::load(&issues).unwrap();
    assert!(
        after
            .issues
            .iter()
            .any(|i| i.id == id && i.status == issue_model::Status::Fixed),
        "{text}"
    );
}
