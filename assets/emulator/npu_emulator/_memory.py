"""The memory-allocator parts of ``torch.npu`` (torch-npu 2.14.0 ``npu/memory.py``, ``npu/utils.py``,
``npu/__init__.py``), with the argument checks torch_npu makes.

Device memory is host memory and is not modelled: the statistics are zero, ``mem_get_info`` reports the host's
memory, ``utilization`` 0. ``caching_allocator_alloc`` really allocates (host memory) so that the pointer it
returns can be used and freed. Streams are npu_emulator/_streams.py.
"""

from __future__ import annotations

import collections
from typing import Any

import torch

from npu_emulator import _devices
from npu_emulator._errors import EmulatedNPUError, emulated_message

_FRACTION: dict[int, float] = {}
_ALLOCATIONS: dict[int, torch.Tensor] = {}
_SYNC_DEBUG = {"mode": 0}

_STAT_KINDS = ("allocated", "allocated_bytes", "segment", "reserved_bytes", "active", "active_bytes",
               "inactive_split", "inactive_split_bytes", "requested_bytes")  # fmt: skip
_POOLS = ("all", "large_pool", "small_pool")
_METRICS = ("current", "peak", "allocated", "freed")


_index = _devices.index_of


def _checked_index(device: Any) -> int:
    """torch_npu's ``utilization``/``mem_get_info`` check: an AssertionError for a device index out of range."""
    index = device if isinstance(device, int) else None
    if index is None:
        return _index(device)
    if index < 0 and device is not None:
        index = _devices.current()
    if index >= _devices.count():
        msg = "Invalid device id"
        raise AssertionError(msg)
    return index


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Stored per device (the emulator allocates host memory and never limits it)."""
    index = _index(device)
    if not isinstance(fraction, float):
        msg = "Invalid type for fraction argument, must be `float`"
        raise TypeError(msg)
    if fraction < 0 or fraction > 1:
        msg = f"Invalid fraction value: {fraction}. Allowed range: 0~1"
        raise ValueError(msg)
    _FRACTION[index] = fraction


def get_per_process_memory_fraction(device: Any = None) -> float:
    return _FRACTION.get(_index(device), 1.0)


def utilization(device: Any = None) -> int:
    """The device's utilization rate in percent: 0 (nothing runs on an emulated device between calls)."""
    _checked_index(device)
    return 0


def memory_stats(device: Any = None) -> collections.OrderedDict[str, int]:
    """torch_npu's statistics keys, every value 0 (device memory is not modelled)."""
    _index(device)
    stats: collections.OrderedDict[str, int] = collections.OrderedDict()
    for kind in _STAT_KINDS:
        for pool in _POOLS:
            for metric in _METRICS:
                stats[f"{kind}.{pool}.{metric}"] = 0
    for name in ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free"):
        stats[name] = 0
    return collections.OrderedDict(sorted(stats.items()))


def memory_stats_as_nested_dict(device: Any = None) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for key, value in memory_stats(device).items():
        node = nested
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return nested


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    del abbreviated
    index = _index(device)
    return (
        f"|  NPU memory summary, device ID {index} (emulated npu: device memory is host memory and is not "
        "modelled; every statistic is 0)  |\n"
    )


def memory_snapshot(mempool_id: Any = None) -> list[Any]:
    del mempool_id
    return []


def get_allocator_backend() -> str:
    return "native"


def caching_allocator_alloc(size: int, device: Any = None, stream: Any = None) -> int:
    """Allocate ``size`` bytes (host memory) and return their address; free it with ``caching_allocator_delete``."""
    del stream
    _index(device)
    block = torch.empty(max(int(size), 1), dtype=torch.uint8)
    pointer = block.data_ptr()
    _ALLOCATIONS[pointer] = block
    return pointer


def caching_allocator_delete(mem_ptr: int) -> None:
    if _ALLOCATIONS.pop(int(mem_ptr), None) is None:
        msg = emulated_message(
            f"invalid device pointer: {mem_ptr}",
            "caching_allocator_delete of an address caching_allocator_alloc did not return",
            "torch-npu 2.14.0 npu/memory.py",
        )
        raise EmulatedNPUError(msg)


def can_device_access_peer(device_id: Any, peer_device_id: Any) -> bool:
    """Every emulated device is host memory: each reaches every other one (torch_npu's parameter names)."""
    _index(device_id)
    _index(peer_device_id)
    return True


def set_sync_debug_mode(debug_mode: Any) -> None:
    modes = {"default": 0, "warn": 1, "error": 2}
    _SYNC_DEBUG["mode"] = modes.get(debug_mode, debug_mode) if isinstance(debug_mode, str) else int(debug_mode)


def get_sync_debug_mode() -> int:
    return int(_SYNC_DEBUG["mode"])


PUBLIC = (
    set_per_process_memory_fraction, get_per_process_memory_fraction, utilization, memory_stats,
    memory_stats_as_nested_dict, memory_summary, memory_snapshot, get_allocator_backend, caching_allocator_alloc,
    caching_allocator_delete, can_device_access_peer, set_sync_debug_mode, get_sync_debug_mode,
)  # fmt: skip
