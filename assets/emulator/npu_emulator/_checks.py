"""The checks behind each restriction group (see :mod:`npu_emulator._rules`).

Every check raises :class:`~npu_emulator._errors.EmulatedNPUError` with the real device's message where it is
known, the op that failed, and the source of the rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from npu_emulator import _devices, _generator
from npu_emulator._errors import EmulatedNPUTypeError, restriction_error
from npu_emulator._rules import ENABLED

aten = torch.ops.aten

_MISMATCH = "Expected all tensors to be on the same device, but found at least two devices, {} and {}!"
_DOUBLE = "Unsupport data type: at::ScalarType::Double"
_HALF = (torch.float16, torch.bfloat16)

#: Ops Huawei's per-API table lists without float64 (NPU-FACTS.md, "dtypes"); matmul reaches aten as mm/bmm/...
FLOAT64_MISSING = frozenset(
    {
        aten.cumsum,
        aten.cumsum_,
        aten.exp,
        aten.exp_,
        aten.log,
        aten.log_,
        aten.mean,
        aten.max,
        aten.min,
        aten.gather,
        aten.index_select,
        aten.clamp,
        aten.clamp_,
        aten.clamp_min,
        aten.clamp_min_,
        aten.clamp_max,
        aten.clamp_max_,
        aten.multinomial,
        aten.nan_to_num,
        aten.nan_to_num_,
        aten.mm,
        aten.bmm,
        aten.addmm,
        aten.addmm_,
        aten.baddbmm,
        aten.addbmm,
        aten.mv,
        aten.addmv,
        aten.dot,
    }
)

#: Random ops: on the emulated device they draw from the device's own generator (torch.npu.manual_seed).
RANDOM_OPS = frozenset(
    {
        aten.normal,
        aten.normal_,
        aten.uniform_,
        aten.random_,
        aten.bernoulli,
        aten.bernoulli_,
        aten.multinomial,
        aten.exponential_,
        aten.geometric_,
        aten.log_normal_,
        aten.cauchy_,
        aten.randperm,
        aten.native_dropout,
        aten.rrelu_with_noise,
        aten.poisson,
        aten._standard_gamma,
        aten._sample_dirichlet,
        aten.binomial,
    }
)

# The device's random state lives in its own generator (CPU state, device npu:0: torch.npu.default_generators[0]),
# swapped in around random ops.
DEVICE_GENERATOR = _generator.device_generator(0)
DEVICE_GENERATOR.manual_seed(torch.initial_seed())


def device_mismatch(func: Any, index: int = 0) -> None:
    if ENABLED["device_mismatch"]:
        detail = f"{func} got an npu tensor and a CPU tensor that is not a 0-dim scalar"
        raise restriction_error("device_mismatch", _MISMATCH.format(f"npu:{index}", "cpu"), detail)


def devices_mismatch(func: Any, first: int, other: int) -> None:
    """Tensors of two emulated devices in one op: torch's same-device check, as between two CUDA devices."""
    if ENABLED["device_mismatch"]:
        detail = (
            f"{func} got tensors on npu:{first} and npu:{other}; each process (rank) works on its own device: "
            f"copy with .to(npu:{first}) first, or put the whole model and batch on one device"
        )
        raise restriction_error("device_mismatch", _MISMATCH.format(f"npu:{first}", f"npu:{other}"), detail)


def index_device(func: Any, args: tuple[Any, ...], index: int = 0) -> None:
    from npu_emulator._tensor import NPUTensor

    if args and not isinstance(args[0], NPUTensor):
        # A CPU tensor indexed with npu indices: torch's own same-device rule.
        device_mismatch(func, index)
        return
    if ENABLED["index_device"]:
        detail = f"{func}: an npu tensor indexed with CPU index tensors; move the indices to the npu first"
        raise restriction_error("index_device", _MISMATCH.format(f"npu:{index}", "cpu"), detail)


def numpy_error(message: str) -> EmulatedNPUTypeError:
    return restriction_error("numpy", message, "Tensor.numpy() on an npu tensor", EmulatedNPUTypeError)


def check_device_index(device: torch.device, func: Any) -> int:
    """The index ``device`` (an npu device) stands for: its own, or the current device for a bare ``npu``."""
    index = device.index
    if index is None:
        return _devices.current()
    if index == 0 or index < _devices.count():
        return index
    return _devices.check(index, func)


def is_float64(dtype: object) -> bool:
    """True for float64. Not ``dtype is torch.float64``: a runtime patch may rebind ``torch.float64``."""
    return isinstance(dtype, torch.dtype) and dtype.is_floating_point and dtype.itemsize == 8


def _float64(func: Any, args: list[Any], kwargs: dict[str, Any], npu_dtypes: list[torch.dtype]) -> None:
    del args
    if not ENABLED["float64"]:
        return
    if any(is_float64(dtype) for dtype in npu_dtypes) or is_float64(kwargs.get("dtype")):
        detail = f"{func} has no float64 kernel on Ascend (Tensor.double() or float64 data on the device)"
        raise restriction_error("float64", _DOUBLE, detail)


def _nan_to_num(func: Any, args: list[Any], kwargs: dict[str, Any], npu_dtypes: list[torch.dtype]) -> None:
    _float64(func, args, kwargs, npu_dtypes)
    if ENABLED["nan_to_num_half"] and npu_dtypes and npu_dtypes[0] in _HALF:
        real = f"nan_to_num does not support at::ScalarType::{_scalar_type_name(npu_dtypes[0])} on the npu device"
        detail = f"{func} on a {npu_dtypes[0]} npu tensor; compute in float32 and cast back"
        raise restriction_error("nan_to_num_half", real, detail)


def _is_fractional(exponent: Any) -> bool:
    if isinstance(exponent, torch.Tensor):
        if exponent.dim() != 0 or not exponent.is_floating_point():
            return False
        exponent = exponent.item()
    if isinstance(exponent, float):
        return math.isfinite(exponent) and not exponent.is_integer()
    return False


def _pow(func: Any, args: list[Any], kwargs: dict[str, Any], npu_dtypes: list[torch.dtype]) -> None:
    del kwargs
    if not ENABLED["pow_fractional"] or len(args) < 2 or not npu_dtypes:
        return
    base, exponent = args[0], args[1]
    if not isinstance(base, torch.Tensor):
        return
    dtype = base.dtype
    if (dtype in _HALF or not (dtype.is_floating_point or dtype.is_complex)) and _is_fractional(exponent):
        name = _scalar_type_name(dtype)
        real = f"pow with a fractional exponent does not support at::ScalarType::{name} on the npu device"
        detail = f"{func} on a {dtype} npu tensor with exponent {float(exponent)}; cast the base to float32 first"
        raise restriction_error("pow_fractional", real, detail)


def _scalar_type_name(dtype: torch.dtype) -> str:
    # Keyed by name: a runtime patch may rebind torch.float64 to torch.float32.
    names = {
        "torch.float16": "Half",
        "torch.bfloat16": "BFloat16",
        "torch.float32": "Float",
        "torch.float64": "Double",
        "torch.int64": "Long",
        "torch.int32": "Int",
        "torch.int16": "Short",
        "torch.int8": "Char",
        "torch.uint8": "Byte",
        "torch.bool": "Bool",
    }
    return names.get(str(dtype), str(dtype).removeprefix("torch."))


Rule = Callable[[Any, list[Any], dict[str, Any], list[torch.dtype]], None]

OP_RULES: dict[Any, Rule] = dict.fromkeys(FLOAT64_MISSING, _float64)
OP_RULES[aten.nan_to_num] = _nan_to_num
OP_RULES[aten.nan_to_num_] = _nan_to_num
OP_RULES[aten.pow] = _pow
OP_RULES[aten.pow_] = _pow

ACCEPTED_MASK_SHAPES = "[B,N,Sq,Skv], [B,1,Sq,Skv], [1,1,Sq,Skv], [Sq,Skv]"


def sdpa_mask(query: torch.Tensor, key: torch.Tensor, attn_mask: torch.Tensor | None) -> None:
    """Reject the bool mask shapes aclnnFlashAttentionScore does not accept (NPU-FACTS.md, "Attention")."""
    if not ENABLED["sdpa_mask"] or attn_mask is None or attn_mask.dtype is not torch.bool:
        return
    if query.dim() != 4 or query.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return
    batch, heads, sq = query.shape[0], query.shape[1], query.shape[2]
    skv = key.shape[-2]
    shape = tuple(attn_mask.shape)
    accepted = {(batch, heads, sq, skv), (batch, 1, sq, skv), (1, 1, sq, skv), (sq, skv)}
    if shape in accepted:
        return
    real = "call aclnnFlashAttentionScore failed, error code is 561103 ... get unsupported atten_mask shape"
    detail = (
        f"F.scaled_dot_product_attention with bool attn_mask {list(shape)} for query {list(query.shape)}; "
        f"accepted mask shapes are {ACCEPTED_MASK_SHAPES}: expand the mask first"
    )
    raise restriction_error("sdpa_mask", real, detail)


def run_random(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Run a random op drawing from the device generator instead of the CPU default generator."""
    cpu = torch.default_generator
    saved = cpu.get_state()
    cpu.set_state(DEVICE_GENERATOR.get_state())
    try:
        return func(*args, **kwargs)
    finally:
        DEVICE_GENERATOR.set_state(cpu.get_state())
        cpu.set_state(saved)
