"""``torch.accelerator`` answers for the emulated device.

Once ``npu`` is registered it is torch's current accelerator, and the generic ``torch.accelerator`` functions ask
the backend for a device allocator and a stream synchronizer that a Python backend cannot provide. These
replacements answer as the ``torch.npu`` module does: synchronisation is a no-op (ops run synchronously) and the
memory statistics are zero (device memory is not modelled).
"""

from __future__ import annotations

from typing import Any

import torch

from npu_emulator import _backend


def _synchronize(device: Any = None) -> None:
    _backend.synchronize(_index(device))


def _index(device: Any) -> Any:
    if isinstance(device, torch.device) and device.type == "npu":
        return device.index or 0
    if isinstance(device, str) and device.startswith("npu"):
        return torch.device(device).index or 0
    return device


def _zero(device: Any = None) -> int:
    _backend.synchronize(_index(device))
    return 0


def _nothing(device: Any = None) -> None:
    _backend.synchronize(_index(device))


def _empty_cache() -> None:
    _backend.empty_cache()


def _memory_stats(device: Any = None) -> dict[str, Any]:
    _backend.synchronize(_index(device))
    return {}


def _memory_info(device: Any = None) -> tuple[int, int]:
    return _backend.mem_get_info(_index(device))


REPLACEMENTS = {
    "synchronize": _synchronize,
    "empty_cache": _empty_cache,
    "memory_allocated": _zero,
    "max_memory_allocated": _zero,
    "memory_reserved": _zero,
    "max_memory_reserved": _zero,
    "reset_peak_memory_stats": _nothing,
    "reset_accumulated_memory_stats": _nothing,
    "memory_stats": _memory_stats,
    "get_memory_info": _memory_info,
}


def install() -> None:
    """Replace the ``torch.accelerator`` functions that a Python backend cannot serve (for this process).

    Nothing to do on torch < 2.6, which has no ``torch.accelerator``.
    """
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None:
        return
    for name, replacement in REPLACEMENTS.items():
        if hasattr(accelerator, name):
            replacement.__doc__ = f"torch.accelerator.{name} for the emulated npu device (see npu_emulator)."
            setattr(accelerator, name, replacement)
