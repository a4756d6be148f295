//! Programs that stop before they train, as real training scripts do: one that catches every
//! exception and exits 0, one that returns early, one that asks for input, and one whose pipeline
//! run creates the folder its data run then finds. verify must say why the program stopped, quote
//! its last output, keep its log under `migrate_to_cloudrobo/logs/`, and run `--pipeline --data`
//! without one run changing the other.
//!
//! Needs `NPU_PATCHER_PYTHON` (set by `cargo xtask test`; `cargo xtask venv` prints the path).

mod common;

use common::{check, verify_json};
use std::path::{Path, PathBuf};

/// A project whose `train.py` is `text`.
fn project(dir: &Path, text: &str) -> PathBuf {
    let root = dir.join("toy");
    common::set_up_migrate(&root);
    std::fs::write(root.join("train.py"), text).unwrap();
    root
}

/// A training loop on the npu that first asks before it overwrites `out/`, and catches every
/// exception with a message and exit status 0, as many project scripts do.
const ASKS_AND_CATCHES: &str = r#"import os
import sys
import torch
from runtime_patches import build_vla_patcher

build_vla_patcher().apply()


def main():
    print("starting the run")
    if os.path.exists("out"):
        answer = input("overwrite? (y/n) ")
        if answer != "y":
            sys.exit(1)
    os.makedirs("out", exist_ok=True)
    model = torch.nn.Linear(4, 2).to("npu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 2))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    for x, y in loader:
        loss = (model(x.to("npu")) - y.to("npu")).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    try:
        main()
    except Exception as e:
        print("run failed with error", e)
        sys.exit(0)
"#;

fn run(root: &Path, modes: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let mut args = modes.to_vec();
    args.extend(["--emulate-npu", "--timeout", "300", "--no-profile"]);
    verify_json(root, &args, &[])
}

#[test]
fn a_program_that_catches_its_error_and_exits_0_is_reported_with_its_last_output_and_log() {
    let dir = tempfile::tempdir().unwrap();
    let text = ASKS_AND_CATCHES.replace(
        "    model = torch.nn.Linear(4, 2)",
        "    raise RuntimeError(\"the config names no dataset\")\n    model = torch.nn.Linear(4, 2)",
    );
    let root = project(dir.path(), &text);
    let (code, report, _) = run(&root, &["--pipeline"]);
    assert_eq!(code, Some(1), "{report:#}");
    let run = check(&report, "pipeline.run");
    assert_eq!(run["status"], "fail", "{run:#}");
    let detail = run["detail"].as_str().unwrap();
    assert!(
        detail.contains("before its first optimizer step")
            && detail.contains("exited with status 0 (success)"),
        "{detail}"
    );
    assert!(
        detail.contains(
            "its last output:\nstarting the run\nrun failed with error the config names no dataset"
        ),
        "{detail}"
    );
    assert!(!detail.contains("asked for input"), "{detail}");
    // Each harness result carries the configuration it ran in.
    let label = run["configuration"]["label"].as_str().unwrap();
    assert!(
        label.starts_with("1 process, emulated npu, torch "),
        "{label}"
    );
    assert_eq!(run["configuration"]["processes"], 1);
    let tail = run["data"]["output_tail"].as_str().unwrap();
    assert!(
        tail.ends_with("run failed with error the config names no dataset"),
        "{tail}"
    );

    // The whole output is kept in the project, named in the check and in the run's record.
    let log = run["data"]["log"].as_str().unwrap();
    assert!(
        log.starts_with("migrate_to_cloudrobo/logs/verify_") && log.ends_with("_pipeline.log"),
        "{log}"
    );
    assert_eq!(report["harness_runs"][0]["log"], log);
    let kept = std::fs::read_to_string(root.join(log)).unwrap();
    assert!(
        kept.starts_with("# npu-verify pipeline run: python train.py"),
        "{kept}"
    );
    assert!(
        kept.contains("run failed with error the config names no dataset"),
        "{kept}"
    );
}

#[test]
fn a_program_that_returns_before_training_says_so_in_plain_words() {
    let dir = tempfile::tempdir().unwrap();
    let text = ASKS_AND_CATCHES.replace(
        "    os.makedirs(\"out\", exist_ok=True)\n",
        "    os.makedirs(\"out\", exist_ok=True)\n    print(\"nothing to train on\")\n    return\n",
    );
    let root = project(dir.path(), &text);
    let (_, report, _) = run(&root, &["--pipeline"]);
    let detail = check(&report, "pipeline.run")["detail"].as_str().unwrap();
    assert!(
        detail.starts_with(
            "the program returned normally before its first optimizer step (the harness stops it after 2); \
             its last output:\nstarting the run\nnothing to train on"
        ),
        "{detail}"
    );
}

#[test]
fn a_read_from_stdin_is_reported_with_its_prompt_and_place() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path(), ASKS_AND_CATCHES);
    std::fs::create_dir(root.join("out")).unwrap();
    let (code, report, _) = run(&root, &["--pipeline"]);
    assert_eq!(code, Some(1), "{report:#}");
    let run = check(&report, "pipeline.run");
    let detail = run["detail"].as_str().unwrap();
    assert!(
        detail.starts_with(
            "the program asked for input: 'overwrite? (y/n)' at train.py:12 in main; verify runs it with no \
             input (stdin closed), so the read got end-of-file"
        ),
        "{detail}"
    );
    assert!(
        run["remedy"]
            .as_str()
            .unwrap()
            .starts_with("make the run need no answer"),
        "{run:#}"
    );
    assert_eq!(run["data"]["input"]["prompt"], "overwrite? (y/n)");
    assert_eq!(run["data"]["input"]["site"], "train.py:12 in main");
}

#[test]
fn pipeline_and_data_in_one_call_each_find_the_project_as_it_was() {
    // The pipeline run creates out/; the data run of the same call must not find it (it would
    // stop at the overwrite prompt), and what the pipeline run made is kept, not deleted.
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path(), ASKS_AND_CATCHES);
    let (code, report, stderr) = run(&root, &["--pipeline", "--data"]);
    assert_eq!(
        check(&report, "pipeline.run")["status"],
        "pass",
        "{report:#}"
    );
    let data = check(&report, "data.run");
    assert_eq!(data["status"], "pass", "{data:#}\n{stderr}");
    assert_eq!(code, Some(0), "{report:#}");
    let moved = report["harness_runs"][0]["set_aside"].as_array().unwrap();
    assert_eq!(moved.len(), 1, "{report:#}");
    let moved = moved[0].as_str().unwrap();
    assert!(
        moved.starts_with("migrate_to_cloudrobo/logs/verify_")
            && moved.ends_with("_pipeline_outputs/out"),
        "{moved}"
    );
    assert!(root.join(moved).is_dir());
    assert!(
        stderr.contains("moved to migrate_to_cloudrobo/logs/"),
        "{stderr}"
    );
}

/// A training step in a method that logs four scalars (one `.item()` each) and the norm of every
/// parameter's gradient (one `.item()` per parameter).
const LOGS_SCALARS: &str = r#"import torch
from runtime_patches import build_vla_patcher

build_vla_patcher().apply()


class Trainer:
    def __init__(self):
        self.model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)).to("npu")
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)

    def step(self, x, y):
        out = self.model(x)
        loss = (out - y).square().mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        logged = {"loss": loss.item()}
        logged["out_mean"] = out.mean().item()
        logged["out_max"] = out.max().item()
        logged["y_mean"] = y.mean().item()
        norms = [p.grad.norm().item() for p in self.model.parameters()]
        return logged, norms


def main():
    trainer = Trainer()
    data = torch.utils.data.TensorDataset(torch.randn(48, 4), torch.randn(48, 2))
    for x, y in torch.utils.data.DataLoader(data, batch_size=6):
        trainer.step(x.to("npu"), y.to("npu"))


if __name__ == "__main__":
    main()
"#;

#[test]
fn logged_scalars_are_allowed_and_a_per_parameter_sync_is_recorded_in_its_method() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path(), LOGS_SCALARS);
    let issues = root.join("issues.json");
    let args = [
        "--pipeline",
        "--emulate-npu",
        "--timeout",
        "300",
        "--steps",
        "3",
        "--record-issues",
        "--issues",
        issues.to_str().unwrap(),
    ];
    let (code, report, stderr) = verify_json(&root, &args, &[]);
    // The only failure: no scan wrote issues.json before this first measurement.
    let failed: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        (code, failed),
        (Some(1), vec!["static.issues"]),
        "{report:#}\n{stderr}"
    );
    let syncs = check(&report, "pipeline.syncs");
    assert_eq!(
        syncs["data"]["scalar_logging"]["sites"],
        serde_json::json!(["train.py:18", "train.py:19", "train.py:20", "train.py:21"]),
        "{syncs:#}"
    );
    let file = issue_model::load(&issues).unwrap();
    // Written beside the project's code: the root is ".", found from any directory.
    assert_eq!(file.root, ".");
    let found: Vec<(&str, u32, Option<&str>)> = file
        .issues
        .iter()
        .map(|i| (i.pattern.as_str(), i.line, i.symbol.as_deref()))
        .collect();
    assert_eq!(
        found,
        [("P_TGT", 22, Some("Trainer.step"))],
        "{:#?}",
        file.issues
    );
    assert!(
        file.issues[0]
            .message
            .starts_with("measured: 4 host syncs per step at train.py:22"),
        "{:#?}",
        file.issues[0]
    );

    // The finding is wrong for this project: with the comment, the next measurement records it
    // as skipped, with the comment's reason; never as fixed.
    let text = LOGS_SCALARS.replace(
        "for p in self.model.parameters()]",
        "for p in self.model.parameters()]  # npu: ignore[P_TGT] four parameters, read once a step",
    );
    std::fs::write(root.join("train.py"), text).unwrap();
    let (_, _, stderr) = verify_json(&root, &args, &[]);
    assert!(
        stderr.contains(
            "0 new, 0 again, 0 regressed, 0 no longer measured: now fixed, 1 skipped by `# npu: ignore` comments"
        ),
        "{stderr}"
    );
    let file = issue_model::load(&issues).unwrap();
    assert_eq!(file.issues.len(), 1, "the same issue: {:#?}", file.issues);
    assert_eq!(
        file.issues[0].status,
        issue_model::Status::Skipped,
        "{:#?}",
        file.issues
    );
    assert_eq!(
        file.issues[0].reason.as_deref(),
        Some(
            "ignored inline: four parameters, read once a step (`# npu: ignore` comment on line 22)"
        ),
        "{:#?}",
        file.issues
    );
}
