"""How many emulated devices this process has, and which one is current.

``NPU_EMULATOR_DEVICE_COUNT`` (default 1) sets the number of devices, ``npu:0`` to ``npu:{count-1}``; every one is
host memory. The current device starts at 0, as on a real NPU, and changes only with ``torch.npu.set_device`` (or
the ``torch.npu.device`` context manager): a rank that never sets its device puts its tensors on ``npu:0``.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

from npu_emulator._errors import EmulatedNPUError, emulated_message

COUNT_ENV = "NPU_EMULATOR_DEVICE_COUNT"

_state = {"current": 0, "count": None}


def count() -> int:
    """The number of emulated devices: ``NPU_EMULATOR_DEVICE_COUNT`` read once (a bad value gives 1)."""
    cached = _state["count"]
    if cached is None:
        raw = os.environ.get(COUNT_ENV, "").strip()
        cached = int(raw) if raw.isdigit() and int(raw) >= 1 else 1
        _state["count"] = cached
    return cached


def current() -> int:
    return _state["current"]


def set_current(index: int) -> None:
    _state["current"] = check(index, "torch.npu.set_device")


def index_of(device: Any = None) -> int:
    """The device index ``device`` names (None or a bare ``"npu"``: the current device), checked against the
    emulated device count (the device argument of the ``torch.npu`` API)."""
    if device is None:
        return current()
    if isinstance(device, int):
        index = device
    else:
        parsed = torch.device(device)
        if parsed.type != "npu":
            msg = emulated_message(
                f"Expected an npu device, got {parsed}", "torch.npu device argument", "torch.npu API"
            )
            raise EmulatedNPUError(msg)
        index = parsed.index
    return check(index, "torch.npu")


def check(index: int | None, what: object) -> int:
    """``index`` (None: the current device) when this process has that device; else the real device's error."""
    if index is None:
        return _state["current"]
    total = count()
    if 0 <= index < total:
        return index
    have = "only npu:0" if total == 1 else f"npu:0 to npu:{total - 1}"
    detail = f"{what} asked for npu:{index}; the emulator has {have} (set {COUNT_ENV} for more)"
    raise EmulatedNPUError(emulated_message(f"Invalid device id {index}", detail, f"the emulator ({COUNT_ENV})"))


def install_current_device_to() -> None:
    """With more than one device, ``Tensor.to("npu")`` and ``torch.tensor(..., device="npu")`` go to the current
    device, as on a real NPU.

    torch completes a bare ``npu`` in ``Tensor.to`` with the device guard's index, which is always 0 for a
    Python backend; factories (``torch.zeros(..., device="npu")``) already reach the emulator without an index.
    """
    if count() <= 1 or getattr(torch.Tensor.to, "_npu_emulator_current", False):
        return
    original = torch.Tensor.to

    @functools.wraps(original)
    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if args and _bare_npu(args[0]):
            args = (torch.device("npu", _state["current"]), *args[1:])
        elif _bare_npu(kwargs.get("device")):
            kwargs["device"] = torch.device("npu", _state["current"])
        return original(self, *args, **kwargs)

    to._npu_emulator_current = True  # type: ignore[attr-defined]
    torch.Tensor.to = to  # type: ignore[method-assign]
    # torch.tensor / as_tensor copy the data with the same completion in C++.
    for name in ("tensor", "as_tensor"):
        setattr(torch, name, _current_device_kwarg(getattr(torch, name)))


def _current_device_kwarg(function: Any) -> Any:
    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        if _bare_npu(kwargs.get("device")):
            kwargs["device"] = torch.device("npu", _state["current"])
        return function(*args, **kwargs)

    return call


def _bare_npu(value: object) -> bool:
    if isinstance(value, str):
        return value == "npu"
    return isinstance(value, torch.device) and value.type == "npu" and value.index is None
