"""``torch.Generator(device="npu")``: a generator of the emulated device.

torch creates a device generator through the backend's hooks (``getNewGenerator``), which a Python backend cannot
implement. The emulated device computes on the CPU, so its generator is a CPU generator (``manual_seed``, ``seed``,
``initial_seed``, ``get_state``, ``set_state`` as there) whose ``device`` says ``npu:N``. Random ops on device tensors draw from it as they do from a real device generator; the numbers are
the CPU's, not an Ascend NPU's.

``torch.Generator`` becomes a subclass of torch's class that builds plain generators for every other device:
``isinstance(g, torch.Generator)`` holds for every generator, and ``torch._C.Generator`` is unchanged.
"""

from __future__ import annotations

from typing import Any

import torch

from npu_emulator import _devices

_BASE = torch._C.Generator


class _GeneratorType(type(_BASE)):  # type: ignore[misc]
    """``isinstance``/``issubclass`` against the replaced ``torch.Generator`` answer for every generator."""

    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, _BASE)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, _BASE)


class Generator(_BASE, metaclass=_GeneratorType):  # type: ignore[misc]
    """``torch.Generator``: a generator on ``device`` (``"npu"``/``"npu:N"``: the emulated device's)."""

    def __new__(cls, device: Any = None) -> Any:
        target = torch.device(device) if device is not None else None
        if target is None or target.type != "npu":
            return _BASE(device) if device is not None else _BASE()
        index = _devices.check(target.index, "torch.Generator") if target.index is not None else _devices.current()
        return device_generator(index)


def device_generator(index: int) -> NPUGenerator:
    """A new generator of ``npu:index`` (CPU random state)."""
    generator = _BASE.__new__(NPUGenerator, "cpu")
    generator._npu_index = index
    return generator


class NPUGenerator(_BASE):  # type: ignore[misc]
    """A generator of the emulated ``npu:N``: CPU random state, device ``npu:N``."""

    _npu_index: int

    def __init__(self, device: Any = None) -> None:
        del device

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("npu", self._npu_index)

    def __reduce__(self) -> Any:
        return (_rebuild, (self._npu_index, self.get_state()))

    def __repr__(self) -> str:
        return f"<torch._C.Generator object at {hex(id(self))}>"


def _rebuild(index: int, state: torch.Tensor) -> NPUGenerator:
    generator = Generator(f"npu:{index}")
    generator.set_state(state)
    return generator


def install() -> None:
    """Make ``torch.Generator`` create emulated device generators for ``npu`` (once per process)."""
    if torch.Generator is Generator:
        return
    Generator.__doc__ = _BASE.__doc__
    Generator.__module__ = "torch"
    Generator.__qualname__ = Generator.__name__ = "Generator"
    torch.Generator = Generator  # type: ignore[misc]


# The device's random state lives in its own generator (CPU state, device npu:0: torch.npu.default_generators[0]),
# swapped in around random ops (npu_emulator._checks.run_random).
DEVICE_GENERATOR = device_generator(0)
DEVICE_GENERATOR.manual_seed(torch.initial_seed())
