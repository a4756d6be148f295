"""The extracted torch-npu wheels of ``torch-npu/wheels.json`` (``cargo xtask torch-npu`` fills the cache).

Imported by the tests of this directory and their ``conftest.py`` (a module name of its own: several test
directories have a ``conftest``).

The directory is ``$NPU_PATCHER_TORCH_NPU_DIR``, else ``torch-npu`` under the cache directory of the test venv. A
missing wheel fails the tests that read it, naming the command that fetches it: these tests never pass without the
source they check.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = ROOT / "torch-npu" / "wheels.json"
TABLE = ROOT / "torch-npu" / "transfer_to_npu.json"
VERSIONS = [w["version"] for w in json.loads(MANIFEST.read_text(encoding="utf-8"))["wheels"]]


def wheels_dir() -> Path:
    if os.environ.get("NPU_PATCHER_TORCH_NPU_DIR"):
        return Path(os.environ["NPU_PATCHER_TORCH_NPU_DIR"])
    if os.environ.get("NPU_PATCHER_VENV_DIR"):
        return Path(os.environ["NPU_PATCHER_VENV_DIR"]) / "torch-npu"
    cache = Path(os.environ["XDG_CACHE_HOME"]) if os.environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return cache / "npu-patcher" / "torch-npu"


def wheel_root(version: str) -> Path:
    root = wheels_dir() / version
    if not (root / ".complete").is_file():
        pytest.fail(
            f"torch-npu {version} is not extracted under {root}: run `cargo xtask torch-npu` "
            "(it downloads the pinned wheels of torch-npu/wheels.json)"
        )
    return root
