//! `--shapes-only` and `--hbm-gb` on the real path: the test venv's CPU torch and `--emulate-npu`.
//! A shapes-only run reports the same device, fallback, float64 and sync findings as the full run of
//! the same program, and both report the peak device memory of the step against the card.
//!
//! Needs `NPU_PATCHER_PYTHON` (set by `cargo xtask test`; `cargo xtask venv` prints the path).

mod common;

use common::{check, demo, python, set_up_migrate, verify_json};
use std::path::{Path, PathBuf};

/// A training program with one op `torch_npu` runs on the CPU (`lgamma`), a float64 tensor on the
/// device (which the runtime patcher turns into float32) and a host sync per step (`float(loss)`).
const TRAIN: &str = r#"
import torch
import torch_npu  # noqa: F401
from torch import nn

model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 8)).to("npu")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(4):
    x = torch.randn(32, 64).to("npu")
    scale = torch.lgamma(torch.rand(32, 1).to("npu") + 1.0)
    stats = x.double()
    loss = (model(x) * scale).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print("step", step, float(loss))
"#;

fn project(dir: &Path) -> PathBuf {
    let root = dir.join("proj");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("train.py"), TRAIN).unwrap();
    set_up_migrate(&root);
    root
}

fn verify(root: &Path, extra: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let args = [
        &["--emulate-npu", "--pipeline", "--timeout", "300"],
        extra,
        &["--", "python", "train.py"],
    ]
    .concat();
    verify_json(root, &args, &[])
}

#[test]
fn shapes_only_finds_what_the_full_run_finds_and_both_measure_the_same_peak() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path());
    let (_, full, stderr) = verify(&root, &["--hbm-gb", "64"]);
    let (_, shapes, shapes_stderr) = verify(&root, &["--hbm-gb", "64", "--shapes-only"]);
    assert_eq!(check(&full, "pipeline.run")["status"], "pass", "{stderr}");
    assert_eq!(
        check(&shapes, "pipeline.run")["status"],
        "pass",
        "{shapes_stderr}"
    );
    for name in [
        "pipeline.params_device",
        "pipeline.float64",
        "pipeline.cpu_fallback",
        "pipeline.syncs",
        "pipeline.per_sample",
        "pipeline.patches",
    ] {
        let (a, b) = (check(&full, name), check(&shapes, name));
        assert_eq!(a["status"], b["status"], "{name}: {a:#} / {b:#}");
        assert_eq!(a["detail"], b["detail"], "{name}");
    }
    // The harness applied the runtime patcher: its float64 patch fired at the `.double()` line.
    assert!(
        check(&full, "pipeline.patches")["detail"]
            .as_str()
            .unwrap()
            .contains("Float64To32 2x, first at"),
        "{:#}",
        check(&full, "pipeline.patches")
    );
    assert_ne!(check(&full, "pipeline.cpu_fallback")["status"], "pass");

    let (a, b) = (
        check(&full, "pipeline.memory"),
        check(&shapes, "pipeline.memory"),
    );
    assert_eq!(a["status"], "pass", "{a:#}");
    assert!(a["detail"].as_str().unwrap().starts_with("fits: "), "{a:#}");
    assert_eq!(a["data"]["fits"], true);
    assert_eq!(a["data"]["hbm_bytes"], 64_u64 << 30);
    assert_eq!(b["data"]["shapes_only"], true);
    let (full_peak, shapes_peak) = (
        a["data"]["peak_bytes"].as_f64().unwrap(),
        b["data"]["peak_bytes"].as_f64().unwrap(),
    );
    assert!(full_peak > 100_000.0, "{a:#}");
    assert!(
        (full_peak - shapes_peak).abs() <= 0.05 * full_peak,
        "{a:#}\n{b:#}"
    );
    for phase in ["forward", "backward", "optimizer"] {
        assert!(a["data"]["by_phase"][phase].as_u64().unwrap() > 0, "{a:#}");
    }
    // Only the shapes-only run lists what it read as a stand-in: `float(loss)` each step.
    let unchecked = check(&shapes, "pipeline.shapes_only");
    assert_eq!(unchecked["status"], "warn", "{unchecked:#}");
    assert!(
        unchecked["detail"]
            .as_str()
            .unwrap()
            .contains("_local_scalar_dense"),
        "{unchecked:#}"
    );
    assert!(
        full["checks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["name"] != "pipeline.shapes_only")
    );
}

#[test]
fn a_step_larger_than_the_card_fails_the_memory_check_and_names_the_sharded_size() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path());
    let (code, report, stderr) = verify(
        &root,
        &[
            "--hbm-gb",
            "0.0001",
            "--shapes-only",
            "--nproc-per-node",
            "4",
        ],
    );
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    let memory = check(&report, "pipeline.memory");
    assert_eq!(memory["status"], "fail", "{memory:#}");
    assert_eq!(memory["data"]["fits"], false);
    let detail = memory["detail"].as_str().unwrap();
    assert!(detail.starts_with("does not fit: "), "{memory:#}");
    assert!(detail.contains("FSDP over 4 cards"), "{memory:#}");
    assert_eq!(memory["data"]["sharding"]["nproc"], 4);
    // Shapes-only runs one process, whatever the card count.
    assert!(
        !check(&report, "entry")["detail"]
            .as_str()
            .unwrap()
            .contains("under torchrun"),
        "{report:#}"
    );
}

#[test]
fn shapes_only_needs_the_emulated_device() {
    let dir = tempfile::tempdir().unwrap();
    let out = assert_cmd::Command::cargo_bin("npu-verify")
        .unwrap()
        .arg(dir.path())
        .args(["--pipeline", "--shapes-only", "--python"])
        .arg(python())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--emulate-npu"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The fixed demo with the original `tiny_vla/losses.py` put back (as in `demo_emulated.rs`): a
/// per-sample loss loop that reads a length from the device per sample, and a host round trip.
fn demo_with_the_original_loss(dir: &Path) -> PathBuf {
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
fn the_demo_shapes_only_reports_the_syncs_and_per_sample_loops_of_its_full_run() {
    let dir = tempfile::tempdir().unwrap();
    let root = demo_with_the_original_loss(dir.path());
    let args = [
        "--emulate-npu",
        "--pipeline",
        "--timeout",
        "300",
        "--config",
        "configs/train.yaml",
    ];
    let (full_code, full, _) = verify_json(&root, &args, &[]);
    let shapes_args = [&args[..], &["--shapes-only"]].concat();
    let (shapes_code, shapes, stderr) = verify_json(&root, &shapes_args, &[]);
    assert_eq!(full_code, shapes_code, "{stderr}");
    for name in [
        "pipeline.run",
        "pipeline.params_device",
        "pipeline.float64",
        "pipeline.cpu_fallback",
        "pipeline.syncs",
    ] {
        let (a, b) = (check(&full, name), check(&shapes, name));
        assert_eq!(a["status"], b["status"], "{name}: {a:#} / {b:#}");
        if name != "pipeline.run" {
            assert_eq!(a["detail"], b["detail"], "{name}");
        }
    }
    assert_eq!(check(&full, "pipeline.syncs")["status"], "warn");
    // The per-sample loop is found at the same lines; its launch counts follow the slice lengths,
    // which shapes-only reads as a stand-in.
    let (a, b) = (
        check(&full, "pipeline.per_sample"),
        check(&shapes, "pipeline.per_sample"),
    );
    assert_eq!(a["status"], "warn", "{a:#}");
    assert_eq!(b["status"], "warn", "{b:#}");
    for line in [
        "tiny_vla/losses.py:31 ran 32 times per step",
        "tiny_vla/losses.py:32 ran 32 times per step",
    ] {
        assert!(a["detail"].as_str().unwrap().contains(line), "{a:#}");
        assert!(b["detail"].as_str().unwrap().contains(line), "{b:#}");
    }
}
