"""The emulator's C++ extension on torch < 2.10 (npu_emulator/_native.py, npu_device.cpp)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

EMULATOR = Path(__file__).resolve().parents[3] / "assets" / "emulator"
PYTHON_BACKEND = hasattr(torch.utils.backend_registration, "_setup_privateuseone_for_python_backend")
NOT_NATIVE = f"torch {torch.__version__} registers the device from Python: no C++ extension"


def _fresh(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(EMULATOR), "PYTHONDONTWRITEBYTECODE": "1", **env}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full, timeout=300, check=False
    )


def test_the_device_is_registered_by_the_backend_this_torch_supports(npu: torch.device) -> None:
    import npu_emulator

    del npu
    assert npu_emulator._install.backend() == ("python" if PYTHON_BACKEND else "c++ extension")


@pytest.mark.skipif(PYTHON_BACKEND, reason=NOT_NATIVE)
def test_the_guard_reports_the_backend_device_count(npu: torch.device) -> None:
    from npu_emulator import _backend, _native

    del npu
    assert _native.load().device_count() == _backend.device_count()


@pytest.mark.skipif(PYTHON_BACKEND, reason=NOT_NATIVE)
def test_a_missing_compiler_is_an_emulated_error_naming_it(tmp_path: Path) -> None:
    done = _fresh(
        """
        import npu_emulator
        try:
            npu_emulator.install()
        except npu_emulator.EmulatedNPUError as error:
            print("ERROR", error)
        else:
            print("INSTALLED")
        """,
        {"NPU_PATCHER_EMULATOR_BUILD_DIR": str(tmp_path / "empty"), "CXX": "no-such-compiler"},
    )
    assert done.returncode == 0, done.stderr
    assert "ERROR" in done.stdout and "no-such-compiler" in done.stdout, done.stdout
    assert "install one" in done.stdout and "Traceback" not in done.stderr, done.stdout + done.stderr


@pytest.mark.skipif(PYTHON_BACKEND, reason=NOT_NATIVE)
def test_parallel_processes_build_the_extension_once(tmp_path: Path) -> None:
    build = tmp_path / "ext"
    code = "import npu_emulator, torch; npu_emulator.install(); print(torch.ones(2, device='npu').sum().item())"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(EMULATOR), "NPU_PATCHER_EMULATOR_BUILD_DIR": str(build)},
        )
        for _ in range(2)
    ]
    outs = [proc.communicate(timeout=600) for proc in procs]
    for proc, (out, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err
        assert out.strip() == "2.0", out
    libraries = list(build.glob("*/*.so"))
    assert len(libraries) == 1, libraries
