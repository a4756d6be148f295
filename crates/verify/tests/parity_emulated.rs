//! `--parity` on the real path: the test venv's CPU torch as the reference and `--emulate-npu` for
//! the port. `tests/parity/train.py` is a small diffusion policy with dropout and random
//! augmentation; `PARITY_INJECT` switches on one npu-only change that a port can get wrong, which
//! must be found at its module and step; without one the runs must match.
//!
//! Needs `NPU_PATCHER_PYTHON` (set by `cargo xtask test`; `cargo xtask venv` prints the path).

mod common;

use common::{check, parity, set_up_migrate, verify_json};
use std::path::{Path, PathBuf};

fn project(dir: &Path) -> PathBuf {
    let root = dir.join("policy");
    std::fs::create_dir_all(&root).unwrap();
    let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/parity/train.py");
    std::fs::copy(program, root.join("train.py")).unwrap();
    set_up_migrate(&root);
    root
}

/// The first divergence's module, direction and step.
fn located(report: &serde_json::Value) -> (String, String, u64) {
    let first = &check(report, "parity.modules")["data"]["first_divergence"];
    (
        first["module"].as_str().unwrap_or("").to_owned(),
        first["direction"].as_str().unwrap_or("").to_owned(),
        first["step"].as_u64().unwrap_or(0),
    )
}

#[test]
fn a_port_with_dropout_augmentation_and_loader_workers_matches_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path());
    let (code, report, stderr) = parity(&root, &[], &[("PARITY_WORKERS", "2")]);
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");
    assert_eq!(check(&report, "parity.loss")["status"], "pass");
    let modules = check(&report, "parity.modules");
    assert_eq!(modules["status"], "pass", "{modules:#}");
    // Three steps of forward and backward calls were compared, on the reference's batches.
    assert!(
        modules["data"]["events_compared"].as_u64().unwrap() > 90,
        "{modules:#}"
    );
    assert_eq!(modules["data"]["batches_replayed"], 3, "{modules:#}");
    assert_eq!(modules["data"]["noise_floor"], true);
    // The written report carries the same result.
    let written: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root.join("migrate_to_cloudrobo/verify-report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(check(&written, "parity.modules")["status"], "pass");
}

#[test]
fn a_float32_noise_schedule_on_the_npu_is_found_at_the_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path());
    let (code, report, stderr) = parity(&root, &[], &[("PARITY_INJECT", "schedule")]);
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    assert_eq!(
        located(&report),
        ("Policy.schedule".into(), "forward".into(), 1),
        "{report:#}"
    );
    let detail = check(&report, "parity.modules")["detail"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        detail.contains("NoiseSchedule") && detail.contains("buffer sigma"),
        "{detail}"
    );
}

#[test]
fn a_module_run_in_half_precision_on_the_npu_is_found_at_that_module() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path());
    let (code, report, stderr) = parity(&root, &[], &[("PARITY_INJECT", "half")]);
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    assert_eq!(
        located(&report),
        ("Policy.head".into(), "forward".into(), 1),
        "{report:#}"
    );
    let detail = check(&report, "parity.modules")["detail"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(detail.contains("float16"), "{detail}");
    // Its float16 Adam state overflows: the later losses are not finite, and the loss check says so.
    assert_eq!(check(&report, "parity.loss")["status"], "fail");
}

#[test]
fn npu_fusion_attention_with_sdpa_mask_polarity_is_found_at_the_attention() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path());
    let (code, report, stderr) = parity(&root, &[], &[("PARITY_INJECT", "mask")]);
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    assert_eq!(
        located(&report),
        ("Policy.attn".into(), "forward".into(), 1),
        "{report:#}"
    );
}

#[test]
fn a_record_made_once_is_compared_with_a_later_run() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path());
    let file = dir.path().join("before.json");
    let file_arg = file.to_str().unwrap();
    let (code, report, stderr) = parity(&root, &["--record", file_arg], &[]);
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");
    assert_eq!(check(&report, "parity.record")["status"], "pass");
    let record: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(record["format"], "npu-verify-parity");
    assert_eq!(record["steps"].as_array().unwrap().len(), 3);
    assert!(dir.path().join("before.json.batches.pt").is_file());

    // The same program again matches the record; the wrong mask polarity does not.
    let (code, report, stderr) = parity(&root, &["--compare", file_arg], &[]);
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");
    let (code, report, stderr) = parity(
        &root,
        &["--compare", file_arg],
        &[("PARITY_INJECT", "mask")],
    );
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    assert_eq!(located(&report).0, "Policy.attn", "{report:#}");
}

#[test]
fn the_demos_port_trains_as_on_the_cpu() {
    // Its port trains under bf16 autocast on the npu (the CPU run has none) and calls
    // npu_fusion_attention where the CPU runs SDPA: within the autocast dtype's tolerance.
    let dir = tempfile::tempdir().unwrap();
    let root = common::demo(dir.path(), "tiny-vla-fixed");
    let args = [&common::PARITY[..], &["--config", "configs/train.yaml"]].concat();
    let (code, report, stderr) = verify_json(&root, &args, &[]);
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");
    assert_eq!(check(&report, "parity.modules")["status"], "pass");
    assert!(
        check(&report, "parity.modules")["data"]["events_compared"]
            .as_u64()
            .unwrap()
            > 300
    );
}

#[test]
fn a_program_that_cannot_run_on_the_cpu_cannot_be_aligned() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("npu-only");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(
        root.join("train.py"),
        "import torch\nimport torch_npu  # noqa: F401\nmodel = torch.nn.Linear(2, 1).to('npu')\n",
    )
    .unwrap();
    set_up_migrate(&root);
    let (code, report, stderr) = parity(&root, &[], &[]);
    assert_eq!(code, Some(2), "{report:#}\n{stderr}");
    let reference = check(&report, "parity.reference");
    assert_eq!(reference["status"], "fail", "{reference:#}");
    assert!(
        reference["remedy"].as_str().unwrap().contains("--compare"),
        "{reference:#}"
    );
    assert!(report["incomplete"].as_bool().unwrap());
}
