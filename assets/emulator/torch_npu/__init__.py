"""A stand-in ``torch_npu`` for machines without an Ascend NPU, backed by the emulated device of ``npu_emulator``.

Importing it installs the emulated ``npu`` device. It offers the parts of torch_npu that ported training code
calls: ``torch_npu.npu`` (the ``torch.npu`` module, with ``config.allow_internal_format`` and
``set_compile_mode``), ``npu_fusion_attention``, ``npu_rms_norm``, ``npu_rotary_mul``, ``optim.NpuFusedAdamW`` and
``contrib.transfer_to_npu``. Numerics are CPU reference implementations, not Ascend kernels.
"""

from __future__ import annotations

import sys

import npu_emulator
import torch

npu_emulator.install()

from npu_emulator._backend import npu  # noqa: E402 - needs the installed device

from torch_npu._ops import npu_fusion_attention, npu_rms_norm, npu_rotary_mul  # noqa: E402

sys.modules["torch_npu.npu"] = npu
sys.modules["torch_npu.npu.amp"] = npu.amp
sys.modules["torch_npu.npu.config"] = npu.config

#: torch_npu's base version equals torch's (NPU-FACTS.md, "torch_npu basics"); the local part marks the emulator.
__version__ = torch.__version__.split("+")[0] + ".post0+emulated"

__all__ = ["__version__", "npu", "npu_fusion_attention", "npu_rms_norm", "npu_rotary_mul"]
