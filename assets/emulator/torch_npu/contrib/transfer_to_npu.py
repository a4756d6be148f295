"""``from torch_npu.contrib import transfer_to_npu``: remap CUDA to the npu device for the rest of the process.

When the torch-npu wheel that pairs with this torch is extracted in the cache (``cargo xtask torch-npu``), this
module runs that wheel's own ``contrib/transfer_to_npu.py`` over the emulated device (``_real_transfer``), and
``SOURCE`` says so (``"torch-npu 2.14.0 contrib/transfer_to_npu.py"``). Otherwise (offline, no cache, a torch
that no pinned wheel pairs with, or ``NPU_EMULATOR_TRANSFER=standin``) the stand-in below runs and ``SOURCE`` is
``"stand-in"``.

What the stand-in remaps (NPU-FACTS.md, "torch_npu basics"): "cuda" device arguments of the torch factory functions,
``Tensor.to`` / ``Module.to`` (including an int device), ``.cuda()`` -> ``.npu()``, ``is_cuda`` -> ``is_npu``,
the ``torch.cuda`` functions -> ``torch.npu`` (including ``amp``), ``nccl`` -> ``hccl`` in
``torch.distributed.init_process_group`` (and ``is_nccl_available`` answers as ``is_hccl_available``), and
``torch.jit.script`` becomes a no-op. Like the real module it does
NOT fix string comparisons (``device.type == "cuda"``), ``torch.device(0)`` or other positional int devices
outside ``.to()``. DDP/FSDP/DeviceMesh are not remapped by this stand-in. There is no undo: import it in the
process that should run remapped.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed

import torch_npu
from torch_npu.contrib import _real_transfer

# The torch functions whose device arguments torch-npu 2.14.0 remaps (its torch_fn_white_list; the table
# of the project's remap facts, checked against the wheel by its test suite, must agree).
FACTORIES = (
    "_cudnn_init_dropout_state", "_empty_affine_quantized", "_empty_per_channel_affine_quantized", "_pin_memory",
    "_sparse_coo_tensor_unsafe", "_sparse_csr_tensor_unsafe", "arange", "as_tensor", "bartlett_window",
    "blackman_window", "empty", "empty_like", "empty_quantized", "empty_strided", "eye", "from_file", "frombuffer",
    "full", "full_like", "get_device_module", "hamming_window", "hann_window", "kaiser_window", "linspace", "load",
    "logspace", "normal", "ones", "ones_like", "rand", "rand_like", "randint", "randint_like", "randn", "randn_like",
    "randperm", "range", "scalar_tensor", "set_default_device", "sparse_compressed_tensor", "sparse_coo_tensor",
    "sparse_csr_tensor", "tensor", "tril_indices", "triu_indices", "zeros", "zeros_like",
)  # fmt: skip

DEVICE_KEYWORDS = ("device", "device_id", "device_type", "map_location")

_CUDA_ATTRIBUTES = (
    "is_available", "device_count", "current_device", "set_device", "synchronize", "empty_cache", "manual_seed",
    "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state", "set_rng_state", "get_rng_state_all",
    "set_rng_state_all", "is_bf16_supported", "get_device_name", "get_device_properties", "get_device_capability",
    "mem_get_info", "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "reset_peak_memory_stats", "reset_max_memory_allocated", "device", "Stream", "Event", "current_stream",
    "default_stream", "stream", "is_initialized", "init", "set_stream", "StreamContext",
    "set_per_process_memory_fraction", "get_per_process_memory_fraction", "utilization", "memory_stats",
    "memory_stats_as_nested_dict", "memory_summary", "memory_snapshot", "caching_allocator_alloc",
    "caching_allocator_delete", "reset_accumulated_memory_stats", "can_device_access_peer", "get_allocator_backend",
    "memory_cached", "max_memory_cached", "reset_max_memory_cached", "set_sync_debug_mode", "get_sync_debug_mode",
)  # fmt: skip


def to_npu_device(device: Any, *, allow_int: bool = False) -> Any:
    """Map a CUDA device spec ("cuda", "cuda:1", torch.device("cuda")) to the same npu device."""
    if isinstance(device, str) and (device == "cuda" or device.startswith("cuda:")):
        return "npu" + device[4:]
    if isinstance(device, torch.device) and device.type == "cuda":
        return torch.device("npu", device.index)
    if allow_int and isinstance(device, int) and not isinstance(device, bool):
        return torch.device("npu", device)
    return device


def _device_kwarg(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def remapped(*args: Any, **kwargs: Any) -> Any:
        args = tuple(to_npu_device(a) for a in args)
        for keyword in DEVICE_KEYWORDS:
            if keyword in kwargs:
                kwargs[keyword] = to_npu_device(kwargs[keyword])
        return function(*args, **kwargs)

    remapped.__wrapped_by_transfer_to_npu__ = True  # type: ignore[attr-defined]
    return remapped


def _to_method(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        args = tuple(to_npu_device(a, allow_int=True) for a in args)
        if "device" in kwargs:
            kwargs["device"] = to_npu_device(kwargs["device"], allow_int=True)
        return method(self, *args, **kwargs)

    return to


def _tensor_cuda(self: torch.Tensor, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
    del kwargs
    target = torch.device("npu", 0 if device is None else to_npu_device(device, allow_int=True).index or 0)
    return self.to(target, non_blocking=non_blocking)


def _module_cuda(self: torch.nn.Module, device: Any = None) -> torch.nn.Module:
    index = 0 if device is None else to_npu_device(device, allow_int=True).index or 0
    return self.to(torch.device("npu", index))


def _init_process_group(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if args and isinstance(args[0], str):
            args = (args[0].replace("nccl", "hccl"), *args[1:])
        if isinstance(kwargs.get("backend"), str):
            kwargs["backend"] = kwargs["backend"].replace("nccl", "hccl")
        return function(*args, **kwargs)

    return init_process_group


def _script(obj: Any = None, *args: Any, **kwargs: Any) -> Any:
    """``torch.jit.script`` under transfer_to_npu: returns its argument unchanged."""
    del args, kwargs
    return obj


def _apply() -> None:
    if getattr(torch, "_npu_transfer_applied", False):
        return
    for name in dict.fromkeys(FACTORIES):
        function = getattr(torch, name, None)
        if function is not None:
            setattr(torch, name, _device_kwarg(function))
    torch.Tensor.to = _to_method(torch.Tensor.to)  # type: ignore[method-assign]
    torch.nn.Module.to = _to_method(torch.nn.Module.to)  # type: ignore[method-assign]
    torch.Tensor.cuda = _tensor_cuda  # type: ignore[method-assign]
    torch.nn.Module.cuda = _module_cuda  # type: ignore[method-assign]
    torch.Tensor.is_cuda = property(lambda self: self.device.type == "npu")  # type: ignore[method-assign,assignment]
    for name in _CUDA_ATTRIBUTES:
        if hasattr(torch_npu.npu, name):
            setattr(torch.cuda, name, getattr(torch_npu.npu, name))
    # The amp classes, not the module: torch internals import submodules of torch.cuda.amp.
    torch.cuda.amp.autocast = torch_npu.npu.amp.autocast
    torch.cuda.amp.GradScaler = torch_npu.npu.amp.GradScaler
    torch.distributed.init_process_group = _init_process_group(torch.distributed.init_process_group)
    if hasattr(torch.distributed, "is_hccl_available"):
        torch.distributed.is_nccl_available = torch.distributed.is_hccl_available
    torch.jit.script = _script  # type: ignore[assignment]
    torch._npu_transfer_applied = True  # type: ignore[attr-defined]


def _run_real(version: str, root: Any) -> str:
    """Run the wheel's own transfer_to_npu.py as this module (its ``__file__`` finds its apis_config.json)."""
    path = root / _real_transfer.TRANSFER
    _real_transfer.prepare(root)
    globals()["__file__"] = str(path)
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), globals())  # noqa: S102
    torch._npu_transfer_applied = True  # type: ignore[attr-defined]
    return f"torch-npu {version} contrib/transfer_to_npu.py"


_real = None if getattr(torch, "_npu_transfer_applied", False) else _real_transfer.locate()
if _real is None:
    SOURCE = "stand-in"
    #: Why the wheel's own module did not run.
    STANDIN_REASON = _real_transfer.why_not()
    _apply()
else:
    SOURCE = _run_real(*_real)
