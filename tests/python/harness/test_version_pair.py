"""npu-verify --runtime's torch/torch_npu pair check (assets/harness/npu_verify_harness/runtime.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

HARNESS = Path(__file__).resolve().parents[3] / "assets" / "harness"
sys.path.insert(0, str(HARNESS))

from npu_verify_harness import runtime  # noqa: E402


class Recorder:
    def __init__(self) -> None:
        self.checks: list[dict[str, Any]] = []

    def check(self, name: str, status: str, detail: str, remedy: str | None = None, data: Any = None, **_: Any) -> None:
        self.checks.append({"name": name, "status": status, "detail": detail, "remedy": remedy, "data": data})


def pair(torch_version: str, npu_version: str) -> dict[str, Any]:
    results = Recorder()
    runtime.check_pair(torch_version, npu_version, results)
    (check,) = results.checks
    assert check["name"] == "runtime.versions"
    return check


@pytest.mark.parametrize(
    ("torch_version", "npu_version"),
    [("2.1.0+cpu", "2.1.0.post17"), ("2.6.0", "2.6.0.post5"), ("2.14.0+cu130", "2.14.0"), ("2.7.1", "2.7.1.post11")],
)
def test_a_shipped_pair_passes_and_is_reported(torch_version: str, npu_version: str) -> None:
    check = pair(torch_version, npu_version)
    assert check["status"] == "pass", check
    assert check["data"]["torch"] == torch_version and check["data"]["torch_npu"] == npu_version
    assert check["data"]["torch_has_torch_npu_release"] is True


def test_a_base_version_mismatch_fails() -> None:
    check = pair("2.6.0", "2.1.0.post17")
    assert check["status"] == "fail" and "base versions 2.1.0 and 2.6.0" in check["detail"], check


@pytest.mark.parametrize("torch_version", ["2.15.0", "2.0.1", "2.5.0"])
def test_a_torch_no_torch_npu_release_pairs_with_fails(torch_version: str) -> None:
    # The emulator's stand-in always shares torch's base version: the release list is what catches these.
    check = pair(torch_version, torch_version + ".post0+emulated")
    assert check["status"] == "fail", check
    assert f"torch {torch_version} has no torch_npu release" in check["detail"], check
    assert check["data"]["torch_has_torch_npu_release"] is False
    assert "torch==2.14.0" in check["remedy"], check


def test_the_release_list_covers_every_torch_npu_line() -> None:
    doc = json.loads(Path(runtime.RELEASES_FILE).read_text(encoding="utf-8"))
    bases = runtime.paired_torch_versions()
    assert bases is not None and len(doc["releases"]) >= len(bases)
    for wanted in ("2.1.0", "2.4.0", "2.5.1", "2.6.0", "2.7.1", "2.8.0", "2.14.0"):
        assert wanted in bases, bases


def test_an_unreadable_release_list_skips_only_the_release_check(tmp_path: Path) -> None:
    broken = tmp_path / "torch_npu_releases.json"
    broken.write_text("{not json", encoding="utf-8")
    assert runtime.paired_torch_versions(str(broken)) is None
