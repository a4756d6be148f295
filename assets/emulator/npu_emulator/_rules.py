"""The restriction groups of the emulated device and their on/off switches.

Each group is one behaviour of a real Ascend NPU that CPU torch does not have. All groups start enabled; the
environment variable ``NPU_EMULATOR_DISABLE`` (comma-separated group names) turns groups off at import time, and
:func:`set_restriction` / :func:`restrictions` do it at run time (tests use them to show that a check is what makes
a call fail).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

#: group name -> (what it enforces, where the rule comes from)
RESTRICTIONS: dict[str, tuple[str, str]] = {
    "device_mismatch": (
        "an op mixing npu tensors with CPU tensors that are not 0-dim scalars, or tensors of two npu devices, fails",
        "torch's same-device check (as on CUDA; CPU 0-dim scalars are allowed)",
    ),
    "index_device": (
        "indexing an npu tensor with CPU index tensors fails",
        "SKILL.md, Runtime Patches, TensorIndexDevice row (the failure it fixes)",
    ),
    "numpy": (
        ".numpy() on an npu tensor fails",
        "torch's .numpy() check for non-CPU tensors (as on CUDA)",
    ),
    "float64": (
        "float64 compute fails in the ops whose aclnn kernel's dtype list lacks DOUBLE (max/min with dim, nan_to_num, "
        "the matmul family); a dtype-only cast of a device tensor to float64 gives float32 with torch_npu's warning",
        "op_dtypes.json (from torch-npu/op_dtypes.json: op-plugin kernel per op, CANN aclnn dtype list per kernel); "
        "ToKernelNpu.cpp _to_copy",
    ),
    "sdpa_mask": (
        "F.scaled_dot_product_attention with a broadcast bool mask fails with error code 561103",
        "NPU-FACTS.md, 'Attention' (aclnnFlashAttentionScore error code 561103)",
    ),
    "nan_to_num_half": (
        "torch.nan_to_num on float16/bfloat16 npu tensors fails",
        "SKILL.md, Runtime Patches, NanToNumSafe row (the failure it fixes)",
    ),
    "pow_fractional": (
        "torch.pow with a fractional exponent on an integer or half-precision npu tensor fails",
        "SKILL.md, Runtime Patches, PowFloatSafe row (the failure it fixes)",
    ),
}

ENV_DISABLE = "NPU_EMULATOR_DISABLE"


def _initial_state() -> dict[str, bool]:
    state = dict.fromkeys(RESTRICTIONS, True)
    for raw in os.environ.get(ENV_DISABLE, "").split(","):
        name = raw.strip()
        if not name:
            continue
        if name not in state:
            known = ", ".join(RESTRICTIONS)
            msg = f"{ENV_DISABLE}: unknown restriction group {name!r}; known groups: {known}"
            raise ValueError(msg)
        state[name] = False
    return state


# Read on every dispatched op; a plain dict lookup keeps that cheap.
ENABLED: dict[str, bool] = _initial_state()


def _check_name(name: str) -> None:
    if name not in RESTRICTIONS:
        known = ", ".join(RESTRICTIONS)
        msg = f"unknown restriction group {name!r}; known groups: {known}"
        raise ValueError(msg)


def set_restriction(name: str, enabled: bool) -> None:
    """Turn one restriction group on or off for the whole process."""
    _check_name(name)
    ENABLED[name] = bool(enabled)


def enabled_restrictions() -> frozenset[str]:
    """The names of the restriction groups that are on now."""
    return frozenset(name for name, on in ENABLED.items() if on)


@contextlib.contextmanager
def restrictions(**groups: bool) -> Iterator[None]:
    """Temporarily set restriction groups, e.g. ``with restrictions(float64=False): ...``."""
    for name in groups:
        _check_name(name)
    saved = dict(ENABLED)
    try:
        for name, on in groups.items():
            ENABLED[name] = bool(on)
        yield
    finally:
        ENABLED.clear()
        ENABLED.update(saved)
