"""Registering the emulated ``npu`` backend with torch (once per process)."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import torch

from npu_emulator import _accelerator, _amp, _backend, _checks, _distributed, _tensor
from npu_emulator._errors import EmulatedNPUError, emulated_message
from npu_emulator._tensor import NPUTensor

_state: dict[str, Any] = {"installed": False, "libs": ()}


def is_installed() -> bool:
    """True once :func:`install` registered the emulated ``npu`` device in this process."""
    return bool(_state["installed"])


def _empty_memory_format(
    size: list[int],
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
    memory_format: torch.memory_format | None = None,
) -> torch.Tensor:
    del layout, pin_memory
    index = None if device is None else _checks.check_device_index(torch.device(device), "aten.empty.memory_format")
    return NPUTensor(torch.empty(size, dtype=dtype, memory_format=memory_format), index=index)


def _empty_strided(
    size: list[int],
    stride: list[int],
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> torch.Tensor:
    del layout, pin_memory
    index = None if device is None else _checks.check_device_index(torch.device(device), "aten.empty_strided")
    return NPUTensor(torch.empty_strided(size, stride, dtype=dtype), index=index)


def _indices_factory(op: Any) -> Any:
    def kernel(row: int, col: int, offset: int = 0, **kwargs: Any) -> torch.Tensor:
        device = kwargs.get("device")
        index = None if device is None else _checks.check_device_index(torch.device(device), op)
        kwargs["device"] = torch.device("cpu")
        return NPUTensor(op(row, col, offset, **kwargs), index=index)

    return kernel


# Ops that torch may call on device tensors with the Python dispatch key excluded (e.g. torch.tensor(...,
# device="npu")): route them to the same handler as every other op.
_BYPASSING_PYTHON_KEY = ("_copy_from", "_copy_from_and_resize", "copy_", "_to_copy", "_local_scalar_dense")


def _via_dispatch(op: Any) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        return NPUTensor.__torch_dispatch__(op, (), args, kwargs)

    return kernel


def _pin_memory(tensor: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    """Pinned host memory is not emulated: ``pin_memory()`` (DataLoader(pin_memory=True)) returns a copy."""
    del device
    return tensor.clone()


def _sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    _checks.sdpa_mask(query, key, attn_mask)
    if attn_mask is not None and attn_mask.dtype is torch.bool:
        # As SDPA's own entry point does before its math kernel: True = keep becomes 0, False becomes -inf.
        float_mask = torch.zeros_like(attn_mask, dtype=query.dtype)
        attn_mask = float_mask.masked_fill_(attn_mask.logical_not(), float("-inf"))
    out = torch.ops.aten._scaled_dot_product_attention_math(
        query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
    )
    return out[0]


def install() -> None:
    """Register the emulated ``npu`` device type and the ``torch.npu`` module (idempotent).

    Raises :class:`EmulatedNPUError` when torch is too old for Python backends or when another backend already
    owns PrivateUse1 (e.g. the real ``torch_npu`` was imported).
    """
    if _state["installed"]:
        return
    setup = getattr(torch.utils.backend_registration, "_setup_privateuseone_for_python_backend", None)
    if setup is None:
        detail = f"torch {torch.__version__} lacks Python PrivateUse1 backends"
        raise EmulatedNPUError(emulated_message("cannot install", detail, "the emulator needs torch >= 2.10"))
    owner = torch._C._get_privateuse1_backend_name()
    if owner != "privateuseone":
        detail = f"PrivateUse1 is already registered as {owner!r} (the real torch_npu, or another backend)"
        raise EmulatedNPUError(emulated_message("cannot install", detail, "torch allows one rename per process"))

    setup(rename="npu", backend_module=_backend.npu)
    _tensor.DEVICE = torch.device("npu", 0)
    _backend.register_modules()

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("empty.memory_format", _empty_memory_format, "PrivateUse1")
    lib.impl("empty_strided", _empty_strided, "PrivateUse1")
    lib.impl("tril_indices", _indices_factory(torch.ops.aten.tril_indices.default), "PrivateUse1")
    lib.impl("triu_indices", _indices_factory(torch.ops.aten.triu_indices.default), "PrivateUse1")
    for name in _BYPASSING_PYTHON_KEY:
        lib.impl(name, _via_dispatch(getattr(torch.ops.aten, name).default), "PrivateUse1")
    lib.impl("scaled_dot_product_attention", _sdpa, "AutogradPrivateUse1")
    with warnings.catch_warnings():
        # Replaces torch's CPU kernel, which would ask the npu hooks for a pinned allocator they cannot give.
        warnings.simplefilter("ignore")
        lib.impl("_pin_memory", _pin_memory, "CPU")
    global_lib = torch.library.Library("_", "IMPL")
    _amp.register(lib, global_lib)
    _accelerator.install()
    _enable_foreach()
    _state["libs"] = (lib, global_lib)
    _state["installed"] = True
    _state["single_threaded_autograd"] = _settle_autograd_engine()
    _distributed.install()


def _enable_foreach() -> None:
    """Let optimizers and clip_grad_norm_ take their multi-tensor (foreach) paths for device tensors.

    torch checks ``type(p)`` against a list of plain tensor types; on a real device the parameters are plain
    tensors, so the default there is foreach (NPU-FACTS.md, "Optimizers": stock AdamW is multi-tensor).
    """
    for name in ("torch.optim.optimizer", "torch.utils._foreach_utils"):
        supported = importlib.import_module(name)._foreach_supported_types
        if NPUTensor not in supported:
            supported.append(NPUTensor)


def _settle_autograd_engine() -> bool:
    """Make backward() work on the device; True when autograd had to be switched to the calling thread.

    The autograd engine sizes its per-device queues once, at the first backward() of the process. If that happened
    before install() (a CPU backward), the engine has no queue for npu:0; then autograd multithreading is turned
    off for the installing thread, so device backward passes run on the calling thread instead (as on CPU).
    """
    probe = NPUTensor(torch.ones(1), requires_grad=True)
    try:
        (probe * 2).sum().backward()
    except RuntimeError as error:
        if "device_ready_queues_" not in str(error):
            raise
        torch._C._set_multithreading_enabled(False)
        probe.grad = None
        (probe * 2).sum().backward()
        return True
    return False
