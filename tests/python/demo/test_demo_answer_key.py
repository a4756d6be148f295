"""The demo project's answer key (assets/demo/tiny-vla.expected.json) still points at the intended code."""

from __future__ import annotations

import re

import pytest
from demo_harness import FIXED, ORIGINAL, load_key

# Every rule of the design (P_SYN is about unparsable files; the demo parses).
RULES = {"P_ENT", "P_DEV", "P_FLA", "P_RND", "P_VEC", "P_LTM", "P_TGT", "P_F64", "P_CFG"}
KEY = load_key()


def _where(entry: dict) -> str:
    return f"{entry['rule']} {entry['file']}:{entry['line']}"


def _check_line(entry: dict) -> None:
    path = ORIGINAL / entry["file"]
    assert path.is_file(), f"{_where(entry)}: {path} does not exist"
    lines = path.read_text(encoding="utf-8").splitlines()
    assert 1 <= entry["line"] <= len(lines), f"{_where(entry)}: the file has {len(lines)} lines"
    if entry["contains"] not in lines[entry["line"] - 1]:
        now = [i + 1 for i, line in enumerate(lines) if entry["contains"] in line]
        pytest.fail(f"{_where(entry)}: line does not contain {entry['contains']!r}; the text is now on lines {now}")


def _ids(entries: list[dict]) -> list[str]:
    return [_where(e) for e in entries]


@pytest.mark.parametrize("entry", KEY["findings"], ids=_ids(KEY["findings"]))
def test_finding_points_at_its_code(entry: dict) -> None:
    assert entry["rule"] in RULES
    assert entry["note"]
    _check_line(entry)
    for related in entry.get("related", []):
        _check_line({"rule": entry["rule"], **related})


@pytest.mark.parametrize("entry", KEY["non_findings"], ids=_ids(KEY["non_findings"]))
def test_non_finding_points_at_its_code(entry: dict) -> None:
    assert entry["rule"] in RULES
    assert entry["why"]
    _check_line(entry)


def test_every_rule_has_a_finding_and_the_lists_do_not_overlap() -> None:
    found = {e["rule"] for e in KEY["findings"]}
    assert found == RULES, f"rules without a planted finding: {sorted(RULES - found)}"
    positives = [(e["rule"], e["file"], e["line"]) for e in KEY["findings"]]
    negatives = [(e["rule"], e["file"], e["line"]) for e in KEY["non_findings"]]
    assert len(set(positives)) == len(positives), "duplicate findings"
    assert len(set(negatives)) == len(negatives), "duplicate non-findings"
    assert not set(positives) & set(negatives), "a line is both a finding and a non-finding"
    # Most rules also have a look-alike that must not be reported.
    assert {e["rule"] for e in KEY["non_findings"]} >= RULES - {"P_LTM"}


def test_p_dev_covers_the_four_device_assumptions() -> None:
    notes = " ".join(e["contains"] for e in KEY["findings"] if e["rule"] == "P_DEV")
    assert 'device.type == "cuda"' in notes
    assert '== "nccl"' in notes
    assert "torch.device(args.gpu)" in notes
    assert "def get_device" in notes


@pytest.mark.parametrize(
    "entry", [e for e in KEY["findings"] if e["rule"] != "P_ENT"], ids=_ids([e for e in KEY["findings"] if e["rule"] != "P_ENT"])
)
def test_fixed_tree_removes_each_finding(entry: dict) -> None:
    """The fixed version no longer has the flagged code (or the line that made it a problem)."""
    fixed = (FIXED / entry["file"]).read_text(encoding="utf-8")
    snippets = [entry["contains"], *(r["contains"] for r in entry.get("related", []))]
    assert any(s not in fixed for s in snippets), f"{_where(entry)}: still in the fixed tree: {snippets}"


@pytest.mark.parametrize("entry", [e for e in KEY["findings"] if e["rule"] == "P_ENT"], ids=lambda e: e["file"])
def test_fixed_entry_points_set_up_the_npu(entry: dict) -> None:
    source = (FIXED / entry["file"]).read_text(encoding="utf-8")
    for needle in ("import torch_npu", "from torch_npu.contrib import transfer_to_npu", "build_vla_patcher()", ".apply()"):
        assert needle in source, f"fixed {entry['file']} lacks {needle!r}"
    # The setup runs before anything that imports torch.
    assert source.index("import torch_npu") < min(
        m.start() for m in re.finditer(r"^(import torch\b|from tiny_vla|import hydra)", source, re.MULTILINE)
    )


def test_fixed_tree_has_no_cuda_only_code() -> None:
    banned = [".cuda(", "torch.cuda.", "nccl", "pytorch_lightning", "flash_attention_2", "torch.float64", ".double()"]
    for path in sorted(FIXED.rglob("*")):
        if path.suffix not in (".py", ".yaml"):
            continue
        text = path.read_text(encoding="utf-8")
        for needle in banned:
            assert needle not in text, f"{path.relative_to(FIXED)} still contains {needle!r}"
