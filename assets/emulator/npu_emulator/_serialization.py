"""``torch.save`` / ``torch.load`` / pickling of npu tensors, as on a real device.

A real device tensor is saved with its storage's location tag (``npu:0``) and loads back onto that device, or onto
the device ``map_location`` names (``"npu"``, ``"npu:0"``, ``torch.device``, a dict, a callable). The emulator's
device tensors keep their data in CPU storages, and torch's own deserializer for the PrivateUse1 device would
allocate a device storage, which the emulated backend cannot (torch 2.14 crashes there, older torch raises). So:

- saving: :meth:`NPUTensor.__reduce_ex__` gives what a device tensor gives (``torch._utils._rebuild_tensor_v2``
  over its storage, which ``torch.load(weights_only=True)`` accepts) and remembers the storage; a location tagger
  registered before the CPU one (``torch.serialization.register_package``) tags that storage ``npu:N``;
- loading: a deserializer registered before torch's PrivateUse1 one takes every ``npu`` location, keeps the CPU
  storage and remembers that it belongs to ``npu:N``; ``torch._utils._rebuild_tensor`` (which every tensor rebuild
  goes through) wraps tensors over such storages into device tensors;
- ``UntypedStorage.to("npu")`` / ``.npu()`` (map_location callables use them) copy into a CPU storage that the next
  rebuild puts on the device, instead of allocating device memory.

Plain CPU storages and tensors are never affected: the tagger and the rebuild look only at storages they
remembered, each checked by identity.
"""

from __future__ import annotations

import atexit
import re
from typing import Any

import torch

from npu_emulator import _devices

# Before the CPU tagger (priority 10) and torch's PrivateUse1 deserializer (23).
PRIORITY = 5

# storage _cdata -> (weak reference to that storage, device index). torch's own storage weak reference (as
# torch.multiprocessing keeps): it keeps the storage's address from being reused while it exists, and says when
# the storage died. (A Python weakref to a storage object crashes torch 2.1.)
_SAVED: dict[int, tuple[Any, int]] = {}  # storages of device tensors being pickled
_LOADED: dict[int, tuple[Any, int]] = {}  # host storages that rebuilt tensors put on the device

_LOCATION = re.compile(r"npu(?::(\d+))?$")
_state: dict[str, Any] = {}


def use_device_tensor(wrap: Any) -> None:
    """The device tensor type (``NPUTensor``), given by ``_tensor`` above this module: loads rebuild device tensors
    with it."""
    _device_tensor["type"] = wrap


_device_tensor: dict[str, Any] = {}


def _prune(table: dict[int, tuple[Any, int]]) -> None:
    if len(table) > 256:
        for key in [key for key, (ref, _) in table.items() if ref.expired()]:
            del table[key]


def _remember(table: dict[int, tuple[Any, int]], storage: Any, index: int) -> None:
    from torch.multiprocessing.reductions import StorageWeakRef

    _prune(table)
    table[storage._cdata] = (StorageWeakRef(storage), index)


def _index_of(table: dict[int, tuple[Any, int]], storage: Any) -> int | None:
    untyped = getattr(storage, "_untyped_storage", storage)
    found = table.get(getattr(untyped, "_cdata", None))
    if found is None or found[0].expired():
        return None
    return found[1]


def remember_saved(elem: torch.Tensor, index: int) -> None:
    """Note that ``elem`` (the CPU tensor behind a device tensor being pickled) belongs to ``npu:index``."""
    _remember(_SAVED, elem.untyped_storage(), index)


def _tag(storage: Any) -> str | None:
    index = _index_of(_SAVED, storage)
    return None if index is None else f"npu:{index}"


def _location_index(location: str) -> int | None:
    match = _LOCATION.match(location)
    if match is None:
        return None
    if match.group(1) is None:
        return _devices.current()
    index = int(match.group(1))
    count = _devices.count()
    if index >= count:
        # torch's own message for a device index the machine lacks (torch/serialization.py, _validate_device).
        msg = (
            f"Attempting to deserialize object on NPU device {index} but torch.npu.device_count() is {count}. "
            "Please use torch.load with map_location to map your storages to an existing device."
        )
        raise RuntimeError(msg)
    return index


def remember_loaded(storage: Any, index: int) -> Any:
    """Mark the CPU ``storage`` as the data of device tensors on ``npu:index`` rebuilt over it."""
    _remember(_LOADED, storage, index)
    return storage


def _deserialize(storage: Any, location: str) -> Any:
    if not isinstance(location, str):
        return None
    index = _location_index(location)
    if index is None:
        return None
    if storage.device.type != "cpu":
        storage = storage.cpu()
    return remember_loaded(storage, index)


def _rebuild_tensor(storage: Any, storage_offset: int, size: Any, stride: Any) -> torch.Tensor:
    tensor = _state["rebuild"](storage, storage_offset, size, stride)
    index = _index_of(_LOADED, storage)
    if index is None:
        return tensor
    return _device_tensor["type"](tensor, index=index)


def _storage_to(storage: Any, device: Any, non_blocking: bool = False) -> Any:
    """``torch._utils._to`` (``UntypedStorage.to``): to an npu device, a CPU copy marked for that device."""
    target = torch.device(device)
    if target.type != "npu":
        return _state["to"](storage, device, non_blocking)
    index = _devices.check(target.index, "UntypedStorage.to") if target.index is not None else _devices.current()
    copy = torch.UntypedStorage(storage.nbytes())
    copy.copy_(storage, non_blocking)
    return remember_loaded(copy, index)


def _untyped_npu(self: Any, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
    del kwargs
    target = torch.device("npu", device) if isinstance(device, int) else torch.device(device or "npu")
    return _storage_to(self, target, non_blocking)


def _typed_npu(self: Any, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
    del kwargs
    untyped = _untyped_npu(self._untyped_storage, device, non_blocking)
    return torch.storage.TypedStorage(wrap_storage=untyped, dtype=self.dtype, _internal=True)


def forget() -> None:
    """Drop every remembered storage (at exit, before torch is torn down)."""
    _SAVED.clear()
    _LOADED.clear()


def install() -> None:
    """Register the tagger and deserializer and route storage moves to the npu (once per process)."""
    if _state:
        return
    import torch.storage
    import torch.serialization

    _state["rebuild"] = torch._utils._rebuild_tensor
    # Weak references to storages that outlive the interpreter's teardown of torch crash it (torch 2.1).
    atexit.register(forget)
    torch.serialization.register_package(PRIORITY, _tag, _deserialize)
    torch._utils._rebuild_tensor = _rebuild_tensor
    original_to = getattr(torch._utils, "_to", None)  # UntypedStorage.to(device): torch >= 2.2
    if original_to is not None:
        _state["to"] = original_to
        torch._utils._to = _storage_to
        if getattr(torch.storage, "_to", None) is original_to:
            torch.storage._to = _storage_to
    torch.UntypedStorage.npu = _untyped_npu  # type: ignore[attr-defined]
    torch.TypedStorage.npu = _typed_npu  # type: ignore[attr-defined]
