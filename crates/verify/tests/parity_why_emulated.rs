//! `--parity` says why a port diverges: the port re-run with a runtime patch switched off, or with
//! one of the port's own diff hunks reverted in a copy of the project, and the one that brings it
//! back named (`parity.why`); when none does, an msprobe configuration scoped to the module.
//!
//! Needs `NPU_PATCHER_PYTHON` (set by `cargo xtask test`; `cargo xtask venv` prints the path).

mod common;

use common::{check, git, parity, set_up_migrate};
use std::path::{Path, PathBuf};

fn project(dir: &Path) -> PathBuf {
    let root = dir.join("policy");
    std::fs::create_dir_all(&root).unwrap();
    let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/parity/train.py");
    std::fs::copy(program, root.join("train.py")).unwrap();
    set_up_migrate(&root);
    root
}

/// The 1-based line of `train.py` that contains `needle`.
fn line_of(root: &Path, needle: &str) -> usize {
    std::fs::read_to_string(root.join("train.py"))
        .unwrap()
        .lines()
        .position(|l| l.contains(needle))
        .unwrap()
        + 1
}

#[test]
fn a_float64_schedule_made_float32_by_a_runtime_patch_is_put_on_that_patch() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path());
    let (code, report, stderr) = parity(&root, &[], &[("PARITY_INJECT", "torch64")]);
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    let modules = check(&report, "parity.modules");
    assert_eq!(
        modules["data"]["first_divergence"]["module"], "Policy.schedule",
        "{modules:#}"
    );
    let why = check(&report, "parity.why");
    assert_eq!(why["status"], "fail", "{why:#}");
    let cause = &why["data"]["cause"];
    assert_eq!(cause["kind"], "patch", "{why:#}");
    assert_eq!(cause["patch"], "Float64To32", "{why:#}");
    // Named at the line of the schedule that asks for float64.
    let at = format!(
        "train.py:{}",
        line_of(
            &root,
            "torch.linspace(1e-4, 0.02, steps, dtype=torch.float64)"
        )
    );
    assert_eq!(cause["at"], at.as_str(), "{why:#}");
    let detail = why["detail"].as_str().unwrap();
    assert!(
        detail.starts_with(&format!("Float64To32 at {at} changes Policy.schedule")),
        "{detail}"
    );
    assert!(
        why["remedy"]
            .as_str()
            .unwrap()
            .contains("keep float64 on the CPU"),
        "{why:#}"
    );
    assert_eq!(why["data"]["tried"][0]["effect"], "restores", "{why:#}");
    // The written report carries the explanation.
    let written: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root.join("migrate_to_cloudrobo/verify-report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        check(&written, "parity.why")["data"]["cause"]["patch"],
        "Float64To32"
    );
}

#[test]
fn a_hand_edit_in_the_ports_diff_is_put_on_that_hunk_and_the_users_tree_is_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path());
    git(&root, &["init", "-q"]);
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-qm", "the port starts"]);
    // Two edits after the port's base: a harmless one far from the attention, and the mask
    // polarity of the npu branch flipped.
    let text = std::fs::read_to_string(root.join("train.py")).unwrap();
    let edited = text
        .replace(
            "        return 256\n",
            "        return 256  # episodes in the synthetic set\n",
        )
        .replace(
            "            mask = keep if INJECT == \"mask\" else ~keep  # npu_fusion_attention: True = masked out\n",
            "            mask = keep  # the keep mask, as SDPA takes it\n",
        );
    assert_ne!(edited, text);
    std::fs::write(root.join("train.py"), &edited).unwrap();
    let (code, report, stderr) = parity(&root, &[], &[]);
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    assert_eq!(
        check(&report, "parity.modules")["data"]["first_divergence"]["module"],
        "Policy.attn"
    );
    let why = check(&report, "parity.why");
    assert_eq!(why["status"], "fail", "{why:#}");
    let cause = &why["data"]["cause"];
    assert_eq!(cause["kind"], "hunk", "{why:#}");
    let at = format!(
        "train.py:{}",
        line_of(&root, "mask = keep  # the keep mask")
    );
    assert_eq!(cause["at"], at.as_str(), "{why:#}");
    assert!(
        why["detail"]
            .as_str()
            .unwrap()
            .starts_with(&format!("your change at {at}")),
        "{why:#}"
    );
    assert!(why["remedy"].as_str().unwrap().contains("~keep"), "{why:#}");
    // The re-run reverted the hunk in a copy: the project still has the user's edit.
    assert_eq!(
        std::fs::read_to_string(root.join("train.py")).unwrap(),
        edited
    );
}

#[test]
fn with_no_re_runs_the_budget_is_named_and_an_msprobe_config_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path());
    let (code, report, stderr) =
        parity(&root, &["--why-runs", "0"], &[("PARITY_INJECT", "torch64")]);
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    let why = check(&report, "parity.why");
    assert_eq!(why["status"], "warn", "{why:#}");
    assert_eq!(why["data"]["stopped_by_budget"], true, "{why:#}");
    assert!(
        why["detail"]
            .as_str()
            .unwrap()
            .contains("--why-runs 0 stopped it"),
        "{why:#}"
    );
    assert!(why["data"]["tried"].as_array().unwrap().is_empty());
    let msprobe = check(&report, "parity.msprobe");
    let config: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root.join("migrate_to_cloudrobo/msprobe/config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        config["statistics"]["scope"][0], "Module.schedule.NoiseSchedule.forward.0",
        "{config:#}"
    );
    assert_eq!(config["step"], serde_json::json!([0]));
    assert!(
        root.join("migrate_to_cloudrobo/msprobe/config.bench.json")
            .is_file()
    );
    assert!(
        msprobe["detail"]
            .as_str()
            .unwrap()
            .contains("PrecisionDebugger"),
        "{msprobe:#}"
    );
}
