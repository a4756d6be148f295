//! `--fixed` re-scans the issue's file with the scanner library: contract tests on an
//! issues.json written by the scanner itself.

mod common;

use common::{Fixture, assert_contains};
use issue_model::Status;
use std::path::Path;

const MODEL: &str = "\
from pytorch_lightning import Trainer


def fit(model):
    trainer = Trainer(gpus=1)
    trainer.fit(model)
    trainer = Trainer(gpus=1)
    trainer.fit(model)
";

/// Scan `proj/` into `issues.json` as `npu-scan proj --output .` does; return the `P_LTM` ids in
/// source order.
fn scan(f: &Fixture) -> Vec<String> {
    let result =
        scan::scan(&f.path("proj"), &scan::Settings::default()).unwrap_or_else(|e| panic!("{e}"));
    scan::write_issues_json(f.dir.path(), "proj", &result).unwrap_or_else(|e| panic!("{e}"));
    let mut ltm: Vec<_> = f
        .load()
        .issues
        .into_iter()
        .filter(|i| i.pattern == "P_LTM" && i.file == "train_lib.py")
        .collect();
    ltm.sort_by_key(|i| i.line);
    ltm.into_iter().map(|i| i.id).collect()
}

#[test]
fn a_fix_the_scanner_still_finds_is_refused_unless_forced() {
    let f = Fixture::empty();
    f.write("proj/train_lib.py", MODEL);
    let ids = scan(&f);
    assert_eq!(
        ids.len(),
        2,
        "the scanner must report both Trainer(gpus=1) calls"
    );

    // Nothing edited yet: refused, the file untouched, the finding shown.
    let before = f.bytes();
    let (code, out, err) = f.run(&["issues.json", "--fixed", &ids[1]]);
    assert_eq!(code, 1, "{out}{err}");
    assert_contains(
        &out,
        &format!("{} is not fixed: the scanner still finds it:", ids[1]),
    );
    assert_contains(&out, "train_lib.py:7:");
    assert_contains(&out, "  > 7 |     trainer = Trainer(gpus=1)");
    assert_contains(
        &out,
        &format!("npu-progress issues.json --fixed {} --force", ids[1]),
    );
    assert_eq!(f.bytes(), before);

    // The first of the two identical calls is fixed: the second one now has the first one's
    // fingerprint, but the first is accepted and the second still refused.
    f.write(
        "proj/train_lib.py",
        &MODEL.replacen(
            "Trainer(gpus=1)",
            "Trainer(accelerator=\"npu\", devices=1)",
            1,
        ),
    );
    let (code, out, err) = f.run(&["issues.json", "--fixed", &ids[0]]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("warning"), "{err}");
    assert_eq!(f.issue(&ids[0]).status, Status::Fixed);
    let (code, _, _) = f.run(&["issues.json", "--fixed", &ids[1]]);
    assert_eq!(code, 1);

    // Forced: recorded as skipped with the reason, never as fixed.
    let (code, out, err) = f.run(&[
        "issues.json",
        "--fixed",
        &ids[1],
        "--force",
        "--reason",
        "the launcher overrides gpus",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_contains(&out, &format!("{}: marked skipped", ids[1]));
    let forced = f.issue(&ids[1]);
    assert_eq!(forced.status, Status::Skipped);
    assert_eq!(
        forced.reason.as_deref(),
        Some("--fixed --force (not re-checked): the launcher overrides gpus")
    );
    assert_eq!(
        forced.history.last().map(|h| h.status),
        Some(issue_model::HistoryStatus::Skipped)
    );

    // A rescan keeps the forced one skipped. (Identical findings are told apart by their
    // order: the line still wrong now has the first one's fingerprint, so it comes back as a
    // regression of the first one, the one marked fixed.)
    scan(&f);
    assert_eq!(f.issue(&ids[1]).status, Status::Skipped);
    let pending: Vec<_> = f
        .load()
        .issues
        .into_iter()
        .filter(|i| i.pattern == "P_LTM" && i.status == Status::Pending)
        .collect();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].id, ids[0]);
    assert_eq!(
        pending[0].history.last().map(|h| h.status),
        Some(issue_model::HistoryStatus::Regressed)
    );
}

#[test]
fn fixed_after_an_ignore_comment_records_a_skip_not_a_fix() {
    let f = Fixture::empty();
    let code =
        "from pytorch_lightning import Trainer\n\ndef main():\n    trainer = Trainer(gpus=1)\n";
    f.write("proj/train_lib.py", code);
    let ids = scan(&f);
    assert_eq!(ids.len(), 1);
    f.write(
        "proj/train_lib.py",
        &code.replace(
            "Trainer(gpus=1)",
            "Trainer(gpus=1)  # npu: ignore[P_LTM] the launcher passes --accelerator npu",
        ),
    );
    let (code, out, err) = f.run(&["issues.json", "--fixed", &ids[0]]);
    assert_eq!(code, 0, "{out}{err}");
    assert_contains(&out, &format!("{}: marked skipped", ids[0]));
    let it = f.issue(&ids[0]);
    assert_eq!(it.status, Status::Skipped);
    assert_eq!(
        it.reason.as_deref(),
        Some(
            "ignored inline: the launcher passes --accelerator npu (`# npu: ignore` comment on line 4)"
        )
    );
    // The rescan agrees.
    scan(&f);
    assert_eq!(f.issue(&ids[0]).status, Status::Skipped);
}

#[test]
fn a_forced_mark_is_skipped_and_survives_rescans() {
    let f = Fixture::empty();
    f.write(
        "proj/train_lib.py",
        "from pytorch_lightning import Trainer\n\ndef main():\n    trainer = Trainer(gpus=1)\n",
    );
    let ids = scan(&f);
    assert_eq!(ids.len(), 1);
    let (code, out, err) = f.run(&["issues.json", "--fixed", &ids[0], "--force"]);
    assert_eq!(code, 0, "{out}{err}");
    let forced = f.issue(&ids[0]);
    assert_eq!(forced.status, Status::Skipped);
    assert_eq!(
        forced.reason.as_deref(),
        Some("--fixed --force (not re-checked): the scanner is wrong here (no --reason given)")
    );
    for _ in 0..2 {
        scan(&f);
        let again = f.issue(&ids[0]);
        assert_eq!(again.status, Status::Skipped, "{again:?}");
        assert_eq!(again.reason, forced.reason);
    }
    let (code, out, _) = f.run(&["issues.json", "--check-complete"]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn a_real_fix_is_accepted_and_a_gone_project_is_accepted_with_a_warning() {
    let f = Fixture::empty();
    f.write("proj/train_lib.py", MODEL);
    let ids = scan(&f);
    f.write(
        "proj/train_lib.py",
        &MODEL.replace("Trainer(gpus=1)", "Trainer(accelerator=\"npu\", devices=1)"),
    );
    let (code, out, err) = f.run(&["--fixed", &ids[0], "--format", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.is_empty(), "{err}");
    let value: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    assert_eq!(value["changed"], true);

    std::fs::remove_dir_all(f.path("proj")).unwrap_or_else(|e| panic!("{e}"));
    assert!(!Path::new(&f.path("proj")).exists());
    let (code, out, err) = f.run(&["--fixed", &ids[1]]);
    assert_eq!(code, 0, "{out}{err}");
    assert_contains(
        &err,
        &format!("warning: cannot re-check {}: the file is gone", ids[1]),
    );
    assert_eq!(f.issue(&ids[1]).status, Status::Fixed);
}

/// `P_ENT` is judged from the whole project (the entry point and what it imports): its
/// re-check scans the project, not the file alone.
#[test]
fn a_project_level_finding_is_rechecked_on_the_whole_project() {
    let f = Fixture::empty();
    f.write(
        "proj/models.py",
        "import torch\n\n\ndef build():\n    return torch.nn.Linear(2, 2).cuda()\n",
    );
    f.write(
        "proj/train.py",
        "import torch\nfrom models import build\n\n\ndef main():\n    build()\n\n\nif __name__ == \"__main__\":\n    main()\n",
    );
    let result =
        scan::scan(&f.path("proj"), &scan::Settings::default()).unwrap_or_else(|e| panic!("{e}"));
    scan::write_issues_json(f.dir.path(), "proj", &result).unwrap_or_else(|e| panic!("{e}"));
    let ent: Vec<_> = f
        .load()
        .issues
        .into_iter()
        .filter(|i| i.pattern == "P_ENT")
        .collect();
    assert_eq!(
        ent.len(),
        1,
        "the scanner must report the entry point: {ent:?}"
    );
    let id = ent[0].id.clone();
    assert_eq!(ent[0].file, "train.py");

    let before = f.bytes();
    let (code, out, err) = f.run(&["issues.json", "--fixed", &id]);
    assert_eq!(code, 1, "{out}{err}");
    assert_contains(
        &out,
        &format!("{id} is not fixed: the scanner still finds it:"),
    );
    assert_eq!(f.bytes(), before);

    f.write(
        "proj/train.py",
        "import torch\nimport torch_npu\nfrom models import build\n\n\ndef main():\n    build()\n\n\nif __name__ == \"__main__\":\n    main()\n",
    );
    let (code, out, err) = f.run(&["issues.json", "--fixed", &id]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("warning"), "{err}");
    assert_eq!(f.issue(&id).status, Status::Fixed);
}

#[test]
fn a_cast_to_float32_rebinding_the_same_name_before_the_upload_is_accepted() {
    let f = Fixture::empty();
    let before = "\
import numpy as np
import torch


def upload(history, device):
    weights = np.exp(-0.1 * np.arange(len(history)))
    weights = weights / weights.sum()
    weights = torch.from_numpy(weights).to(device).unsqueeze(dim=1)
    return weights
";
    f.write("proj/ensemble.py", before);
    let result =
        scan::scan(&f.path("proj"), &scan::Settings::default()).unwrap_or_else(|e| panic!("{e}"));
    scan::write_issues_json(f.dir.path(), "proj", &result).unwrap_or_else(|e| panic!("{e}"));
    let id = f
        .load()
        .issues
        .into_iter()
        .find(|i| i.pattern == "P_F64")
        .map_or_else(|| panic!("the float64 upload is not reported"), |i| i.id);
    let (code, out, _) = f.run(&["issues.json", "--fixed", &id]);
    assert_eq!(code, 1, "unchanged code is refused: {out}");
    f.write(
        "proj/ensemble.py",
        &before.replace(
            "    weights = torch.from_numpy",
            "    weights = weights.astype(np.float32)\n    weights = torch.from_numpy",
        ),
    );
    let (code, out, err) = f.run(&["issues.json", "--fixed", &id]);
    assert_eq!(code, 0, "{out}{err}");
    assert_contains(&out, &format!("{id}: marked fixed"));
}

/// An edit of the finding's line that keeps the finding (here a renamed variable, the float64
/// still there) is refused: the re-check matches the finding by its anchored fingerprint
/// (`issue_model::same_finding`), not only by the line's text.
#[test]
fn an_edit_that_keeps_the_finding_is_refused() {
    let f = Fixture::empty();
    f.write(
        "proj/step.py",
        "import torch\n\n\ndef step(device):\n    w = torch.zeros(3, dtype=torch.float64).to(device)\n    return w\n",
    );
    let result =
        scan::scan(&f.path("proj"), &scan::Settings::default()).unwrap_or_else(|e| panic!("{e}"));
    scan::write_issues_json(f.dir.path(), "proj", &result).unwrap_or_else(|e| panic!("{e}"));
    let id = f
        .load()
        .issues
        .into_iter()
        .find(|i| i.pattern == "P_F64" && i.file == "step.py")
        .map(|i| i.id)
        .expect("the scanner must report the float64 tensor");
    f.write(
        "proj/step.py",
        "import torch\n\n\ndef step(device):\n    weights = torch.zeros(3, dtype=torch.float64).to(device)\n    return weights\n",
    );
    let (code, out, err) = f.run(&["issues.json", "--fixed", &id]);
    assert_eq!(code, 1, "{out}{err}");
    assert_contains(
        &out,
        &format!("{id} is not fixed: the scanner still finds it:"),
    );
}
