"""Autocast for the emulated device: ``torch.autocast("npu", dtype=...)``.

Ops not listed fall through the AutocastPrivateUse1 key unchanged; float64 tensors are never cast (as on
CUDA). The lists follow torch's CUDA autocast lists
(torch_npu mirrors them): matmul-like ops run in the autocast dtype, numerically sensitive ops in float32.
"""

from __future__ import annotations

from typing import Any

import torch

_KEY = torch._C.DispatchKey.AutocastPrivateUse1
_EXCLUDE = torch._C.DispatchKeySet(_KEY)

LOWER_PRECISION = (
    "mm",
    "bmm",
    "addmm",
    "addbmm",
    "baddbmm",
    "mv",
    "addmv",
    "matmul",
    "linear",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "prelu",
    "scaled_dot_product_attention",
)
FLOAT32 = (
    "acos",
    "asin",
    "cosh",
    "erfinv",
    "exp",
    "expm1",
    "log",
    "log10",
    "log2",
    "log1p",
    "reciprocal",
    "rsqrt",
    "sinh",
    "tan",
    "pow",
    "softplus",
    "layer_norm",
    "group_norm",
    "norm",
    "cosine_similarity",
    "nll_loss",
    "cross_entropy_loss",
    "mse_loss",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "binary_cross_entropy_with_logits",
    "kl_div",
    "softmax",
    "log_softmax",
    "cumsum",
    "cumprod",
    "sum",
    "prod",
    "logsumexp",
)


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        if (
            value.is_floating_point()
            and value.device.type == "npu"
            and value.dtype is not dtype
            and value.dtype.itemsize != 8  # float64 is never cast
        ):
            return value.to(dtype)
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(item, dtype) for item in value)
    return value


def _autocast_dtype() -> torch.dtype:
    """The npu autocast dtype: torch.get_autocast_dtype (torch >= 2.4), else the backend module's."""
    generic = getattr(torch, "get_autocast_dtype", None)
    if generic is not None:
        return generic("npu")
    return torch.npu.get_autocast_dtype()  # type: ignore[attr-defined]


def _kernel(op: Any, lower: bool) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        dtype = _autocast_dtype() if lower else torch.float32
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*_cast(args, dtype), **{k: _cast(v, dtype) for k, v in kwargs.items()})

    return kernel


def register(lib: torch.library.Library, global_lib: torch.library.Library) -> None:
    """Register the fallthrough and the casting kernels on AutocastPrivateUse1."""
    if hasattr(global_lib, "fallback"):
        global_lib.fallback(torch.library.fallthrough_kernel, dispatch_key="AutocastPrivateUse1")
    else:  # torch < 2.3: no Library.fallback; its dispatcher module registers the same fallthrough
        global_lib.m.fallback_fallthrough("AutocastPrivateUse1")
    for names, lower in ((LOWER_PRECISION, True), (FLOAT32, False)):
        for name in names:
            packet = getattr(torch.ops.aten, name, None)
            if packet is None:
                continue
            for overload in packet.overloads():
                if "out" in overload.split("_"):
                    continue
                op = getattr(packet, overload)
                qualified = name if overload == "default" else f"{name}.{overload}"
                lib.impl(qualified, _kernel(op, lower), "AutocastPrivateUse1")
