"""The ``torch.npu`` module surface of the emulated device (the real one comes from ``torch_npu``).

Memory statistics, streams and events exist so that training code runs; they do not model device memory or
asynchrony (the emulator runs every op synchronously on CPU).
"""

from __future__ import annotations

import os
import re
import sys
import types
from typing import Any

import torch

from npu_emulator import _devices, _memory, _streams
from npu_emulator._errors import EmulatedNPUError, emulated_message
from npu_emulator._generator import DEVICE_GENERATOR
from npu_emulator._grad_scaler import GradScaler  # torch_npu's own scaler class (npu/amp/grad_scaler.py)

DEVICE_NAME = "Ascend910B (emulated npu)"

npu = types.ModuleType("torch.npu", "The emulated torch.npu module (see npu_emulator).")
amp = types.ModuleType("torch.npu.amp", "Automatic mixed precision for the emulated npu device.")
config = types.ModuleType("torch.npu.config", "torch_npu runtime switches (stored; no effect on the emulator).")
config.allow_internal_format = False  # type: ignore[attr-defined]

_compile_mode = {"jit_compile": True}


_index = _devices.index_of


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def init() -> None:
    """Nothing to initialise on the emulated device."""


def _lazy_init() -> None:
    """Nothing to initialise on the emulated device."""


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    """``NPU_EMULATOR_DEVICE_COUNT`` devices (default 1), all in host memory."""
    return _devices.count()


def current_device() -> int:
    return _devices.current()


def set_device(device: Any) -> None:
    _devices.set_current(_index(device))


def synchronize(device: Any = None) -> None:
    _index(device)


def empty_cache() -> None:
    """The emulated device has no caching allocator."""


def manual_seed(seed: int) -> None:
    DEVICE_GENERATOR.manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    DEVICE_GENERATOR.manual_seed(int(seed))


def seed() -> None:
    DEVICE_GENERATOR.seed()


def seed_all() -> None:
    DEVICE_GENERATOR.seed()


def initial_seed() -> int:
    return DEVICE_GENERATOR.initial_seed()


def get_rng_state(device: Any = "npu") -> torch.Tensor:
    _index(device)
    return DEVICE_GENERATOR.get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "npu") -> None:
    _index(device)
    DEVICE_GENERATOR.set_state(new_state.cpu())


def get_rng_state_all() -> list[torch.Tensor]:
    # One generator serves every emulated device.
    return [DEVICE_GENERATOR.get_state() for _ in range(_devices.count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    DEVICE_GENERATOR.set_state(new_states[0].cpu())


def is_bf16_supported(including_emulation: bool = False) -> bool:
    del including_emulation
    return True


def get_device_name(device_name: Any = None) -> str:
    _index(device_name)
    return DEVICE_NAME


def _host_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def get_device_properties(device_name: Any = None) -> types.SimpleNamespace:
    _index(device_name)
    return types.SimpleNamespace(name=DEVICE_NAME, total_memory=_host_memory(), multi_processor_count=1)


def get_device_capability(device: Any = None) -> tuple[int, int] | None:
    """None, as on a real NPU, unless ``TORCH_NPU_DEVICE_CAPABILITY="major.minor"`` is set: torch_npu 2.8.0.post5
    and later then return that pair (torch-npu 2.14.0 ``npu/__init__.py``; an unparsable value gives None)."""
    _index(device)
    match = re.fullmatch(r"(\d+)\.(\d+)", os.environ.get("TORCH_NPU_DEVICE_CAPABILITY", "").strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def mem_get_info(device: Any = None) -> tuple[int, int]:
    _index(device)
    total = _host_memory()
    return total, total


def _zero(device: Any = None) -> int:
    _index(device)
    return 0


def reset_peak_memory_stats(device: Any = None) -> None:
    _index(device)


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]


def is_autocast_enabled() -> bool:
    return torch.is_autocast_enabled("npu")


def get_autocast_dtype() -> torch.dtype:
    return torch.get_autocast_dtype("npu")


def set_compile_mode(jit_compile: bool = False) -> None:
    """Stored only: the emulator has no graph compiler (NPU-FACTS.md, "Performance environment")."""
    _compile_mode["jit_compile"] = bool(jit_compile)


def is_jit_compile_false() -> bool:
    return not _compile_mode["jit_compile"]


class device:
    """Context manager making ``device`` the current device, and the previous one current again on exit."""

    def __init__(self, device: Any) -> None:
        # As torch.cuda.device and torch_npu's: None or a negative index selects nothing (a no-op context).
        none = device is None or (isinstance(device, int) and not isinstance(device, bool) and device < 0)
        self.idx = -1 if none else _index(device)
        self.prev_idx = self.idx

    def __enter__(self) -> device:
        if self.idx == -1:
            return self
        self.prev_idx = _devices.current()
        _devices.set_current(self.idx)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.idx != -1:
            _devices.set_current(self.prev_idx)


class autocast(torch.amp.autocast):
    """``torch.npu.amp.autocast``: ``torch.autocast("npu", ...)``."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True) -> None:
        super().__init__("npu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


def custom_fwd(fwd: Any = None, *, cast_inputs: torch.dtype | None = None) -> Any:
    """``torch.npu.amp.custom_fwd``: ``torch.amp.custom_fwd(..., device_type="npu")``."""
    if not _DEVICE_GENERIC_CUSTOM_FWD:
        return _custom_fwd_before_2_4(fwd, cast_inputs)
    return torch.amp.custom_fwd(fwd, device_type="npu", cast_inputs=cast_inputs)


def custom_bwd(bwd: Any) -> Any:
    """``torch.npu.amp.custom_bwd``: ``torch.amp.custom_bwd(..., device_type="npu")``."""
    if not _DEVICE_GENERIC_CUSTOM_FWD:
        return bwd
    return torch.amp.custom_bwd(bwd, device_type="npu")


# torch.amp.custom_fwd/custom_bwd with device_type are torch >= 2.4.
_DEVICE_GENERIC_CUSTOM_FWD = hasattr(torch.amp, "custom_fwd")


def _custom_fwd_before_2_4(fwd: Any, cast_inputs: torch.dtype | None) -> Any:
    """Without torch.amp.custom_fwd: the function unchanged; ``cast_inputs`` is not emulated there."""
    if cast_inputs is not None:
        raise EmulatedNPUError(
            emulated_message(
                "custom_fwd(cast_inputs=...) is not emulated on this torch",
                f"torch {torch.__version__} has no device-generic torch.amp.custom_fwd (torch >= 2.4)",
                "the emulator builds torch.npu.amp.custom_fwd on torch.amp.custom_fwd",
            )
        )
    if fwd is None:
        return lambda function: function
    return fwd


amp.autocast = autocast  # type: ignore[attr-defined]
amp.GradScaler = GradScaler  # type: ignore[attr-defined]
amp.custom_fwd = custom_fwd  # type: ignore[attr-defined]
amp.custom_bwd = custom_bwd  # type: ignore[attr-defined]

_PUBLIC = (
    is_available, is_initialized, init, _lazy_init, _is_in_bad_fork, device_count, current_device, set_device,
    synchronize, empty_cache, manual_seed, manual_seed_all, seed, seed_all, initial_seed, get_rng_state,
    set_rng_state, get_rng_state_all, set_rng_state_all, is_bf16_supported, get_device_name,
    get_device_properties, get_device_capability, mem_get_info,
    reset_peak_memory_stats, get_amp_supported_dtype, is_autocast_enabled, get_autocast_dtype, set_compile_mode,
    is_jit_compile_false, device, *_streams.PUBLIC, *_memory.PUBLIC,
)  # fmt: skip
for _item in _PUBLIC:
    setattr(npu, _item.__name__, _item)
for _name in (
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_cached",
    "max_memory_cached",
):  # fmt: skip
    setattr(npu, _name, _zero)
for _name in ("reset_max_memory_allocated", "reset_max_memory_cached", "reset_accumulated_memory_stats"):
    setattr(npu, _name, reset_peak_memory_stats)
# torch.utils.checkpoint saves and replays the device RNG state only when the module says it is initialised.
npu._initialized = True  # type: ignore[attr-defined]
npu.amp = amp  # type: ignore[attr-defined]
npu.config = config  # type: ignore[attr-defined]
# torch_npu.npu.default_generators: one generator per device (npu/__init__.py fills it at lazy init); the emulated
# device's, whose device is npu:0 as torch.cuda.default_generators[0]'s is cuda:0.
npu.default_generators = (DEVICE_GENERATOR,)  # type: ignore[attr-defined]


def is_current_stream_capturing() -> bool:
    """False: graph capture is not emulated. torch_npu has it (npu/graphs.py), and torch's optimizers ask
    ``torch.cuda.is_current_stream_capturing()``, which transfer_to_npu points here."""
    return False


npu.is_current_stream_capturing = is_current_stream_capturing  # type: ignore[attr-defined]


def register_modules() -> None:
    """Make ``import torch.npu`` / ``from torch.npu.amp import autocast`` work."""
    sys.modules["torch.npu"] = npu
    sys.modules["torch.npu.amp"] = amp
    sys.modules["torch.npu.config"] = config
