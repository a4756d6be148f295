//! `--fix ID`: one issue's automatic fix, applied, shown, re-checked and marked.

mod common;

use common::{Fixture, assert_contains};
use issue_model::{HistoryStatus, Status};

fn scanned(files: &[(&str, &str)]) -> Fixture {
    let f = Fixture::empty();
    for (rel, text) in files {
        f.write(&format!("proj/{rel}"), text);
    }
    let result =
        scan::scan(&f.path("proj"), &scan::Settings::default()).unwrap_or_else(|e| panic!("{e}"));
    scan::write_issues_json(f.dir.path(), "proj", &result).unwrap_or_else(|e| panic!("{e}"));
    f
}

fn id_of(f: &Fixture, pattern: &str) -> String {
    f.load()
        .issues
        .into_iter()
        .find(|i| i.pattern == pattern)
        .map_or_else(|| panic!("no {pattern} issue"), |i| i.id)
}

const TRAINER: &str = "\
import torch
from flash_attn import flash_attn_func
from torch import nn


def use_amp(device: torch.device) -> bool:
    return device.type == \"cuda\" and torch.cuda.is_bf16_supported()


class Policy(nn.Module):
    def forward(self, x):
        noise = torch.randn(x.shape)
        y = x + noise
        return flash_attn_func(y, y, y)
";

#[test]
fn applies_a_safe_fix_shows_the_diff_and_marks_the_issue() {
    let f = scanned(&[("trainer.py", TRAINER)]);
    let id = id_of(&f, "P_DEV");
    let (code, out, err) = f.run(&["issues.json", "--fix", &id]);
    assert_eq!(code, 0, "{out}{err}");
    assert_contains(&out, "+    return device.type in (\"cuda\", \"npu\") and");
    assert_contains(&out, "--- a/trainer.py");
    assert_contains(&out, &format!("{id}: marked fixed"));
    let source = std::fs::read_to_string(f.path("proj/trainer.py")).unwrap_or_default();
    assert!(
        source.contains("device.type in (\"cuda\", \"npu\")"),
        "{source}"
    );
    let issue = f.issue(&id);
    assert_eq!(issue.status, Status::Fixed);
    let last = issue.history.last().unwrap_or_else(|| panic!("no history"));
    assert_eq!(last.status, HistoryStatus::Fixed);
    assert!(
        last.note
            .as_deref()
            .is_some_and(|n| n.starts_with("fixed by --fix")),
        "{last:?}"
    );
    // Again: nothing to fix, nothing changes.
    let before = f.bytes();
    let (code, out, _) = f.run(&["issues.json", "--fix", &id]);
    assert_eq!(code, 0);
    assert_contains(&out, "already fixed");
    assert_eq!(f.bytes(), before);
}

#[test]
fn an_unsafe_fix_needs_the_flag_and_an_issue_without_fix_says_so() {
    let f = scanned(&[("trainer.py", TRAINER)]);
    let id = id_of(&f, "P_RND");
    let before = std::fs::read(f.path("proj/trainer.py")).unwrap_or_default();
    let (code, out, _) = f.run(&["issues.json", "--fix", &id]);
    assert_eq!(code, 1);
    assert_contains(&out, "unsafe");
    assert_contains(&out, "--unsafe-fixes");
    assert_eq!(
        std::fs::read(f.path("proj/trainer.py")).unwrap_or_default(),
        before
    );
    assert_eq!(f.issue(&id).status, Status::Pending);

    let (code, out, err) = f.run(&["issues.json", "--fix", &id, "--unsafe-fixes"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_contains(&out, "torch.randn(x.shape, device=x.device)");
    assert_eq!(f.issue(&id).status, Status::Fixed);

    // The call of the flash-attn kernel has no fix (its import does: an SDPA fallback).
    let id = f
        .load()
        .issues
        .into_iter()
        .find(|i| i.pattern == "P_FLA" && i.fix.is_none())
        .map_or_else(|| panic!("no P_FLA issue without a fix"), |i| i.id);
    let (code, out, _) = f.run(&["issues.json", "--fix", &id]);
    assert_eq!(code, 1);
    assert_contains(&out, "has no automatic fix");
    assert_contains(&out, "P_FLA.md");
}

#[test]
fn unsafe_fixes_without_fix_is_a_usage_error() {
    let f = scanned(&[("trainer.py", TRAINER)]);
    let (code, _, err) = f.run(&["issues.json", "--next", "--unsafe-fixes"]);
    assert_eq!(code, 2);
    assert_contains(&err, "--unsafe-fixes goes with --fix");
}

#[test]
fn diff_previews_one_fix_and_writes_nothing() {
    let f = scanned(&[("trainer.py", TRAINER)]);
    let source = std::fs::read(f.path("proj/trainer.py")).unwrap_or_default();
    let issues = f.bytes();

    let id = id_of(&f, "P_DEV");
    let (code, out, err) = f.run(&["issues.json", "--fix", &id, "--diff"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("--- a/trainer.py\n+++ b/trainer.py\n@@ "),
        "{out}"
    );
    assert_contains(&out, "+    return device.type in (\"cuda\", \"npu\") and");
    assert_contains(
        &err,
        &format!(
            "safe fix, not applied (accept \"npu\" as well as \"cuda\"); apply it with: npu-progress issues.json --fix {id}"
        ),
    );

    // An unsafe fix is previewed only with --unsafe-fixes, and then the command says how to apply it.
    let id = id_of(&f, "P_RND");
    let (code, out, _) = f.run(&["issues.json", "--fix", &id, "--diff"]);
    assert_eq!(code, 1);
    assert_contains(
        &out,
        &format!("preview it with: npu-progress issues.json --fix {id} --diff --unsafe-fixes"),
    );
    let (code, out, err) = f.run(&["issues.json", "--fix", &id, "--diff", "--unsafe-fixes"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_contains(
        &out,
        "+        noise = torch.randn(x.shape, device=x.device)",
    );
    assert_contains(
        &err,
        &format!("apply it with: npu-progress issues.json --fix {id} --unsafe-fixes"),
    );
    let (code, out, _) = f.run(&[
        "issues.json",
        "--fix",
        &id,
        "--diff",
        "--unsafe-fixes",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0);
    let json: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(json["changed"], false);
    assert_eq!(json["applicability"], "unsafe");
    assert!(
        json["diff"]
            .as_str()
            .is_some_and(|d| d.contains("device=x.device")),
        "{json}"
    );

    assert_eq!(
        std::fs::read(f.path("proj/trainer.py")).unwrap_or_default(),
        source,
        "a preview changed the file"
    );
    assert_eq!(f.bytes(), issues, "a preview changed issues.json");

    let (code, _, err) = f.run(&["issues.json", "--next", "--diff"]);
    assert_eq!(code, 2);
    assert_contains(&err, "--diff goes with --fix");
}

#[test]
fn next_and_show_say_when_an_issue_has_an_automatic_fix() {
    let f = scanned(&[("trainer.py", TRAINER)]);
    let dev = id_of(&f, "P_DEV");
    let (code, out, _) = f.run(&["issues.json", "--show", &dev]);
    assert_eq!(code, 0);
    assert_contains(
        &out,
        &format!(
            "automatic fix: safe (accept \"npu\" as well as \"cuda\") — apply with `npu-progress issues.json --fix {dev}` (preview: `npu-progress issues.json --fix {dev} --diff`)"
        ),
    );
    let rnd = id_of(&f, "P_RND");
    let (_, out, _) = f.run(&["issues.json", "--show", &rnd]);
    assert_contains(
        &out,
        &format!(
            "— apply with `npu-progress issues.json --fix {rnd} --unsafe-fixes` (preview: `npu-progress issues.json --fix {rnd} --diff --unsafe-fixes`)"
        ),
    );
    assert_contains(&out, "automatic fix: unsafe (");
    // --next shows the first pending issue with the same line when it has a fix.
    let (_, out, _) = f.run(&["issues.json", "--next"]);
    let shown = out.split_whitespace().next().unwrap_or_default().to_owned();
    let has_fix = f.issue(&shown).fix.is_some();
    assert_eq!(out.contains("automatic fix: "), has_fix, "{out}");
    assert_eq!(out.contains(&format!("--fix {shown}")), has_fix, "{out}");
    // A fixed issue has nothing left to apply.
    let (code, _, _) = f.run(&["issues.json", "--fix", &dev]);
    assert_eq!(code, 0);
    let (_, out, _) = f.run(&["issues.json", "--show", &dev]);
    assert!(!out.contains("automatic fix:"), "{out}");
}

#[test]
fn the_entry_setup_is_not_inserted_without_the_runtime_patches() {
    let entry = "import torch\n\n\nif __name__ == \"__main__\":\n    print(torch.ones(3).cuda())\n";
    let f = scanned(&[("train.py", entry)]);
    let id = id_of(&f, "P_ENT");
    let (code, out, _) = f.run(&["issues.json", "--fix", &id]);
    assert_eq!(code, 1, "{out}");
    assert_contains(
        &out,
        "migrate_to_cloudrobo/runtime_patches.py, which does not exist",
    );
    assert_contains(&out, "run `npu-assets init ");
    assert_eq!(
        std::fs::read_to_string(f.path("proj/train.py")).unwrap_or_default(),
        entry
    );
    assert_eq!(f.issue(&id).status, Status::Pending);
    f.write("proj/migrate_to_cloudrobo/runtime_patches.py", "");
    let (code, out, err) = f.run(&["issues.json", "--fix", &id]);
    assert_eq!(code, 0, "{out}{err}");
    assert_contains(&out, "+    _NPU_PATCHER.apply()");
}
