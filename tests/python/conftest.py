"""Shared pytest setup for the Python suite (run from the repo root: ``python -m pytest tests -q``).

``assets/`` (runtime_patches.py) and ``assets/emulator/`` (npu_emulator, the stand-in torch_npu) go on
``sys.path``. The emulated ``npu`` device is installed only when a test asks for the ``npu`` fixture, so plain CPU
tests run on unmodified torch; once installed it stays for the rest of the process (torch allows one PrivateUse1
rename per process).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "assets"
EMULATOR = ASSETS / "emulator"

# No __pycache__ under assets/ (it is embedded into the binaries as it is on disk), here or in subprocesses.
sys.dont_write_bytecode = True
os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")

for path in (EMULATOR, ASSETS):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

# A missing torch is a failure of the whole run, never a skip.
import torch  # noqa: E402


@pytest.fixture(scope="session")
def npu() -> torch.device:
    """Install the emulated npu device (once per session) and return ``torch.device("npu:0")``."""
    import npu_emulator

    npu_emulator.install()
    return torch.device("npu:0")


def _uses_emulator(item: pytest.Item) -> bool:
    return "npu" in getattr(item, "fixturenames", ()) or Path(str(item.path)).parent.name == "emulator"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the tests that install the emulated device after all others (a stable reorder).

    Installing renames PrivateUse1 and makes ``npu`` the current accelerator for the rest of the process, so
    plain CPU tests and, on a GPU machine, the CUDA runs of the patch tests come first and see unmodified torch.
    """
    del config
    items.sort(key=_uses_emulator)


# -- the torch-matrix record (`cargo xtask test` sets NPU_PATCHER_MATRIX_RESULTS): outcome counts and every skip
# with its reason, which the support tables of docs/runtime-patches.md and the emulator README are rendered from.
RESULTS_ENV = "NPU_PATCHER_MATRIX_RESULTS"
_outcomes: dict[str, list[Any]] = {"passed": [], "failed": [], "skipped": []}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        if report.outcome == "skipped":
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            _outcomes["skipped"].append([report.nodeid, reason.removeprefix("Skipped: ")])
        else:
            _outcomes[report.outcome].append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    target = os.environ.get(RESULTS_ENV)
    if not target:
        return
    import json

    record = {
        "torch": torch.__version__.split("+")[0],
        "exit_status": int(exitstatus),
        "passed": len(_outcomes["passed"]),
        "failed": sorted(_outcomes["failed"]),
        "skipped": sorted(_outcomes["skipped"]),
    }
    Path(target).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    del session
