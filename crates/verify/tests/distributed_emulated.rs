//! `--pipeline --nproc-per-node 2 --emulate-npu`: the entry runs under torchrun with one harness
//! per rank, each on its own emulated card, hccl running as gloo underneath.
//!
//! Needs `NPU_PATCHER_PYTHON` (set by `cargo xtask test`; `cargo xtask venv` prints the path).

mod common;

use common::{check, demo, verify_json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn verify(root: &Path, args: &[&str]) -> (Option<i32>, serde_json::Value, String, Duration) {
    let started = Instant::now();
    let args = [&["--emulate-npu"], args].concat();
    let (code, report, stderr) = verify_json(root, &args, &[]);
    (code, report, stderr, started.elapsed())
}

/// A one-file project: `train.py` trains a small model with DDP on `hccl`; `body` runs before the loop.
fn project(dir: &Path, name: &str, body: &str, step: &str) -> PathBuf {
    let root = dir.join(name);
    std::fs::create_dir_all(&root).unwrap();
    let head = [
        "import os",
        "import time",
        "",
        "import torch",
        "import torch.distributed as dist",
        "",
        "",
        "def main():",
        "    local_rank = int(os.environ[\"LOCAL_RANK\"])",
        "    dist.init_process_group(\"hccl\")",
    ];
    let model = [
        "    model = torch.nn.Linear(4, 2).to(\"npu\")",
        "    model = torch.nn.parallel.DistributedDataParallel(model)",
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
        "    for step in range(5):",
    ];
    let tail = [
        "        x = torch.randn(8, 4).to(\"npu\")",
        "        loss = model(x).pow(2).mean()",
        "        loss.backward()",
        "        optimizer.step()",
        "        optimizer.zero_grad()",
        "",
        "",
        "if __name__ == \"__main__\":",
        "    main()",
        "",
    ];
    let source = format!(
        "{}\n{body}{}\n{step}{}",
        head.join("\n"),
        model.join("\n"),
        tail.join("\n")
    );
    std::fs::write(root.join("train.py"), source).unwrap();
    root
}

#[test]
fn fixed_demo_runs_two_ranks_on_their_own_cards() {
    let dir = tempfile::tempdir().unwrap();
    let root = demo(dir.path(), "tiny-vla-fixed");
    let (code, report, stderr, _) = verify(
        &root,
        &["--pipeline", "--nproc-per-node", "2", "--timeout", "300"],
    );
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");
    let ranks = check(&report, "pipeline.ranks");
    assert_eq!(ranks["status"], "pass", "{ranks:#}");
    let data = &ranks["data"];
    assert_eq!(data["world_size"], 2);
    assert_eq!(data["backends"], serde_json::json!(["hccl"]));
    assert_eq!(data["params_equal"], true);
    assert_eq!(data["devices_distinct"], true);
    let rows = data["ranks"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["rank"], i);
        assert_eq!(row["backend"], "hccl");
        assert_eq!(
            row["params_devices"],
            serde_json::json!([format!("npu:{i}")])
        );
        assert_eq!(
            row["batch_devices"],
            serde_json::json!([format!("npu:{i}")])
        );
        assert_eq!(row["steps"], 2);
    }
    assert_eq!(check(&report, "pipeline.run")["status"], "pass");
}

#[test]
fn unfixed_demo_names_the_nccl_backend_and_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let root = demo(dir.path(), "tiny-vla");
    let (code, report, stderr, _) = verify(
        &root,
        &[
            "--pipeline",
            "--nproc-per-node",
            "2",
            "--config",
            "configs/train.yaml",
            "--timeout",
            "300",
        ],
    );
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    let run = check(&report, "pipeline.run");
    let detail = run["detail"].as_str().unwrap();
    assert!(detail.contains("tiny_vla/dist_utils.py:29"), "{run:#}");
    assert!(detail.contains("NCCL"), "{run:#}");
    let ranks = check(&report, "pipeline.ranks");
    assert_eq!(ranks["status"], "fail");
    assert!(
        ranks["detail"].as_str().unwrap().starts_with(
            "ranks 0, 1 asked init_process_group for \"nccl\" at tiny_vla/dist_utils.py:29"
        ),
        "{ranks:#}"
    );
}

#[test]
fn ranks_that_share_one_card_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    // No torch.npu.set_device(local_rank): every rank builds its model on npu:0.
    let root = project(dir.path(), "one-card", "", "");
    let (code, report, stderr, _) = verify(
        &root,
        &[
            "--pipeline",
            "--entry",
            "train.py",
            "--nproc-per-node",
            "2",
            "--timeout",
            "120",
        ],
    );
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    let ranks = check(&report, "pipeline.ranks");
    assert_eq!(ranks["status"], "fail", "{ranks:#}");
    let detail = ranks["detail"].as_str().unwrap();
    assert!(
        detail.contains("ranks 0, 1 all keep their parameters on npu:0"),
        "{ranks:#}"
    );
    assert!(
        ranks["remedy"]
            .as_str()
            .unwrap()
            .contains("set_device(local_rank)")
    );
}

#[test]
fn a_rank_that_skips_a_collective_ends_within_the_timeout_with_a_report() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(
        dir.path(),
        "hang",
        "    torch.npu.set_device(local_rank)\n",
        "        if local_rank == 1 and step == 1:\n            print(\"rank 1 waits elsewhere\", flush=True)\n            time.sleep(600)\n",
    );
    let (code, report, stderr, took) = verify(
        &root,
        &[
            "--pipeline",
            "--entry",
            "train.py",
            "--nproc-per-node",
            "2",
            "--steps",
            "3",
            "--timeout",
            "60",
        ],
    );
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    assert!(took < Duration::from_secs(100), "took {took:?}");
    // Rank 0 waited in the gradient all-reduce until the collective timeout.
    let run = check(&report, "pipeline.run");
    assert_eq!(run["status"], "fail", "{run:#}");
    assert_eq!(run["data"]["reason"], "collective-timeout", "{run:#}");
    let ranks = check(&report, "pipeline.ranks");
    assert_eq!(ranks["status"], "fail", "{ranks:#}");
    assert!(
        ranks["detail"]
            .as_str()
            .unwrap()
            .contains("rank 1 did not finish (last output: rank 1 waits elsewhere)"),
        "{ranks:#}"
    );
    assert_eq!(check(&report, "pipeline.harness")["status"], "fail");
}

#[test]
fn a_half_port_puts_every_rank_on_card_0_and_rank_1_meets_npu_1() {
    let dir = tempfile::tempdir().unwrap();
    let root = demo(dir.path(), "tiny-vla");
    // transfer_to_npu at the entry, the rest untouched: `dist.get_backend() == "nccl"` is now False, so no
    // rank calls set_device; `.cuda()` puts every model on npu:0 while rank 1's batches go to npu:1.
    let train = root.join("train.py");
    let source = std::fs::read_to_string(&train).unwrap().replacen(
        "import argparse\n",
        "import argparse\n\nimport torch_npu  # noqa: F401\nfrom torch_npu.contrib import transfer_to_npu  # noqa: F401\n",
        1,
    );
    std::fs::write(&train, source).unwrap();
    let (code, report, stderr, _) = verify(
        &root,
        &["--pipeline", "--nproc-per-node", "2", "--timeout", "300"],
    );
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    let rank1 = check(&report, "pipeline.rank1.run");
    let detail = rank1["detail"].as_str().unwrap();
    assert!(
        detail.contains("found at least two devices, npu:1 and npu:0"),
        "{rank1:#}"
    );
    assert!(detail.contains("tiny_vla/vision.py"), "{rank1:#}");
    assert_eq!(rank1["data"]["reason"], "device-mismatch", "{rank1:#}");
}
