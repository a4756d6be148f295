"""Device memory of the emulated npu: the bytes each device holds, as torch_npu's caching allocator counts them.

Every storage behind a device tensor is counted once, from the first device tensor made over it until the storage
is freed (a weak-reference finalizer on the storage, which torch keeps as one Python object while it lives). Sizes
are rounded as ``round_size`` of torch_npu's caching allocator rounds a request into a block: 32 bytes added, then
up to a multiple of 512, at least 512 (Ascend/pytorch ``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp``,
``kMinBlockSize = 512``). The sum is the allocator's ``allocated_bytes`` statistic, what
``torch.npu.max_memory_allocated()`` reports on a card; the 2 MiB / 20 MiB segments the allocator reserves around
the blocks (``memory_reserved``) are not modelled.

An observer (the verify harness) labels the time with a phase (``forward``, ``backward``, ``optimizer``) and the
module running, and tags the storages of parameters, gradients and optimizer states; :func:`summary` then says
what was alive at the peak. Shapes-only runs (``npu_emulator._shapes``) count their meta storages the same way.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

MIN_BLOCK = 512  # kMinBlockSize
BLOCK_PAD = 32  # round_size adds 32 bytes before rounding
SOURCE = "torch_npu NPUCachingAllocator.cpp round_size (Ascend/pytorch torch_npu/csrc/core/npu/)"
# Blocks kept for the breakdown at the peak; past this many the breakdown stops (the totals go on).
HISTORY_LIMIT = 2_000_000


def round_size(nbytes: int) -> int:
    """The block torch_npu's caching allocator gives a request of ``nbytes`` (0 for an empty tensor: no block)."""
    if nbytes <= 0:
        return 0
    size = nbytes + BLOCK_PAD
    if size < MIN_BLOCK:
        return MIN_BLOCK
    return MIN_BLOCK * ((size + MIN_BLOCK - 1) // MIN_BLOCK)


class _Block:
    __slots__ = ("born", "bytes", "device", "died", "module", "phase", "tag")

    def __init__(self, device: int, nbytes: int, born: int, phase: str, module: str | None) -> None:
        self.device = device
        self.bytes = nbytes
        self.born = born
        self.died: int | None = None
        self.phase = phase
        self.module = module
        self.tag: str | None = None


class _State:
    def __init__(self) -> None:
        self.live: dict[int, _Block] = {}
        self.history: list[_Block] = []
        self.current: dict[int, int] = {}
        self.peak: dict[int, int] = {}
        self.peak_event: dict[int, int] = {}
        self.peak_where: dict[int, tuple[str, str | None]] = {}
        self.phase_peak: dict[tuple[int, str], int] = {}
        self.phase_peak_event: dict[tuple[int, str], int] = {}
        self.event = 0
        self.phase = "other"
        self.module: str | None = None


_STATE = _State()


def _version(text: str) -> tuple[int, int]:
    parts = text.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


# Before torch 2.6 a storage's Python object can be freed with its weak references left in place (seen on torch 2.1:
# the interpreter's last garbage collection then crashes at exit, SIGSEGV in clear_weakref); there each storage is
# followed through the host tensors made over it instead, released when the last of them is (an in-place resize_
# of a device tensor is then not followed exactly).
_STORAGE_WEAKREFS = _version(torch.__version__) >= (2, 6)
# storage key -> host tensors alive over it (torch < 2.6)
_HOLDERS: dict[int, int] = {}


def _hold(elem: torch.Tensor, key: int, block: _Block) -> None:
    _HOLDERS[key] = _HOLDERS.get(key, 0) + 1
    weakref.finalize(elem, _drop, key, block).atexit = False


def _drop(key: int, block: _Block) -> None:
    left = _HOLDERS.get(key, 0) - 1
    if left > 0:
        _HOLDERS[key] = left
        return
    _HOLDERS.pop(key, None)
    _release(key, block)


def reset() -> None:
    """Forget the peaks and the history; the storages alive now stay counted (``reset_peak_memory_stats``)."""
    state = _STATE
    state.history = [block for block in state.live.values()]
    state.peak = dict(state.current)
    state.peak_event = {device: state.event for device in state.current}
    state.peak_where = {device: (state.phase, state.module) for device in state.current}
    state.phase_peak = {}
    state.phase_peak_event = {}


def set_where(phase: str | None = None, module: str | None = None) -> None:
    """Label what runs now (an observer's call): the phase and the module the next allocations belong to."""
    if phase is not None:
        _STATE.phase = phase
    _STATE.module = module


def where() -> tuple[str, str | None]:
    return _STATE.phase, _STATE.module


def _release(key: int, block: _Block) -> None:
    state = _STATE
    if state.live.get(key) is block:
        del state.live[key]
    state.event += 1
    block.died = state.event
    state.current[block.device] = state.current.get(block.device, 0) - block.bytes


def track(elem: torch.Tensor, index: int) -> None:
    """Count the storage behind a new device tensor on device ``index`` (once per storage)."""
    try:
        storage = elem.untyped_storage()
    except (RuntimeError, NotImplementedError):  # a layout without one storage (sparse): not counted
        return
    key = storage._cdata
    state = _STATE
    block = state.live.get(key)
    nbytes = round_size(storage.nbytes())
    if block is not None:
        if block.bytes != nbytes:  # resized in place (resize_, an out= argument)
            delta = nbytes - block.bytes
            block.bytes = nbytes
            _grow(block.device, delta)
        if not _STORAGE_WEAKREFS:
            _hold(elem, key, block)
        return
    state.event += 1
    block = _Block(index, nbytes, state.event, state.phase, state.module)
    state.live[key] = block
    if len(state.history) < HISTORY_LIMIT:
        state.history.append(block)
    if _STORAGE_WEAKREFS:
        weakref.finalize(storage, _release, key, block).atexit = False  # nothing to count at exit
    else:
        _hold(elem, key, block)
    _grow(index, nbytes)


def _grow(device: int, delta: int) -> None:
    state = _STATE
    current = state.current.get(device, 0) + delta
    state.current[device] = current
    if current > state.peak.get(device, 0):
        state.peak[device] = current
        state.peak_event[device] = state.event
        state.peak_where[device] = (state.phase, state.module)
    key = (device, state.phase)
    if current > state.phase_peak.get(key, 0):
        state.phase_peak[key] = current
        state.phase_peak_event[key] = state.event


def tag(tensors: Any, name: str) -> None:
    """Mark the storages behind ``tensors`` (device tensors) as ``parameters``, ``gradients``,
    ``optimizer_states``: the breakdown at the peak names them so."""
    live = _STATE.live
    for tensor in tensors:
        if not isinstance(tensor, torch.Tensor) or tensor.device.type != "npu":
            continue
        elem = getattr(tensor, "elem", None)
        if elem is None:
            continue
        try:
            block = live.get(elem.untyped_storage()._cdata)
        except (RuntimeError, NotImplementedError):
            continue
        if block is not None and block.tag is None:
            block.tag = name


def allocated(device: int = 0) -> int:
    return _STATE.current.get(device, 0)


def max_allocated(device: int = 0) -> int:
    return _STATE.peak.get(device, 0)


def _alive_at(device: int, event: int) -> dict[str, int]:
    """The bytes alive on ``device`` just after ``event``, by kind: the tagged parameters, gradients and optimizer
    states, activations (made in the forward pass), the optimizer's temporaries, other temporaries."""
    parts = {"parameters": 0, "gradients": 0, "optimizer_states": 0, "activations": 0,
             "optimizer_temporaries": 0, "temporaries": 0}  # fmt: skip
    for block in _STATE.history:
        if block.device != device or block.born > event or (block.died is not None and block.died <= event):
            continue
        if block.tag is not None:
            kind = block.tag
        elif block.phase == "forward":
            kind = "activations"
        elif block.phase == "optimizer":
            kind = "optimizer_temporaries"
        else:
            kind = "temporaries"
        parts[kind] = parts.get(kind, 0) + block.bytes
    return parts


def summary() -> dict[str, Any]:
    """The peak device memory so far, of the device that held the most: ``peak_bytes``, ``device``, ``phase`` and
    ``module`` at the peak, ``by_phase`` (the peak while each phase ran), ``at_peak`` (what was alive at the peak,
    see :func:`_alive_at`) and ``at_phase_peak`` (the same at each phase's peak), ``current_bytes``, ``rounding``
    (the allocator rule applied). The breakdowns are empty past :data:`HISTORY_LIMIT` blocks."""
    state = _STATE
    if not state.peak:
        return {"peak_bytes": 0, "device": 0, "phase": None, "module": None, "by_phase": {}, "at_peak": {},
                "at_phase_peak": {}, "current_bytes": 0, "rounding": SOURCE}  # fmt: skip
    device = max(state.peak, key=lambda d: (state.peak[d], -d))
    complete = len(state.history) < HISTORY_LIMIT
    phase, module = state.peak_where.get(device, ("other", None))
    by_phase = {name: value for (dev, name), value in sorted(state.phase_peak.items()) if dev == device}
    at_phase_peak = {}
    if complete:
        for (dev, name), event in sorted(state.phase_peak_event.items()):
            if dev == device:
                at_phase_peak[name] = _alive_at(device, event)
    return {
        "peak_bytes": state.peak[device],
        "device": device,
        "phase": phase,
        "module": module,
        "by_phase": by_phase,
        "at_peak": _alive_at(device, state.peak_event.get(device, 0)) if complete else {},
        "at_phase_peak": at_phase_peak,
        "current_bytes": state.current.get(device, 0),
        "rounding": SOURCE,
    }
