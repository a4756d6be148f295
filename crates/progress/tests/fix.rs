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
