"""``torch.npu.FloatTensor`` and the other legacy tensor types, as torch_npu has them (torch-npu 2.14.0
``npu/__init__.py`` ``__all__``), and through the real transfer_to_npu as ``torch.cuda.FloatTensor``.

Found by ``cargo xtask conformance`` (einops' ``test_pytorch_yolo_fragment``: ``x.type(torch.cuda.FloatTensor)``
raised ``ValueError: invalid type: 'FloatTensor'`` on the npu, and ``torch.cuda.LongTensor`` was CUDA's).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[3]

NAMES = {
    "BoolTensor": torch.bool,
    "ByteTensor": torch.uint8,
    "CharTensor": torch.int8,
    "DoubleTensor": torch.float64,
    "FloatTensor": torch.float32,
    "HalfTensor": torch.float16,
    "IntTensor": torch.int32,
    "LongTensor": torch.int64,
    "ShortTensor": torch.int16,
    "BFloat16Tensor": torch.bfloat16,
}


@pytest.mark.parametrize("name", sorted(NAMES))
def test_each_legacy_type_constructs_checks_and_converts_on_the_npu(npu: torch.device, name: str) -> None:
    legacy = getattr(torch.npu, name)
    dtype = NAMES[name]
    empty = legacy(2, 3)
    assert (empty.shape, empty.dtype, empty.device.type) == ((2, 3), dtype, "npu")
    data = legacy([1, 0])
    assert (data.dtype, data.device.type) == (dtype, "npu")
    assert isinstance(data, legacy)
    assert not isinstance(data.cpu(), legacy)  # a CPU tensor is not an npu type, as with torch.cuda's
    cpu = torch.tensor([1.0, 0.0])
    for target in (legacy, f"torch.npu.{name}"):
        moved = cpu.type(target)
        assert (moved.dtype, moved.device.type) == (dtype, "npu")
        assert moved.cpu().to(torch.float32).tolist() == [1.0, 0.0]
    assert data.type() == f"torch.npu.{name}"
    assert data.type(legacy) is data  # already of that type: no copy, as torch's Tensor.type


def test_tensor_type_keeps_torch_behaviour_for_other_types(npu: torch.device) -> None:
    x = torch.ones(2)
    assert x.type(torch.FloatTensor) is x
    assert x.type("torch.DoubleTensor").dtype == torch.float64
    assert x.type(torch.int64).dtype == torch.int64
    assert x.type() == "torch.FloatTensor"
    assert torch.ones(2, device=npu).type(torch.float16).device.type == "npu"


def test_through_the_real_transfer_to_npu_torch_cuda_types_are_the_npu_ones() -> None:
    code = """
import sys
sys.path.insert(0, sys.argv[1])
import npu_emulator
npu_emulator.install()
import torch
import torch_npu
from torch_npu.contrib import transfer_to_npu
assert transfer_to_npu.SOURCE.startswith("torch-npu "), transfer_to_npu.SOURCE
x = torch.randn(4)
grid = torch.linspace(0, 3, 4).type(torch.cuda.FloatTensor)
index = torch.cuda.LongTensor([0, 2])
assert grid.device.type == "npu" and grid.dtype == torch.float32, grid
assert index.device.type == "npu" and index.dtype == torch.int64, index
assert isinstance(grid, torch.cuda.FloatTensor)
print("OK", grid[index].cpu().tolist())
"""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "assets" / "emulator")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "OK [0.0, 2.0]" in done.stdout
