"""Fixtures for the runtime patch tests: the accelerator device, patchers that are always removed, and a leak
check after every test that the originals are back (builtins, ``torch.Tensor``, the torch attributes the patches
touch, ``copyreg.dispatch_table``).

The device is the emulated ``npu`` (``tests/python/conftest.py``); with ``NPU_PATCHER_TEST_DEVICE=cuda`` the same
tests run on a real CUDA GPU with the emulator off, and the "fails without the patch" halves, which are
Ascend-specific, are not asserted there (the test output says so).
"""

from __future__ import annotations

import builtins
import copyreg
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.optim.adamw

import runtime_patches as rp

ROOT = Path(__file__).resolve().parents[3]
ASSETS = ROOT / "assets"
EMULATOR = ASSETS / "emulator"
DEVICE_ENV = "NPU_PATCHER_TEST_DEVICE"


def _tracked() -> dict[str, Any]:
    """Every object a patch may replace, by a readable name."""
    functional = torch.nn.functional
    state: dict[str, Any] = {
        "builtins.min": builtins.min,
        "builtins.max": builtins.max,
        "copyreg.dispatch_table": dict(copyreg.dispatch_table),
        "torch.float64": torch.float64,
        "torch.double": torch.double,
        "torch.tensor": torch.tensor,
        "torch.as_tensor": torch.as_tensor,
        "torch.from_numpy": torch.from_numpy,
        "torch.pow": torch.pow,
        "torch.nan_to_num": torch.nan_to_num,
        "torch.optim.AdamW": torch.optim.AdamW,
        "torch.optim.adamw.AdamW": sys.modules["torch.optim.adamw"].AdamW,
        "torch.nn.functional.scaled_dot_product_attention": functional.scaled_dot_product_attention,
        "torch._C._nn.scaled_dot_product_attention": torch._C._nn.scaled_dot_product_attention,
        "torch function modes": torch._C._len_torch_function_stack(),
        "torch.storage._dtype_to_storage_type_map": torch.storage._dtype_to_storage_type_map,
    }
    for key, value in torch.Tensor.__dict__.items():
        if key == "__slotnames__":  # copyreg's cache, filled by pickling any tensor
            continue
        state[f"torch.Tensor.__dict__[{key!r}]"] = value
    return state


@pytest.fixture(autouse=True)
def no_leaks(accel: torch.device) -> Iterator[None]:
    """After every test: no patcher applied, and every tracked object is the identical original.

    Depends on ``accel`` so that installing the emulated device (once) happens before the first snapshot.
    """
    del accel
    before = _tracked()
    yield
    assert rp.active_patcher() is None, "a test left a runtime patcher applied"
    after = _tracked()
    changed = sorted(
        key for key in before.keys() | after.keys() if key not in before or key not in after or _differs(before[key], after[key])
    )
    assert not changed, f"runtime patches left traces: {changed}"


def _differs(old: Any, new: Any) -> bool:
    if isinstance(old, dict) and isinstance(new, dict):
        # Lazy imports may register reducers for their own types (sympy does); ours is keyed by torch.dtype.
        if (torch.dtype in old) != (torch.dtype in new):
            return True
        return any(key not in new or old[key] is not new[key] for key in old)
    if isinstance(old, int) and isinstance(new, int):
        return old != new
    return old is not new


@pytest.fixture(scope="session")
def accel(request: pytest.FixtureRequest) -> torch.device:
    """The accelerator the patches act on: the emulated npu, or cuda when ``NPU_PATCHER_TEST_DEVICE=cuda``."""
    wanted = os.environ.get(DEVICE_ENV, "npu")
    if wanted == "cuda":
        if not torch.cuda.is_available():
            pytest.fail(f"{DEVICE_ENV}=cuda but torch.cuda.is_available() is False")
        return torch.device("cuda:0")
    if wanted != "npu":
        pytest.fail(f"{DEVICE_ENV} must be npu or cuda, not {wanted!r}")
    return request.getfixturevalue("npu")


@pytest.fixture
def emulated(accel: torch.device) -> bool:
    return accel.type == "npu"


@pytest.fixture
def fails_without_patch(accel: torch.device) -> Callable[..., None]:
    """``fails_without_patch(fn, match)``: on the emulated npu, ``fn()`` must raise the emulated error."""

    def check(fn: Callable[[], Any], match: str) -> None:
        if accel.type != "npu":
            sys.stderr.write(f"not asserted on {accel}: the failure ({match}) is Ascend-specific\n")
            return
        from npu_emulator import EmulatedNPUError

        with pytest.raises(EmulatedNPUError, match=match):
            fn()

    return check


@pytest.fixture
def make_patcher() -> Iterator[Callable[..., rp.Patcher]]:
    """Build and apply patchers that are removed at teardown even if the test fails.

    In-process tests use TensorIndexDevice's reversible ``mode`` strategy: the default ``slot`` strategy has a
    process-wide CPython side effect (tested in fresh interpreters, see test_tensor_index.py).
    """
    made: list[rp.Patcher] = []

    def make(apply: bool = True, **options: Any) -> rp.Patcher:
        options.setdefault("tensor_index", "mode")
        patcher = rp.build_vla_patcher(**options)
        made.append(patcher)
        if apply:
            patcher.apply()
        return patcher

    yield make
    for patcher in reversed(made):
        patcher.remove()


@pytest.fixture
def run_fresh() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run a Python snippet in a fresh interpreter with assets/ and the emulator importable."""

    def run(code: str, *, emulator: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        paths = [str(ASSETS)] + ([str(EMULATOR)] if emulator else [])
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = os.pathsep.join(paths)
        full_env.update(env or {})
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=300, check=False
        )
        assert done.returncode == 0, f"fresh interpreter failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        return done

    return run
