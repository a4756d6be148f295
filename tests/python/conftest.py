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


def pytest_sessionstart(session: pytest.Session) -> None:
    """Build the emulator's C++ extension (once per torch version, cached) before the first test, without loading
    it: tests that start fresh interpreters then find it built instead of each waiting for the build under their
    own timeout. A build that fails is reported by the tests that install the device."""
    del session
    from npu_emulator import _errors, _native

    try:
        _native.build()
    except _errors.EmulatedNPUError:
        pass


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


# -- the torch-matrix record (`cargo xtask test` sets NPU_PATCHER_MATRIX_RESULTS): per suite (tests/python/<suite>/),
# the outcome counts and every skip with its reason, from which the support tables of docs/runtime-patches.md and the
# emulator README are rendered.
RESULTS_ENV = "NPU_PATCHER_MATRIX_RESULTS"
_suites: dict[str, dict[str, Any]] = {}


def _suite(nodeid: str) -> dict[str, Any]:
    parts = nodeid.split("/")
    name = parts[2] if len(parts) > 3 and parts[:2] == ["tests", "python"] else parts[0]
    return _suites.setdefault(name, {"passed": 0, "failed": [], "skipped": []})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or (report.when != "call" and report.outcome != "passed"):
        suite = _suite(report.nodeid)
        if report.outcome == "skipped":
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            suite["skipped"].append([report.nodeid, reason.removeprefix("Skipped: ")])
        elif report.outcome == "passed":
            suite["passed"] += 1
        else:
            suite["failed"].append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    del session
    target = os.environ.get(RESULTS_ENV)
    if not target:
        return
    import json

    for suite in _suites.values():
        suite["failed"] = sorted(set(suite["failed"]))
        suite["skipped"].sort()
    record = {"torch": torch.__version__.split("+")[0], "exit_status": int(exitstatus), "suites": _suites}
    Path(target).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
