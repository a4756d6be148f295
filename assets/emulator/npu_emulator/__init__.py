"""An emulated Ascend ``npu`` device for CPU-only PyTorch (torch 2.1 to 2.14; a small C++ extension below 2.10).

``install()`` renames torch's PrivateUse1 backend to ``npu`` and registers a ``torch.npu`` module, so that
``torch.device("npu:0")``, ``tensor.to("npu")``, ``model.to("npu")`` and ``torch.randn(..., device="npu")``
work on a machine without an NPU. Device tensors are wrapper tensors holding a CPU tensor; every aten op on them
runs on CPU after the emulated restrictions of a real NPU were checked. Each emulated failure raises
:class:`EmulatedNPUError` whose message says it is emulated and names the source of the rule.

Plain CPU code pays nothing: nothing is installed at import time, and after ``install()`` only tensors on the
``npu`` device take the emulated path.
"""

from __future__ import annotations

from npu_emulator._errors import (
    LIMITATION_PHRASE,
    EmulatedNPUError,
    EmulatorLimitation,
    EmulatorLimitationWarning,
    clear_faults,
    faults,
    is_emulator_fault,
)
from npu_emulator._install import install, is_installed
from npu_emulator._kernels import fallbacks as cpu_fallbacks
from npu_emulator._kernels import table_info as kernel_table
from npu_emulator._ledger import reset as reset_memory
from npu_emulator._ledger import round_size as allocator_block_size
from npu_emulator._ledger import summary as memory_summary
from npu_emulator._shapes import enabled as shapes_only
from npu_emulator._shapes import load_safetensors
from npu_emulator._shapes import unchecked as shapes_unchecked
from npu_emulator._rules import (
    RESTRICTIONS,
    enabled_restrictions,
    restrictions,
    set_restriction,
)

__all__ = [
    "LIMITATION_PHRASE",
    "RESTRICTIONS",
    "EmulatedNPUError",
    "EmulatorLimitation",
    "EmulatorLimitationWarning",
    "allocator_block_size",
    "clear_faults",
    "cpu_fallbacks",
    "faults",
    "is_emulator_fault",
    "enabled_restrictions",
    "install",
    "is_installed",
    "kernel_table",
    "load_safetensors",
    "memory_summary",
    "reset_memory",
    "restrictions",
    "set_restriction",
    "shapes_only",
    "shapes_unchecked",
]
