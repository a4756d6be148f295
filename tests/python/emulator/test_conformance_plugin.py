"""The pytest plugin of ``cargo xtask conformance`` (conformance/npu_conformance.py) on a small generated suite.

Each run is a separate pytest process, as the command runs it: outcomes, the per-test timeout, and on the npu the
real transfer_to_npu (a suite that picks ``cuda`` when it is available lands on the npu) and the default device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SUITE = '''
import time

import pytest
import torch


def test_passes():
    assert torch.ones(2).sum() == 2


def test_fails():
    assert torch.ones(2).sum() == 3


@pytest.mark.skip(reason="not here")
def test_skipped():
    pass


def test_runs_past_the_timeout():
    time.sleep(30)


def test_after_the_timeout():
    pass


def test_cuda_when_available():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.ones(3, device=device)
    print("DEVICE", x.device.type)
    assert x.device.type == "cpu"


def test_default_device():
    assert torch.zeros(1).device.type == "cpu"
'''


def _run(tmp_path: Path, mode: str, default_device: bool = False, suite: str = SUITE, **extra: str) -> dict:
    (tmp_path / "test_suite.py").write_text(suite, encoding="utf-8")
    results = tmp_path / f"{mode}.jsonl"
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(ROOT / "conformance"),
        PYTHONDONTWRITEBYTECODE="1",
        NPU_CONFORMANCE_MODE=mode,
        NPU_CONFORMANCE_RESULTS=str(results),
        NPU_CONFORMANCE_TIMEOUT="2",
        NPU_CONFORMANCE_EMULATOR_DIR=str(ROOT / "assets" / "emulator"),
    )
    env.pop("NPU_CONFORMANCE_DEFAULT_DEVICE", None)
    for name in ("NPU_CONFORMANCE_TRANSFER", "NPU_CONFORMANCE_TORCH_NPU_TESTING"):
        env.pop(name, None)
    env.update(extra)
    if default_device:
        env["NPU_CONFORMANCE_DEFAULT_DEVICE"] = "npu"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "npu_conformance", "-p", "no:cacheprovider", "-q", "test_suite.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=300,
        check=False,
    )
    lines = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()]
    outcomes = {r["nodeid"].split("::")[-1]: r for r in lines if r["kind"] == "outcome"}
    return {"session": lines[0], "outcomes": outcomes, "last": lines[-1]}


def test_outcomes_and_the_per_test_timeout_on_the_cpu(tmp_path: Path) -> None:
    got = _run(tmp_path, "cpu")
    assert got["session"]["kind"] == "session" and got["session"]["mode"] == "cpu"
    assert got["last"]["kind"] == "finish"
    outcome = {name: r["outcome"] for name, r in got["outcomes"].items()}
    assert outcome == {
        "test_passes": "passed",
        "test_fails": "failed",
        "test_skipped": "skipped",
        "test_runs_past_the_timeout": "failed",
        "test_after_the_timeout": "passed",
        "test_cuda_when_available": "passed",
        "test_default_device": "passed",
    }
    assert "NPU_CONFORMANCE_TIMEOUT" in got["outcomes"]["test_runs_past_the_timeout"]["message"]
    assert "assert" in got["outcomes"]["test_fails"]["message"]


def test_on_the_npu_cuda_code_runs_on_the_npu_with_the_real_transfer_to_npu(tmp_path: Path) -> None:
    got = _run(tmp_path, "npu", default_device=True)
    session = got["session"]
    assert session["transfer_to_npu"].startswith("torch-npu "), session  # the real module, not the stand-in
    assert session["cuda_available"] is True
    assert session["default_device"] == "npu"
    assert "float64" in session["restrictions"]
    outcome = {name: r["outcome"] for name, r in got["outcomes"].items()}
    # Both device checks see the npu now: the cuda choice and the default device.
    assert outcome["test_cuda_when_available"] == "failed"
    assert "npu" in got["outcomes"]["test_cuda_when_available"]["message"]
    assert outcome["test_default_device"] == "failed"
    assert outcome["test_passes"] == "passed"


TESTING_SUITE = """
import torch
import torch_npu
from torch_npu.testing.testcase import TestCase
from torch_npu.contrib import transfer_to_npu


class TestWithTheWheelsHarness(TestCase):
    def test_harness_imported_before_the_remap(self):
        import torch_npu.testing as testing
        assert testing.CUDA_AT_IMPORT is False
        assert torch.cuda.is_available()
        assert transfer_to_npu.SOURCE == "stand-in"
"""


def test_the_stand_in_on_request_with_torch_npus_test_harness_imported_first(tmp_path: Path) -> None:
    """``NPU_CONFORMANCE_TRANSFER=standin`` runs the stand-in; ``NPU_CONFORMANCE_TORCH_NPU_TESTING`` makes a wheel's
    ``torch_npu/testing`` importable, imported before transfer_to_npu (torch.cuda not yet remapped)."""
    wheel = tmp_path / "wheel"
    testing = wheel / "torch_npu" / "testing"
    testing.mkdir(parents=True)
    (testing / "__init__.py").write_text("import torch\nCUDA_AT_IMPORT = torch.cuda.is_available()\n", encoding="utf-8")
    (testing / "testcase.py").write_text("import unittest\nTestCase = unittest.TestCase\n", encoding="utf-8")
    run = tmp_path / "run"
    run.mkdir()
    got = _run(
        run,
        "npu",
        suite=TESTING_SUITE,
        NPU_CONFORMANCE_TRANSFER="standin",
        NPU_CONFORMANCE_TORCH_NPU_TESTING=str(wheel),
    )
    assert got["session"]["transfer_to_npu"] == "stand-in", got["session"]
    outcome = {name: r["outcome"] for name, r in got["outcomes"].items()}
    assert outcome == {"test_harness_imported_before_the_remap": "passed"}, got["outcomes"]
