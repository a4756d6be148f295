"""Runtime patches that let CUDA-era PyTorch training code run on Ascend NPUs (``torch_npu``).

Copy this file into ``migrate_to_cloudrobo/`` and apply it once at the top of the training entry point::

    from runtime_patches import build_vla_patcher

    patcher = build_vla_patcher()          # build_vla_patcher(fused_adamw=True) adds AdamWFused
    patcher.apply()
    ...                                    # training
    patcher.print_report()                 # which patches fired, how often, and from where

or scoped: ``with build_vla_patcher(): train()``. Every patch can be turned off by name,
``build_vla_patcher(BuiltinMinMaxNPU=False)``, or from the environment, ``NPU_PATCHES_DISABLE=BuiltinMinMaxNPU,...``.

The patches act on accelerator tensors only (device type other than ``cpu`` and ``meta``): ``npu`` first, and the
same code is correct on ``cuda``. CPU code keeps its exact behaviour. ``remove()`` puts back the identical original
objects (one documented exception: the CPython slot side effect of TensorIndexDevice, see that patch).

Requires Python >= 3.10 and torch; ``torch_npu`` is optional (imported lazily, only by AdamWFused and the device
auto-detection of :func:`self_test`). Facts about Ascend cited below come from NPU-FACTS.md of the npu-patcher
project (Huawei's Ascend/pytorch and op-plugin documentation and issues) and from the skill document's patch table.
"""

from __future__ import annotations

import builtins
import copyreg
import functools
import importlib
import importlib.util
import math
import os
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

import torch

__all__ = [
    "PATCH_NAMES",
    "Patcher",
    "PatchStatus",
    "active_patcher",
    "build_npu_patcher",
    "build_vla_patcher",
    "self_test",
]

_Tensor = torch.Tensor
# The C base class of torch.Tensor: ``torch._C.TensorBase`` from torch 2.2 on, ``torch._C._TensorBase`` before.
_TensorBase = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase
# The real float64 dtype object, even if this module is imported while float64 is already remapped.
_FLOAT64: torch.dtype = torch.DoubleTensor.dtype
_FLOAT32: torch.dtype = torch.float32
_HALF = (torch.float16, torch.bfloat16)
# Frames in these packages are skipped when reporting where a patch first fired (torch's own Python layers, the
# device backend, and the emulated device used for pre-flight checks).
_FRAMEWORK_PACKAGES = frozenset({"torch", "torch_npu", "npu_emulator", "importlib"})
_ENV_DISABLE = "NPU_PATCHES_DISABLE"


def _on_accelerator(tensor: torch.Tensor) -> bool:
    """True for tensors on a device other than cpu/meta (npu, cuda, ...)."""
    return not (tensor.is_cpu or tensor.is_meta)


_SCALARS = (int, float)
# Types seen by the patched min/max that are not tensors: membership is much cheaper than isinstance() against
# torch.Tensor (whose metaclass makes isinstance take the slow path). Grows with the types a program uses.
_PLAIN_TYPES: set[type] = {int, float, bool, str, bytes, complex, tuple, list, dict, set, frozenset, type(None)}
_PLAIN_LIMIT = 1024


def _learn(kind: type) -> None:
    if kind not in _PLAIN_TYPES and len(_PLAIN_TYPES) < _PLAIN_LIMIT and not issubclass(kind, _Tensor):
        _PLAIN_TYPES.add(kind)


def _call_site() -> str:
    """The first frame outside this module and the torch stack: where user code reached the patch."""
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module != __name__ and module.partition(".")[0] not in _FRAMEWORK_PACKAGES:
            return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return "<unknown>"


# --------------------------------------------------------------------------------------------------------------
# Patch base: records every replacement so that removal restores the identical original objects.


@dataclass
class PatchStatus:
    """One row of :meth:`Patcher.report`."""

    name: str
    state: str  # "applied" | "removed" | "skipped" | "disabled" | "not applied"
    reason: str
    fires: int
    first_call_site: str | None
    summary: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "reason": self.reason,
            "fires": self.fires,
            "first_call_site": self.first_call_site,
            "summary": self.summary,
        }


_MISSING = object()
_WRAPPER_ASSIGNED = ("__name__", "__qualname__", "__doc__")


class _Patch:
    """A reversible set of attribute replacements plus fire counting."""

    name = ""
    summary = ""

    def __init__(self) -> None:
        self.fires = 0
        self.first_call_site: str | None = None
        self.notes: list[str] = []
        self._swaps: list[tuple[Any, Any, Any]] = []  # (owner, key, original or _MISSING)
        self._lock = threading.Lock()

    # -- life cycle --
    def skip_reason(self) -> str | None:
        """Why this patch cannot apply here (None: it can)."""
        return None

    def install(self) -> None:
        raise NotImplementedError

    def uninstall(self) -> None:
        while self._swaps:
            owner, key, original = self._swaps.pop()
            if isinstance(owner, dict):
                if original is _MISSING:
                    owner.pop(key, None)
                else:
                    owner[key] = original
            elif original is _MISSING:
                delattr(owner, key)
            else:
                setattr(owner, key, original)

    @property
    def installed(self) -> bool:
        return bool(self._swaps)

    # -- helpers for install() --
    def swap(self, owner: Any, attr: str, new: Any) -> Any:
        """Replace ``owner.attr`` by ``new``; return the value code saw before (to call through to)."""
        current = getattr(owner, attr)
        own = owner.__dict__ if isinstance(owner, type) else vars(owner)
        self._swaps.append((owner, attr, own.get(attr, _MISSING)))
        setattr(owner, attr, new)
        return current

    def replace(self, owner: Any, attr: str, new: Any) -> None:
        """``swap`` that gives ``new`` the replaced function's name and doc (for help() and tracebacks)."""
        functools.update_wrapper(new, getattr(owner, attr), assigned=_WRAPPER_ASSIGNED, updated=())
        self.swap(owner, attr, new)

    def swap_item(self, mapping: dict[Any, Any], key: Any, new: Any) -> None:
        self._swaps.append((mapping, key, mapping.get(key, _MISSING)))
        mapping[key] = new

    def rebind_module_globals(self, original: Any, new: Any, skip: Iterable[str] = ()) -> list[str]:
        """Replace module-level names bound to ``original`` (``from m import f`` done before apply)."""
        skipped = set(skip)
        rebound: list[str] = []
        for module_name, module in list(sys.modules.items()):
            if module is None or module_name in skipped or module_name == __name__:
                continue
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            try:
                names = [key for key, value in list(namespace.items()) if value is original]
            except RuntimeError:  # a module mutating its namespace concurrently
                continue
            for key in names:
                if isinstance(key, str):
                    self._swaps.append((namespace, key, original))
                    namespace[key] = new
                    rebound.append(f"{module_name}.{key}")
        return rebound

    # -- run-time bookkeeping (hot paths call this only when the patch changed behaviour) --
    def fired(self) -> None:
        self.fires += 1
        if self.first_call_site is None:
            with self._lock:
                if self.first_call_site is None:
                    self.first_call_site = _call_site()

    # -- verification --
    def check(self, device: torch.device) -> str:
        """Exercise the patch on ``device``; return a detail line or raise AssertionError."""
        raise NotImplementedError


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


# --------------------------------------------------------------------------------------------------------------
# Float64To32


def _reduce_dtype(dtype: torch.dtype) -> Any:
    # While torch.float64 is remapped, pickle's "torch.float64 is this object" check fails for the real float64
    # dtype; name it by a path that still resolves to it (and to the same object once the patch is gone).
    if dtype is _FLOAT64:
        return "DoubleTensor.dtype"
    return dtype.__reduce__()


class Float64To32(_Patch):
    """float64 -> float32 for everything that reaches an accelerator.

    Ascend's float64 support is per kernel (NPU-FACTS.md, "dtypes"): the matmul family, nan_to_num and max/min with
    ``dim`` fail with ``Unsupport data type: at::ScalarType::Double``, and a dtype-only cast of a device tensor to
    float64 gives float32 with a warning, so:

    - ``torch.float64`` and ``torch.double`` become ``torch.float32`` at module level: code that names the dtype
      after ``apply()`` gets float32 everywhere (factories, ``.to(torch.float64)``, ``set_default_dtype``).
      Consequence: ``x.dtype == torch.float64`` is True for float32 tensors and False for real float64 ones
      while applied.
    - The real float64 dtype object stays picklable (``copyreg.dispatch_table[torch.dtype]``).
    - ``Tensor.to``/``.cuda``/``.npu``, ``torch.as_tensor``/``torch.tensor`` with an accelerator ``device=``:
      float64 data becomes float32 on its way to the device.
    - ``Tensor.double()`` on an accelerator tensor returns float32 (NPU-FACTS.md notes the device may already do
      so silently; here it is explicit and counted).
    - ``torch.from_numpy`` is deliberately not hooked: it keeps sharing memory with the array (a float64 CPU
      tensor is fine on the host) and the data is converted where it crosses to the device.
    - The real float64 captured before ``apply()`` (``DTYPE = torch.float64`` at import, a default argument):
      factories given it with an accelerator ``device=`` (``zeros``, ``ones``, ``empty``, ``full``, ``rand``,
      ``randn``, ``arange``, ``linspace``, ``eye``...), the ``*_like`` factories and ``Tensor.new_*`` of an
      accelerator tensor, and ``set_default_dtype`` give float32.
    - ``torch.load``: float64 tensors the checkpoint puts on an accelerator (``map_location="npu"``, or tensors
      saved from the device) arrive as float32, in nested dicts, lists, tuples and pickled modules.
    """

    name = "Float64To32"
    summary = "float64 -> float32 (torch.float64/double, .to/.cuda/.npu, factories, as_tensor/tensor, .double(), load)"

    def install(self) -> None:
        fire = self.fired
        self._keep_storage_maps()
        self.swap(torch, "float64", _FLOAT32)
        self.swap(torch, "double", _FLOAT32)
        self.swap_item(copyreg.dispatch_table, torch.dtype, _reduce_dtype)

        orig_to = _Tensor.to

        def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            if self.dtype is not _FLOAT64 and kwargs.get("dtype") is not _FLOAT64:
                for arg in args:
                    if arg is _FLOAT64:
                        break
                else:
                    return orig_to(self, *args, **kwargs)
            parse_kwargs = {key: value for key, value in kwargs.items() if key != "copy"}
            device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*args, **parse_kwargs)
            target = self.device if device is None else device
            final = self.dtype if dtype is None else dtype
            if final is not _FLOAT64 or target.type in ("cpu", "meta"):
                return orig_to(self, *args, **kwargs)
            fire()
            extra: dict[str, Any] = {"non_blocking": non_blocking, "copy": bool(kwargs.get("copy", False))}
            if memory_format is not None:
                extra["memory_format"] = memory_format
            return orig_to(self, target, _FLOAT32, **extra)

        self.replace(_Tensor, "to", to)

        orig_double = _Tensor.double

        def double(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            if _on_accelerator(self):
                fire()
                return self.to(_FLOAT32, *args, **kwargs)
            return orig_double(self, *args, **kwargs)

        self.replace(_Tensor, "double", double)

        for method in ("cuda", "npu"):
            if not hasattr(_Tensor, method):
                continue
            self._hook_device_method(method)

        orig_as_tensor = torch.as_tensor

        def as_tensor(data: Any, dtype: torch.dtype | None = None, device: Any = None) -> torch.Tensor:
            if dtype is None and device is not None and _is_float64_data(data) and _is_accelerator_device(device):
                fire()
                dtype = _FLOAT32
            return orig_as_tensor(data, dtype=dtype, device=device)

        self.replace(torch, "as_tensor", as_tensor)

        orig_tensor = torch.tensor

        def tensor(data: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
            device = kwargs.get("device")
            if (
                device is not None
                and kwargs.get("dtype") is None
                and _is_float64_data(data)
                and _is_accelerator_device(device)
            ):
                fire()
                kwargs["dtype"] = _FLOAT32
            return orig_tensor(data, *args, **kwargs)

        self.replace(torch, "tensor", tensor)
        self._hook_captured_float64()
        self._hook_load()

    def _hook_captured_float64(self) -> None:
        fire = self.fired
        for name in _DEVICE_FACTORIES:
            original = getattr(torch, name, None)
            if original is not None:
                self.replace(torch, name, _factory_without_float64(original, fire, like=False))
        for name in _LIKE_FACTORIES:
            original = getattr(torch, name, None)
            if original is not None:
                self.replace(torch, name, _factory_without_float64(original, fire, like=True))
        for name in _NEW_METHODS:
            original = getattr(_Tensor, name, None)
            if original is not None:
                self.replace(_Tensor, name, _factory_without_float64(original, fire, like=True))
        orig_default = torch.set_default_dtype

        def set_default_dtype(d: torch.dtype) -> None:
            if d is _FLOAT64:
                fire()
                d = _FLOAT32
            orig_default(d)

        self.replace(torch, "set_default_dtype", set_default_dtype)

    def _hook_load(self) -> None:
        fire = self.fired
        orig_load = torch.load

        def load(*args: Any, **kwargs: Any) -> Any:
            return _float64_off_device(orig_load(*args, **kwargs), fire, set())

        self.replace(torch, "load", load)

    def _keep_storage_maps(self) -> None:
        # torch.storage rebuilds its dtype -> "DoubleStorage" map from torch.double on every call (pickling and
        # torch.save of tensors use it) and caches the inverse map forever on first use: both must see the real
        # float64, or float64 tensors cannot be saved and float64 checkpoints would load as float32 bytes.
        storage = sys.modules.get("torch.storage")
        builder = getattr(storage, "_dtype_to_storage_type_map", None)
        if builder is None:
            return
        fixed = dict(builder())
        inverse = getattr(storage, "_storage_type_to_dtype_map", None)
        if inverse is not None:
            inverse()

        def dtype_to_storage_type_map() -> dict[torch.dtype, str]:
            return dict(fixed)

        self.swap(storage, "_dtype_to_storage_type_map", dtype_to_storage_type_map)

    def _hook_device_method(self, method: str) -> None:
        fire = self.fired
        original = getattr(_Tensor, method)

        def to_device(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            if self.dtype is _FLOAT64:
                fire()
                return original(self.float(), *args, **kwargs)
            return original(self, *args, **kwargs)

        self.replace(_Tensor, method, to_device)

    def check(self, device: torch.device) -> str:
        _expect(torch.float64 is _FLOAT32 and torch.double is _FLOAT32, "torch.float64 is not remapped")
        import pickle

        _expect(pickle.loads(pickle.dumps(_FLOAT64)) is _FLOAT64, "the real float64 dtype does not round-trip")
        moved = torch.zeros(3, dtype=_FLOAT64).to(device)
        accel = device.type not in ("cpu", "meta")
        want = _FLOAT32 if accel else _FLOAT64
        _expect(moved.dtype is want, f"float64 .to({device}) gave {moved.dtype}, expected {want}")
        doubled = torch.ones(2, device=device).double()
        _expect(doubled.dtype is want, f".double() on {device} gave {doubled.dtype}, expected {want}")
        return f"float64 data moved to {device} arrives as {want}; the float64 dtype still pickles"


# Factories that take dtype= and device=, and those whose device comes from a tensor argument.
_DEVICE_FACTORIES = (
    "zeros", "ones", "empty", "full", "rand", "randn", "randint", "arange", "linspace", "logspace", "eye",
    "empty_strided", "normal",
)  # fmt: skip
_LIKE_FACTORIES = ("zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like")
_NEW_METHODS = ("new_zeros", "new_ones", "new_empty", "new_full", "new_tensor")


def _factory_without_float64(original: Any, fire: Callable[[], None], *, like: bool) -> Any:
    """``original`` with ``dtype=<the real float64>`` made float32 when the result lands on an accelerator."""

    def factory(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("dtype") is _FLOAT64:
            device = kwargs.get("device")
            if device is None and like and args and isinstance(args[0], torch.Tensor):
                device = args[0].device
            if device is None:
                device = torch.get_default_device() if hasattr(torch, "get_default_device") else None
            if device is not None and _is_accelerator_device(device):
                fire()
                kwargs["dtype"] = _FLOAT32
        return original(*args, **kwargs)

    return factory


def _float64_off_device(value: Any, fire: Callable[[], None], seen: set[int]) -> Any:
    """``value`` (what ``torch.load`` returned) with its float64 accelerator tensors made float32."""
    if isinstance(value, torch.Tensor):
        if value.dtype is _FLOAT64 and value.device.type not in ("cpu", "meta"):
            fire()
            if isinstance(value, torch.nn.Parameter):
                value.data = value.data.float()
                return value
            return value.float()
        return value
    if id(value) in seen:
        return value
    if isinstance(value, torch.nn.Module):
        seen.add(id(value))
        for module in value.modules():
            for table in (module._parameters, module._buffers):
                for key, item in table.items():
                    if item is not None:
                        table[key] = _float64_off_device(item, fire, seen)
        return value
    if isinstance(value, dict):
        seen.add(id(value))
        for key in list(value):
            value[key] = _float64_off_device(value[key], fire, seen)
        return value
    if isinstance(value, list):
        seen.add(id(value))
        value[:] = [_float64_off_device(item, fire, seen) for item in value]
        return value
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_float64_off_device(item, fire, seen) for item in value)
    return value


def _is_float64_data(data: Any) -> bool:
    dtype = getattr(data, "dtype", None)
    if dtype is None:
        return False
    if dtype is _FLOAT64:
        return True
    # numpy float64 arrays and scalars (numpy is not imported here: compare by name)
    return type(dtype).__module__.startswith("numpy") and getattr(dtype, "name", "") == "float64"


def _is_accelerator_device(device: Any) -> bool:
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        return False
    return kind not in ("cpu", "meta")


# --------------------------------------------------------------------------------------------------------------
# TensorNumpySafe


class TensorNumpySafe(_Patch):
    """``.numpy()`` on an accelerator tensor copies it to the host first (``.cpu().numpy()``).

    Torch refuses ``.numpy()`` for every non-CPU tensor (``can't convert npu:0 device type tensor to numpy``).
    The result is a host copy: writing to the array does not change the device tensor. ``requires_grad``
    tensors still need ``.detach()`` (or ``force=True``), exactly as on CPU.
    """

    name = "TensorNumpySafe"
    summary = "accelerator tensor .numpy() -> .cpu().numpy()"

    def install(self) -> None:
        fire = self.fired
        original = _Tensor.numpy

        def numpy(self: torch.Tensor, *, force: bool = False) -> Any:
            if self.is_cpu or self.is_meta:
                return original(self, force=force)
            fire()
            return original(self.cpu(), force=force)

        self.replace(_Tensor, "numpy", numpy)

    def check(self, device: torch.device) -> str:
        array = torch.arange(3.0, device=device).numpy()
        _expect(array.tolist() == [0.0, 1.0, 2.0], f"unexpected values {array.tolist()}")
        return f"{device} tensor .numpy() -> {array.tolist()}"


# --------------------------------------------------------------------------------------------------------------
# NanToNumSafe


class NanToNumSafe(_Patch):
    """``nan_to_num`` on float16/bfloat16 accelerator tensors computes in float32 and casts back.

    The skill document's patch table states the half-precision failure on the device. Computing in float32 with
    torch's defaults would map ``+inf`` to float32's max, which overflows back to ``inf`` in float16; the patch
    therefore passes ``torch.finfo(original dtype).max/min`` as the ``posinf``/``neginf`` defaults, which is what
    ``nan_to_num`` does natively for that dtype.
    """

    name = "NanToNumSafe"
    summary = "half-precision nan_to_num -> float32 compute with the original dtype's finite limits"

    def install(self) -> None:
        fire = self.fired
        orig_fn = torch.nan_to_num

        def compute(x: torch.Tensor, nan: Any, posinf: Any, neginf: Any) -> torch.Tensor:
            info = torch.finfo(x.dtype)
            posinf = info.max if posinf is None else posinf
            neginf = info.min if neginf is None else neginf
            return orig_fn(x.float(), nan, posinf, neginf).to(x.dtype)

        def needs(x: Any) -> bool:
            return isinstance(x, _Tensor) and x.dtype in _HALF and not (x.is_cpu or x.is_meta)

        def nan_to_num(
            input: torch.Tensor,  # noqa: A002 - torch's own parameter name
            nan: Any = 0.0,
            posinf: Any = None,
            neginf: Any = None,
            *,
            out: torch.Tensor | None = None,
        ) -> torch.Tensor:
            if not needs(input):
                if out is None:
                    return orig_fn(input, nan, posinf, neginf)
                return orig_fn(input, nan, posinf, neginf, out=out)
            fire()
            result = compute(input, nan, posinf, neginf)
            if out is None:
                return result
            out.resize_(result.shape)
            return out.copy_(result)

        orig_method = _Tensor.nan_to_num

        def method(self: torch.Tensor, nan: Any = 0.0, posinf: Any = None, neginf: Any = None) -> torch.Tensor:
            if not needs(self):
                return orig_method(self, nan, posinf, neginf)
            fire()
            return compute(self, nan, posinf, neginf)

        orig_inplace = _Tensor.nan_to_num_

        def inplace(self: torch.Tensor, nan: Any = 0.0, posinf: Any = None, neginf: Any = None) -> torch.Tensor:
            if not needs(self):
                return orig_inplace(self, nan, posinf, neginf)
            fire()
            return self.copy_(compute(self, nan, posinf, neginf))

        self.replace(torch, "nan_to_num", nan_to_num)
        self.replace(_Tensor, "nan_to_num", method)
        self.replace(_Tensor, "nan_to_num_", inplace)

    def check(self, device: torch.device) -> str:
        x = torch.tensor([math.nan, math.inf, -math.inf, 1.5], dtype=torch.float16, device=device)
        y = torch.nan_to_num(x)
        big = torch.finfo(torch.float16).max
        _expect(y.dtype is torch.float16, f"dtype {y.dtype}, expected float16")
        _expect(y.cpu().tolist() == [0.0, big, -big, 1.5], f"values {y.cpu().tolist()}")
        return f"float16 nan_to_num on {device} -> {y.cpu().tolist()}"


# --------------------------------------------------------------------------------------------------------------
# TensorIndexDevice


def _align_index(target: torch.Tensor, index: Any) -> tuple[Any, bool]:
    """Move index tensors (alone or inside a tuple/list) to ``target``'s device; report whether any moved."""
    if isinstance(index, _Tensor):
        if index.is_cpu != target.is_cpu and not (index.is_meta or target.is_meta):
            return index.to(target.device, non_blocking=True), True
        return index, False
    if type(index) is tuple or type(index) is list:
        moved = False
        items = []
        for item in index:
            if isinstance(item, _Tensor) and item.is_cpu != target.is_cpu and not (item.is_meta or target.is_meta):
                item = item.to(target.device, non_blocking=True)
                moved = True
            items.append(item)
        if moved:
            return type(index)(items), True
    return index, False


_FAST_INDEX = (int, slice, type(None), type(Ellipsis), bool)


class _IndexFunctionMode(torch.overrides.TorchFunctionMode):
    """TensorIndexDevice's reversible variant: sees every torch call, acts on ``__getitem__``/``__setitem__``."""

    def __init__(self, patch: TensorIndexDevice) -> None:
        super().__init__()
        self.patch = patch

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if kwargs is None:
            kwargs = {}
        name = getattr(func, "__name__", None)
        if (name == "__getitem__" or name == "__setitem__") and len(args) >= 2 and isinstance(args[0], _Tensor):
            index, moved = _align_index(args[0], args[1])
            if moved:
                self.patch.fired()
                args = (args[0], index, *args[2:])
        return func(*args, **kwargs)


class TensorIndexDevice(_Patch):
    """Index tensors follow the indexed tensor's device (``x_npu[idx_cpu]``, ``x_npu[mask_cpu] = v``).

    The skill document's patch table states that indexing a device tensor with host index tensors fails on the
    NPU. Two implementations, chosen by ``build_vla_patcher(tensor_index=...)``:

    ``"slot"`` (default): assigns ``torch.Tensor.__getitem__``/``__setitem__``. Cost: one Python call per
    indexing expression (~0.3 us), nothing elsewhere. CPython side effect: assigning ``__getitem__`` on a class
    fills its ``sq_item`` slot, so every tensor now passes ``PySequence_Check``; ``torch.tensor([t0, t1])`` with
    0-dim tensors then raises ``TypeError: len() of a 0-d tensor`` (TorchTensorSafe handles it while applied).
    Deleting the attribute does not clear the slot: after ``remove()`` the attributes are the original objects
    again but that ``torch.tensor``/``torch.as_tensor`` behaviour stays for the rest of the process.

    ``"mode"``: a ``TorchFunctionMode`` pushed on apply and popped on remove: fully reversible, but every torch
    call pays a Python round trip (~1-3 us), which matters for host-bound training steps. Torch keeps the mode
    stack per thread: only the thread that called ``apply()`` is covered (and must call ``remove()``).
    """

    name = "TensorIndexDevice"
    summary = "host index tensors are moved to the indexed tensor's device"
    STRATEGIES = ("slot", "mode")

    def __init__(self, strategy: str = "slot") -> None:
        super().__init__()
        if strategy not in self.STRATEGIES:
            msg = f"tensor_index must be one of {self.STRATEGIES}, not {strategy!r}"
            raise ValueError(msg)
        self.strategy = strategy
        self._mode: _IndexFunctionMode | None = None

    def install(self) -> None:
        if self.strategy == "mode":
            mode = _IndexFunctionMode(self)
            mode.__enter__()
            self._mode = mode
            return
        fire = self.fired
        get = _TensorBase.__getitem__
        put = _TensorBase.__setitem__

        def __getitem__(self: torch.Tensor, index: Any) -> Any:
            kind = type(index)
            if kind in _FAST_INDEX:
                return get(self, index)
            if kind is tuple:
                for item in index:
                    if type(item) not in _FAST_INDEX:
                        break
                else:
                    return get(self, index)
            index, moved = _align_index(self, index)
            if moved:
                fire()
            return get(self, index)

        def __setitem__(self: torch.Tensor, index: Any, value: Any) -> None:
            if type(index) not in _FAST_INDEX:
                index, moved = _align_index(self, index)
                if moved:
                    fire()
            put(self, index, value)

        self.swap(_Tensor, "__getitem__", __getitem__)
        self.swap(_Tensor, "__setitem__", __setitem__)

    @property
    def installed(self) -> bool:
        return self._mode is not None or bool(self._swaps)

    def uninstall(self) -> None:
        if self._mode is not None:
            mode, self._mode = self._mode, None
            stack_top = torch._C._get_function_stack_at(torch._C._len_torch_function_stack() - 1)
            if stack_top is not mode:
                self._mode = mode
                msg = "TensorIndexDevice: another TorchFunctionMode was entered after apply(); exit it first"
                raise RuntimeError(msg)
            mode.__exit__(None, None, None)
        super().uninstall()

    def check(self, device: torch.device) -> str:
        x = torch.arange(10, device=device)
        picked = x[torch.tensor([1, 3])]
        _expect(picked.device == x.device, f"result on {picked.device}")
        _expect(picked.cpu().tolist() == [1, 3], f"values {picked.cpu().tolist()}")
        x[torch.tensor([0])] = 7
        _expect(int(x[0]) == 7, "__setitem__ with a host index did not write")
        return f"{device} tensor indexed by host tensors ({self.strategy} strategy)"


# --------------------------------------------------------------------------------------------------------------
# TorchTensorSafe


def _scalar_dtype(value: Any) -> torch.dtype | None:
    kind = type(value)
    if kind is bool:
        return torch.bool
    if kind is int:
        return torch.int64
    if kind is float:
        return torch.get_default_dtype()
    if kind is complex:
        return torch.complex128 if torch.get_default_dtype() is _FLOAT64 else torch.complex64
    return None


def _nested_leaves(data: Any) -> tuple[list[int], list[Any]] | None:
    """Shape and leaves of a regular nested list/tuple whose leaves are numbers or 0-dim tensors (else None)."""
    leaves: list[Any] = []

    def walk(node: Any, depth: int, shape: list[int]) -> bool:
        if type(node) is list or type(node) is tuple:
            if depth == len(shape):
                shape.append(len(node))
            elif shape[depth] != len(node):
                return False
            return all(walk(child, depth + 1, shape) for child in node)
        if depth != len(shape):
            return False
        if isinstance(node, _Tensor):
            if node.dim() != 0:
                return False
        elif _scalar_dtype(node) is None:
            return False
        leaves.append(node)
        return True

    shape: list[int] = []
    if not walk(data, 0, shape):
        return None
    return shape, leaves


def _first_leaf(data: Any) -> Any:
    while (type(data) is list or type(data) is tuple) and data:
        data = data[0]
    return data


def _contains_tensor(data: Any) -> bool:
    if isinstance(data, _Tensor):
        return True
    if type(data) is list or type(data) is tuple:
        return any(_contains_tensor(item) for item in data)
    return False


def _default_device() -> torch.device:
    getter = getattr(torch, "get_default_device", None)
    return getter() if getter is not None else torch.device("cpu")


class TorchTensorSafe(_Patch):
    """``torch.tensor``/``torch.as_tensor`` of (nested) lists holding 0-dim tensors of any device.

    Built with one ``torch.stack`` on the tensors' device and one transfer, instead of one ``.item()`` host sync
    per element; the dtype is torch's own inference (``promote_types`` over the elements, Python floats take the
    default dtype), the result is a detached copy on ``device=`` (default: torch's default device) as
    ``torch.tensor`` gives. It also keeps these calls working after TensorIndexDevice's slot side effect, which
    makes torch treat every tensor as a sequence (``TypeError: len() of a 0-d tensor``).
    Legacy constructors (``torch.Tensor([...])``, ``torch.FloatTensor([...])``) are not covered.
    """

    name = "TorchTensorSafe"
    summary = "torch.tensor/as_tensor of lists of 0-dim tensors -> one stack on the device"

    def install(self) -> None:
        fire = self.fired
        orig_tensor = torch.tensor
        orig_as_tensor = torch.as_tensor

        def build(data: Any, dtype: Any, device: Any, requires_grad: bool, pin_memory: bool) -> torch.Tensor | None:
            found = _nested_leaves(data)
            if found is None or not any(isinstance(leaf, _Tensor) for leaf in found[1]):
                return None
            shape, leaves = found
            if dtype is None:
                dtype = functools.reduce(
                    torch.promote_types,
                    [leaf.dtype if isinstance(leaf, _Tensor) else _scalar_dtype(leaf) for leaf in leaves],
                )
            target = _default_device() if device is None else torch.device(device)
            work = next(
                (leaf.device for leaf in leaves if isinstance(leaf, _Tensor) and _on_accelerator(leaf)), target
            )
            parts = [
                leaf.detach().to(work, dtype)
                if isinstance(leaf, _Tensor)
                else orig_tensor(leaf, dtype=dtype, device=work)
                for leaf in leaves
            ]
            fire()
            result = torch.stack(parts).reshape(shape).to(target)
            if requires_grad:
                result.requires_grad_(True)
            if pin_memory:
                result = result.pin_memory()
            return result

        def tensor(data: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
            if (type(data) is list or type(data) is tuple) and not args:
                first = _first_leaf(data)
                if type(first) not in _PLAIN_TYPES and isinstance(first, _Tensor):
                    built = build(
                        data,
                        kwargs.get("dtype"),
                        kwargs.get("device"),
                        bool(kwargs.get("requires_grad", False)),
                        bool(kwargs.get("pin_memory", False)),
                    )
                    if built is not None:
                        return built
                try:
                    return orig_tensor(data, *args, **kwargs)
                except TypeError:
                    if not _contains_tensor(data):
                        raise
                    built = build(
                        data,
                        kwargs.get("dtype"),
                        kwargs.get("device"),
                        bool(kwargs.get("requires_grad", False)),
                        bool(kwargs.get("pin_memory", False)),
                    )
                    if built is None:
                        raise
                    return built
            return orig_tensor(data, *args, **kwargs)

        def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> torch.Tensor:
            if type(data) is list or type(data) is tuple:
                first = _first_leaf(data)
                if type(first) not in _PLAIN_TYPES and isinstance(first, _Tensor):
                    built = build(data, dtype, device, False, False)
                    if built is not None:
                        return built
                try:
                    return orig_as_tensor(data, dtype=dtype, device=device)
                except TypeError:
                    built = build(data, dtype, device, False, False) if _contains_tensor(data) else None
                    if built is None:
                        raise
                    return built
            return orig_as_tensor(data, dtype=dtype, device=device)

        self.replace(torch, "tensor", tensor)
        self.replace(torch, "as_tensor", as_tensor)

    def check(self, device: torch.device) -> str:
        a = torch.tensor(1.5, device=device)
        b = torch.tensor(2, device=device)
        built = torch.tensor([a, b])
        _expect(built.dtype is _FLOAT32, f"dtype {built.dtype}")
        _expect(built.device == _default_device(), f"device {built.device}")
        _expect(built.tolist() == [1.5, 2.0], f"values {built.tolist()}")
        return f"torch.tensor([0-dim {device} tensors]) -> {built.tolist()}"


# --------------------------------------------------------------------------------------------------------------
# BuiltinMinMaxNPU

class BuiltinMinMaxNPU(_Patch):
    """Python ``min``/``max`` with accelerator tensors -> ``torch.minimum``/``torch.maximum`` (or clamp).

    ``max(a, b)`` on tensors compares with ``bool(a > b)``: a device-to-host sync per call, an error for
    multi-element tensors, and on Ascend comparing 0-dim tensors on different devices can crash the process
    (NPU-FACTS.md, "dtypes"). With an accelerator tensor among two or more positional arguments (or a single
    list/tuple argument whose first element is a tensor), the result is computed elementwise on the device:
    a new tensor (not one of the arguments), NaN propagating as in ``torch.maximum``; a host 0-dim tensor
    argument is moved to the device. Every other call (ints, strings, ``key=``, ``default=``, generators, empty
    sequences, CPU tensors) goes to the original builtin unchanged, with its own errors.
    """

    name = "BuiltinMinMaxNPU"
    summary = "builtin min/max with accelerator tensors -> torch.minimum/maximum"

    def install(self) -> None:
        self.swap(builtins, "max", self._make(builtins.max, torch.maximum, "clamp_min"))
        self.swap(builtins, "min", self._make(builtins.min, torch.minimum, "clamp_max"))

    def _make(self, original: Any, elementwise: Any, clamp: str) -> Any:
        fire = self.fired
        tensor_type = _Tensor
        scalars = _SCALARS
        plain = _PLAIN_TYPES

        def pair(a: Any, b: Any) -> Any:
            # NotImplemented: let the builtin decide.
            if isinstance(a, tensor_type):
                if isinstance(b, tensor_type):
                    a_host, b_host = a.is_cpu, b.is_cpu
                    if a_host and b_host:
                        return NotImplemented
                    if a_host:
                        a = a.to(b.device, non_blocking=True)
                    elif b_host:
                        b = b.to(a.device, non_blocking=True)
                    return elementwise(a, b)
                if type(b) in scalars and not a.is_cpu and a.dtype is not torch.bool:
                    return getattr(a, clamp)(b)
                return NotImplemented
            if isinstance(b, tensor_type) and type(a) in scalars and not b.is_cpu and b.dtype is not torch.bool:
                return getattr(b, clamp)(a)
            return NotImplemented

        def reduce(items: Any) -> Any:
            if not any(isinstance(item, tensor_type) and not item.is_cpu for item in items):
                return NotImplemented
            result = items[0]
            for item in items[1:]:
                result = pair(result, item)
                if result is NotImplemented:
                    return NotImplemented
            return result

        def one_iterable(items: Any) -> Any:
            kind = type(items)
            if (kind is list or kind is tuple) and len(items) > 1 and type(items[0]) not in plain:
                result = reduce(items)
                if result is not NotImplemented:
                    fire()
                return result
            return NotImplemented

        # Positional-only parameters and keyword-only options: no tuple is built for the common calls.
        # (Positional-only names cannot collide with keywords; the builtin takes no such keywords.)
        def minmax(
            _npu_first: Any = _MISSING,
            _npu_second: Any = _MISSING,
            /,
            *rest: Any,
            key: Any = _MISSING,
            default: Any = _MISSING,
            **unknown: Any,
        ) -> Any:
            if not unknown and key is _MISSING:
                if _npu_second is not _MISSING:
                    if not rest and default is _MISSING:
                        # Hot path: two values of types known not to be tensors (a set lookup each).
                        if type(_npu_first) in plain and type(_npu_second) in plain:
                            return original(_npu_first, _npu_second)
                        result = pair(_npu_first, _npu_second)
                        if result is not NotImplemented:
                            fire()
                            return result
                        _learn(type(_npu_first))
                        _learn(type(_npu_second))
                        return original(_npu_first, _npu_second)
                    args = (_npu_first, _npu_second, *rest)
                    if default is _MISSING and not all(type(arg) in plain for arg in args):
                        result = reduce(args)
                        if result is not NotImplemented:
                            fire()
                            return result
                elif _npu_first is not _MISSING:
                    result = one_iterable(_npu_first)
                    if result is not NotImplemented:
                        return result
                    if default is _MISSING:
                        return original(_npu_first)
                    return original(_npu_first, default=default)
            # Everything else, errors included, is the builtin's business.
            if _npu_second is not _MISSING:
                args = (_npu_first, _npu_second, *rest)
            else:
                args = () if _npu_first is _MISSING else (_npu_first,)
            options = unknown  # a fresh dict per call: safe to extend
            if key is not _MISSING:
                options["key"] = key
            if default is not _MISSING:
                options["default"] = default
            return original(*args, **options)

        functools.update_wrapper(minmax, original, assigned=_WRAPPER_ASSIGNED, updated=())
        return minmax

    def check(self, device: torch.device) -> str:
        a = torch.tensor([1.0, 5.0], device=device)
        b = torch.tensor([4.0, 2.0], device=device)
        _expect(max(1, 2) == 2 and min("b", "a") == "a", "non-tensor max/min changed")
        _expect(max([], default=3) == 3 and max((x for x in (1, 9, 4))) == 9, "default=/generator changed")
        if device.type in ("cpu", "meta"):
            _expect(max(torch.tensor(1.0), torch.tensor(2.0)).item() == 2.0, "CPU tensors changed")
            return "CPU tensors keep the builtin behaviour"
        high = max(a, b)
        low = min(a, 3.0)
        _expect(high.cpu().tolist() == [4.0, 5.0], f"max values {high.cpu().tolist()}")
        _expect(low.cpu().tolist() == [1.0, 3.0], f"min values {low.cpu().tolist()}")
        return f"max/min of {device} tensors are elementwise on the device"


# --------------------------------------------------------------------------------------------------------------
# PowFloatSafe


class PowFloatSafe(_Patch):
    """``pow`` with a fractional exponent on integer/bool/float16/bfloat16 accelerator tensors computes in float32.

    The skill document's patch table states the failure on the device and its fix (result ``.float()``). The
    result keeps torch's own result dtype (``torch.result_type(base, exponent)``): float32 for integer bases as
    on CPU, and the half dtype for half bases, so dtypes downstream match CPU/CUDA runs. Covers ``torch.pow``,
    ``Tensor.pow``/``pow_`` and the ``**``/``**=`` operators with Python float or floating tensor exponents.
    """

    name = "PowFloatSafe"
    summary = "fractional pow on int/half accelerator tensors -> float32 compute"

    def install(self) -> None:
        fire = self.fired
        orig_pow = torch.pow

        def needs(base: Any, exponent: Any) -> bool:
            kind = type(exponent)
            if kind is int:
                return False
            if kind is float:
                if exponent.is_integer() or not math.isfinite(exponent):
                    return False
            elif not (isinstance(exponent, _Tensor) and exponent.is_floating_point()):
                return False
            if not isinstance(base, _Tensor) or base.is_cpu or base.is_meta:
                return False
            return base.dtype in _HALF or not (base.is_floating_point() or base.is_complex())

        def compute(base: torch.Tensor, exponent: Any) -> torch.Tensor:
            result_dtype = torch.result_type(base, exponent)
            if isinstance(exponent, _Tensor) and exponent.dtype in _HALF:
                exponent = exponent.float()
            return orig_pow(base.float(), exponent).to(result_dtype)

        def pow(input: Any, exponent: Any, *, out: torch.Tensor | None = None) -> Any:  # noqa: A002
            if needs(input, exponent):
                fire()
                result = compute(input, exponent)
                if out is None:
                    return result
                out.resize_(result.shape)
                return out.copy_(result)
            if out is None:
                return orig_pow(input, exponent)
            return orig_pow(input, exponent, out=out)

        orig_method = _Tensor.pow

        def method(self: torch.Tensor, exponent: Any) -> Any:
            if needs(self, exponent):
                fire()
                return compute(self, exponent)
            return orig_method(self, exponent)

        orig_dunder = _Tensor.__dict__["__pow__"]

        def dunder(self: torch.Tensor, exponent: Any) -> Any:
            if needs(self, exponent):
                fire()
                return compute(self, exponent)
            return orig_dunder(self, exponent)

        def make_inplace(original: Any) -> Any:
            def inplace(self: torch.Tensor, exponent: Any) -> Any:
                # In place keeps the tensor's dtype; integer bases fail as on CPU (float result, int storage).
                if self.dtype in _HALF and needs(self, exponent):
                    fire()
                    return self.copy_(compute(self, exponent))
                return original(self, exponent)

            return inplace

        orig_inplace = _Tensor.pow_
        orig_idunder = _Tensor.__dict__["__ipow__"]
        self.replace(torch, "pow", pow)
        self.replace(_Tensor, "pow", method)
        self.replace(_Tensor, "__pow__", dunder)
        self.replace(_Tensor, "pow_", make_inplace(orig_inplace))
        self.replace(_Tensor, "__ipow__", make_inplace(orig_idunder))

    def check(self, device: torch.device) -> str:
        ints = torch.tensor([4, 9], device=device) ** 0.5
        _expect(ints.dtype is _FLOAT32, f"int ** 0.5 dtype {ints.dtype}")
        _expect(ints.cpu().tolist() == [2.0, 3.0], f"int ** 0.5 values {ints.cpu().tolist()}")
        halves = torch.pow(torch.tensor([4.0, 16.0], dtype=torch.float16, device=device), 0.5)
        _expect(halves.dtype is torch.float16, f"half pow dtype {halves.dtype}")
        _expect(halves.cpu().tolist() == [2.0, 4.0], f"half pow values {halves.cpu().tolist()}")
        return f"fractional pow on int/half {device} tensors"


# --------------------------------------------------------------------------------------------------------------
# SdpaMaskBroadcast


def _fit_mask(mask: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor | None:
    """The smallest expansion of a broadcast bool mask to a layout flash attention accepts (None: leave it).

    Accepted layouts (NPU-FACTS.md, "Attention"): [B,N,Sq,Skv], [B,1,Sq,Skv], [1,1,Sq,Skv], [Sq,Skv].
    """
    batch, heads, sq = query.shape[0], query.shape[1], query.shape[2]
    skv = key.shape[-2]
    shape = tuple(mask.shape)
    if len(shape) > 4:
        return None
    if shape == (sq, skv):
        return None
    full = (1,) * (4 - len(shape)) + shape
    mb, mn, ms, mk = full
    for size, want in ((mb, batch), (mn, heads), (ms, sq), (mk, skv)):
        if size not in (1, want):
            return None  # not broadcastable: let SDPA raise its own error
    if mn == 1 or heads == 1:
        target = (1, 1, sq, skv) if mb == 1 or batch == 1 else (batch, 1, sq, skv)
        if batch == 1 and mb == 1:
            target = (1, 1, sq, skv)
    else:
        target = (batch, heads, sq, skv)
    if full == target:
        return None if len(shape) == 4 else mask.reshape(target)
    return mask.reshape(full).expand(target)


class SdpaMaskBroadcast(_Patch):
    """Broadcast bool masks for ``F.scaled_dot_product_attention`` on accelerators are expanded first.

    On Ascend, SDPA runs ``aclnnFlashAttentionScore``, which rejects broadcast masks such as [B,1,1,Skv] or
    [B,N,1,Skv] with error code 561103 (NPU-FACTS.md, "Attention"; fixed upstream only in op-plugin 26.1.0).
    The mask is expanded only as far as an accepted layout needs: [1,1,Sq,Skv] when it broadcasts over batch
    and heads, [B,1,Sq,Skv] when only the heads broadcast, [B,N,Sq,Skv] otherwise. ``expand`` makes a view; a
    kernel that needs contiguous memory materializes it (a [B,N,Sq,Skv] bool mask at B=8, N=32, S=4096 is 4 GiB,
    which is why the head dimension is kept at 1 whenever possible). Float (additive) masks are left alone.

    Caught: ``torch.nn.functional.scaled_dot_product_attention`` and ``torch._C._nn.scaled_dot_product_attention``
    looked up at call time (including by torch's own ``nn.MultiheadAttention`` Python path), and module-level
    names bound before ``apply()`` (``from torch.nn.functional import scaled_dot_product_attention as sdpa``).
    Not caught: references kept elsewhere before ``apply()`` (instance/class attributes, closures, default
    arguments, dicts), graphs captured by ``torch.compile``/``torch.jit`` before ``apply()``, and C++ callers
    (the fused inference fast paths of ``nn.MultiheadAttention``/``nn.TransformerEncoderLayer``).
    """

    name = "SdpaMaskBroadcast"
    summary = "broadcast bool SDPA masks -> the smallest accepted layout (error 561103)"

    def install(self) -> None:
        fire = self.fired
        functional = torch.nn.functional
        original = functional.scaled_dot_product_attention

        def scaled_dot_product_attention(
            query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any = None, *args: Any, **kwargs: Any
        ) -> torch.Tensor:
            if (
                attn_mask is not None
                and attn_mask.dtype is torch.bool
                and query.dim() == 4
                and not (query.is_cpu or query.is_meta)
            ):
                fitted = _fit_mask(attn_mask, query, key)
                if fitted is not None:
                    fire()
                    attn_mask = fitted
            return original(query, key, value, attn_mask, *args, **kwargs)

        self.replace(functional, "scaled_dot_product_attention", scaled_dot_product_attention)
        c_nn = torch._C._nn
        if getattr(c_nn, "scaled_dot_product_attention", None) is original:
            self.swap(c_nn, "scaled_dot_product_attention", scaled_dot_product_attention)
        rebound = self.rebind_module_globals(
            original, scaled_dot_product_attention, skip=("torch.nn.functional", "torch._C._nn")
        )
        if rebound:
            self.notes.append("rebound early imports: " + ", ".join(sorted(rebound)))

    def check(self, device: torch.device) -> str:
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(2, 3, 4, 8, generator=gen) for _ in range(3))
        mask = torch.ones(2, 1, 1, 4, dtype=torch.bool)
        mask[0, 0, 0, 3] = False
        mask[1, 0, 0, 0] = False
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, mask.expand(2, 3, 4, 4))
        got = torch.nn.functional.scaled_dot_product_attention(q.to(device), k.to(device), v.to(device), mask.to(device))
        _expect(got.device.type == device.type, f"output on {got.device}")
        _expect(torch.allclose(got.cpu(), expected, atol=1e-5), "output differs from the CPU reference")
        return f"[B,1,1,Skv] bool mask on {device} matches the CPU reference"


# --------------------------------------------------------------------------------------------------------------
# AdamWFused (opt-in)

_UNSUPPORTED_ADAMW = ("maximize", "capturable", "differentiable")
_DROPPED_ADAMW = ("foreach", "fused")


class AdamWFused(_Patch):
    """``torch.optim.AdamW(...)`` -> ``torch_npu.optim.NpuFusedAdamW`` (opt-in: ``build_vla_patcher(fused_adamw=True)``).

    NpuFusedAdamW flattens the params into contiguous buffers on the first step. Memory: Huawei's advice is about
    +70% (NPU-FACTS.md, "Optimizers"): large models on a full device may run out of memory; on 910B/910_93 stock
    ``AdamW(foreach=True)`` is already multi-tensor. Its restrictions and how this patch handles them:

    - bf16 params raise TypeError -> such optimizers fall back to stock AdamW with a warning (also for params
      not on an accelerator, other dtypes, or ``maximize``/``capturable``/``differentiable``);
      ``foreach``/``fused`` are dropped.
    - ``zero_grad(set_to_none=True)`` raises ValueError -> the returned optimizer zeroes in place instead (grads
      are zero tensors, not None). Do not call ``model.zero_grad(set_to_none=True)`` with it.
    - Params must never be re-allocated after the first step; params without a grad at the first step are left
      out for good.
    ``isinstance(opt, torch.optim.AdamW)`` stays True for the fused optimizer while applied (the replacement
    checks both classes), but the original class (``from torch.optim import AdamW`` kept elsewhere before
    ``apply()``) does not know it; module-level names bound before ``apply()`` are rebound. Subclassing
    ``torch.optim.AdamW`` while applied is not supported: subclass before ``apply()``.
    """

    name = "AdamWFused"
    summary = "torch.optim.AdamW -> torch_npu.optim.NpuFusedAdamW (opt-in; ~+70% optimizer memory)"

    def skip_reason(self) -> str | None:
        try:
            torch_npu = importlib.import_module("torch_npu")
            optim = importlib.import_module("torch_npu.optim")
        except ImportError as err:
            return f"torch_npu is not importable ({err})"
        del torch_npu
        if getattr(optim, "NpuFusedAdamW", None) is None:
            return "torch_npu.optim has no NpuFusedAdamW"
        return None

    def install(self) -> None:
        fused_base = importlib.import_module("torch_npu.optim").NpuFusedAdamW
        original = torch.optim.AdamW
        patch = self

        class FusedAdamW(fused_base):  # type: ignore[misc, valid-type]
            """NpuFusedAdamW whose ``zero_grad`` zeroes in place (set_to_none is unsupported there)."""

            def zero_grad(self, set_to_none: bool = True) -> None:
                del set_to_none
                super().zero_grad(set_to_none=False)

        class AdamWMeta(type):
            def __instancecheck__(cls, obj: Any) -> bool:
                return isinstance(obj, (original, FusedAdamW))

            def __subclasscheck__(cls, sub: Any) -> bool:
                return isinstance(sub, type) and issubclass(sub, (original, FusedAdamW))

            def __call__(cls, params: Any, *args: Any, **kwargs: Any) -> Any:
                groups = _materialize_params(params)
                reason = _fused_fallback_reason(groups, args, kwargs)
                if reason is not None:
                    warnings.warn(
                        f"AdamWFused: using torch.optim.AdamW, not NpuFusedAdamW: {reason}",
                        RuntimeWarning,
                        stacklevel=2,
                    )
                    return original(groups, *args, **kwargs)
                for name in _DROPPED_ADAMW:
                    kwargs.pop(name, None)
                for name in _UNSUPPORTED_ADAMW:
                    kwargs.pop(name, None)
                patch.fired()
                return FusedAdamW(groups, *args, **kwargs)

        replacement = AdamWMeta("AdamW", (), {"__doc__": original.__doc__, "__module__": original.__module__})
        self.swap(torch.optim, "AdamW", replacement)
        adamw_module = sys.modules.get("torch.optim.adamw")
        if adamw_module is not None and getattr(adamw_module, "AdamW", None) is original:
            self.swap(adamw_module, "AdamW", replacement)
        rebound = self.rebind_module_globals(original, replacement, skip=("torch.optim", "torch.optim.adamw"))
        if rebound:
            self.notes.append("rebound early imports: " + ", ".join(sorted(rebound)))

    def check(self, device: torch.device) -> str:
        if device.type in ("cpu", "meta"):
            return "needs an accelerator device; CPU params use stock AdamW"
        param = torch.nn.Parameter(torch.ones(4, device=device))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            opt = torch.optim.AdamW([param], lr=0.1)
        fallbacks = [str(w.message) for w in caught if "AdamWFused" in str(w.message)]
        _expect(not fallbacks, "; ".join(fallbacks))
        _expect(isinstance(opt, torch.optim.AdamW), "isinstance(opt, torch.optim.AdamW) is False")
        param.grad = torch.ones_like(param)
        opt.step()
        opt.zero_grad()
        _expect(bool((param.detach().cpu() < 1.0).all()), "the fused step did not update the parameter")
        return f"{type(opt).__mro__[1].__name__} stepped on {device}"


def _materialize_params(params: Any) -> Any:
    if isinstance(params, _Tensor):
        return [params]
    items = list(params)
    if items and isinstance(items[0], dict):
        return [dict(group, params=list(group["params"])) for group in items]
    return items


def _iter_params(groups: Any) -> Iterator[torch.Tensor]:
    for item in groups:
        if isinstance(item, dict):
            params = item["params"]
            yield from ([params] if isinstance(params, _Tensor) else params)
        elif isinstance(item, tuple):  # named parameters
            yield item[1]
        else:
            yield item


def _fused_fallback_reason(groups: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    for name in _UNSUPPORTED_ADAMW:
        if kwargs.get(name):
            return f"{name}=True is not supported by NpuFusedAdamW"
    if len(args) > 4:
        return "positional arguments beyond amsgrad are not supported by NpuFusedAdamW"
    for param in _iter_params(groups):
        if not isinstance(param, _Tensor):
            return "parameters are not tensors"
        if param.dtype is torch.bfloat16:
            return "bfloat16 parameters (NpuFusedAdamW raises TypeError for bf16; NPU-FACTS.md, 'Optimizers')"
        if param.dtype not in (torch.float32, torch.float16):
            return f"{param.dtype} parameters (NpuFusedAdamW takes float32/float16)"
        if not _on_accelerator(param):
            return f"parameters on {param.device} (create the optimizer after model.to(device))"
    return None


# --------------------------------------------------------------------------------------------------------------
# The patcher

_ORDER: tuple[type[_Patch], ...] = (
    Float64To32,
    TensorNumpySafe,
    NanToNumSafe,
    TensorIndexDevice,
    TorchTensorSafe,
    BuiltinMinMaxNPU,
    PowFloatSafe,
    SdpaMaskBroadcast,
    AdamWFused,
)
PATCH_NAMES: tuple[str, ...] = tuple(cls.name for cls in _ORDER)
_OPT_IN = frozenset({"AdamWFused"})

#: Where the process-wide patcher state lives: one holder in ``sys.modules``, shared by every copy of this module
#: that a process imports (``runtime_patches`` and ``migrate_to_cloudrobo.runtime_patches`` are two module objects
#: for one file), so that two copies never patch the same objects twice.
_STATE_MODULE = "_npu_runtime_patches_state"


def _process_state() -> types.ModuleType:
    state = sys.modules.get(_STATE_MODULE)
    if not isinstance(getattr(state, "active", None), list) or not isinstance(getattr(state, "warned", None), set):
        state = types.ModuleType(_STATE_MODULE, "The runtime patcher applied in this process (runtime_patches.py).")
        state.active = []
        state.warned = set()
        sys.modules[_STATE_MODULE] = state
    return state


_ACTIVE: list[Patcher] = _process_state().active


def active_patcher() -> Patcher | None:
    """The patcher applied in this process, if any."""
    return _ACTIVE[-1] if _ACTIVE else None


def _setup_site() -> str:
    """``file:line`` of the first frame outside this module (where a setup called :meth:`Patcher.apply`)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    return "an unknown place" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _options_text(options: dict[str, Any]) -> str:
    return ", ".join(f"{name}={value}" for name, value in options.items())


def _second_setup(active: Patcher, second: Patcher) -> None:
    """A setup found ``active`` already applied: keep it; warn once per conflict when ``second`` asks for other options."""
    options = getattr(active, "options", None)
    first = options() if callable(options) else {}
    wanted = second.options()
    differs = {name: value for name, value in wanted.items() if first.get(name) != value}
    if not differs:
        return
    key = (tuple(sorted(first.items())), tuple(sorted(wanted.items())))
    warned = _process_state().warned
    if key in warned:
        return
    warned.add(key)
    first_site = getattr(active, "applied_at", None) or "an unknown place"
    msg = (
        f"a runtime patcher is already applied in this process (set up at {first_site}); the setup at "
        f"{_setup_site()} asks for {_options_text(differs)} but the first patcher has "
        f"{_options_text({name: first.get(name) for name in differs})}; the first patcher stays applied and this "
        "setup does nothing (give both setups the same options, or keep one setup per program)"
    )
    warnings.warn(msg, RuntimeWarning, stacklevel=3)


class Patcher:
    """A set of runtime patches applied and removed together (also a context manager)."""

    def __init__(self, patches: list[_Patch], enabled: dict[str, bool]) -> None:
        self._patches = patches
        self._enabled = dict(enabled)
        self._skipped: dict[str, str] = {}
        self._applied = False
        self._was_applied = False
        #: ``file:line`` of the code that applied this patcher (while applied).
        self.applied_at: str | None = None

    # -- configuration --
    @property
    def patches(self) -> tuple[str, ...]:
        return tuple(patch.name for patch in self._patches)

    def options(self) -> dict[str, Any]:
        """What this patcher was built with: ``tensor_index`` and, per patch, whether it is enabled."""
        options: dict[str, Any] = {}
        for patch in self._patches:
            if isinstance(patch, TensorIndexDevice):
                options["tensor_index"] = patch.strategy
        options.update(self._enabled)
        return options

    def is_enabled(self, name: str) -> bool:
        self._known(name)
        return self._enabled[name]

    def enable(self, name: str) -> Patcher:
        return self._set(name, True)

    def disable(self, name: str) -> Patcher:
        return self._set(name, False)

    def _set(self, name: str, on: bool) -> Patcher:
        self._known(name)
        if self._applied:
            msg = f"cannot change {name} while the patcher is applied; remove() first"
            raise RuntimeError(msg)
        self._enabled[name] = on
        return self

    def _known(self, name: str) -> None:
        if name not in self._enabled:
            msg = f"unknown patch {name!r}; known patches: {', '.join(PATCH_NAMES)}"
            raise ValueError(msg)

    # -- life cycle --
    @property
    def applied(self) -> bool:
        return self._applied

    def apply(self) -> Patcher:
        """Install every enabled patch and return the patcher in effect (idempotent).

        One patcher is applied per process. When another one already is (two entry files that each set up the NPU
        and import each other, or a module with its own setup imported by an entry), this call does nothing and
        returns that first patcher; if this patcher was built with other options, a ``RuntimeWarning`` naming both
        setups says so, once per conflict. ``remove()`` the first patcher to apply another one.
        """
        if self._applied:
            return self
        active = active_patcher()
        if active is not None:
            _second_setup(active, self)
            return active
        self._skipped.clear()
        done: list[_Patch] = []
        try:
            for patch in self._patches:
                if not self._enabled[patch.name]:
                    continue
                reason = patch.skip_reason()
                if reason is not None:
                    self._skipped[patch.name] = reason
                    continue
                done.append(patch)
                patch.notes.clear()
                patch.install()
        except BaseException:
            for patch in reversed(done):
                patch.uninstall()
            raise
        self._applied = True
        self._was_applied = True
        self.applied_at = _setup_site()
        _ACTIVE.append(self)
        return self

    def remove(self) -> None:
        """Put back every original object (idempotent)."""
        if not self._applied:
            return
        for patch in reversed(self._patches):
            patch.uninstall()
        self._applied = False
        self.applied_at = None
        _ACTIVE.remove(self)

    def __enter__(self) -> Patcher:
        return self.apply()

    def __exit__(self, *exc: object) -> None:
        self.remove()

    # -- report --
    def report(self) -> list[PatchStatus]:
        """One row per patch: state, reason, how often it fired and the first call site outside torch."""
        rows = []
        for patch in self._patches:
            reason = ""
            if not self._enabled[patch.name]:
                state = "disabled"
                reason = "opt-in: build_vla_patcher(fused_adamw=True)" if patch.name in _OPT_IN else "disabled"
            elif patch.name in self._skipped:
                state, reason = "skipped", self._skipped[patch.name]
            elif patch.installed:
                state = "applied"
            else:
                state = "removed" if self._was_applied else "not applied"
            notes = list(patch.notes)
            if isinstance(patch, TensorIndexDevice) and state in ("applied", "removed") and patch.strategy == "slot":
                if not self._enabled["TorchTensorSafe"]:
                    notes.append("TorchTensorSafe is off: torch.tensor([0-dim tensors]) raises TypeError")
                if state == "removed":
                    notes.append("the Tensor sq_item slot effect stays for this process (see the patch doc)")
            if notes:
                reason = "; ".join(([reason] if reason else []) + notes)
            rows.append(
                PatchStatus(patch.name, state, reason, patch.fires, patch.first_call_site, patch.summary)
            )
        return rows

    def fires(self) -> dict[str, int]:
        return {patch.name: patch.fires for patch in self._patches}

    def print_report(self, file: TextIO | None = None) -> None:
        """A readable table of :meth:`report` (stderr by default)."""
        out = sys.stderr if file is None else file
        rows = self.report()
        width = builtins.max(len(row.name) for row in rows)
        out.write("npu runtime patches:\n")
        for row in rows:
            line = f"  {row.name:<{width}}  {row.state:<11}"
            if row.state in ("applied", "removed"):
                line += f" fired {row.fires}x"
                if row.first_call_site:
                    line += f", first at {row.first_call_site}"
            if row.reason:
                line += f" ({row.reason})"
            out.write(line + "\n")

    def self_test(self, device: str | torch.device | None = None) -> list[tuple[str, bool, str]]:
        """Run each patch's check on ``device`` (default: the available accelerator, else cpu)."""
        target = torch.device(device) if device is not None else _detect_device()
        was_applied = self._applied
        if not was_applied:
            self.apply()
        results: list[tuple[str, bool, str]] = []
        try:
            for patch in self._patches:
                if not patch.installed:
                    state = self._skipped.get(patch.name)
                    detail = f"skipped: {state}" if state else "not enabled"
                    results.append((patch.name, True, detail))
                    continue
                fires, site = patch.fires, patch.first_call_site
                try:
                    results.append((patch.name, True, patch.check(target)))
                except Exception as err:  # noqa: BLE001 - every failure becomes a report row
                    results.append((patch.name, False, f"{type(err).__name__}: {err}"))
                finally:
                    patch.fires, patch.first_call_site = fires, site
        finally:
            if not was_applied:
                self.remove()
        return results


def _detect_device() -> torch.device:
    if "torch_npu" in sys.modules or importlib.util.find_spec("torch_npu") is not None:
        try:
            importlib.import_module("torch_npu")
        except Exception:  # noqa: BLE001 - no usable torch_npu: look further
            pass
    npu = getattr(torch, "npu", None)
    if npu is not None and callable(getattr(npu, "is_available", None)) and npu.is_available():
        return torch.device("npu", 0)
    if torch.cuda.is_available():
        return torch.device("cuda", 0)
    return torch.device("cpu")


def build_vla_patcher(fused_adamw: bool = False, tensor_index: str = "slot", **toggles: bool) -> Patcher:
    """The patcher for VLA training on Ascend: every patch on except AdamWFused (``fused_adamw=True``).

    ``toggles`` turn patches on or off by name (``BuiltinMinMaxNPU=False``); ``NPU_PATCHES_DISABLE`` (a
    comma-separated list of names) turns them off from the environment. ``tensor_index`` picks
    TensorIndexDevice's implementation: ``"slot"`` (default, cheap) or ``"mode"`` (fully reversible, slower).
    """
    enabled = {name: name not in _OPT_IN for name in PATCH_NAMES}
    enabled["AdamWFused"] = bool(fused_adamw)
    for raw in os.environ.get(_ENV_DISABLE, "").split(","):
        name = raw.strip()
        if not name:
            continue
        if name not in enabled:
            msg = f"{_ENV_DISABLE}: unknown patch {name!r}; known patches: {', '.join(PATCH_NAMES)}"
            raise ValueError(msg)
        enabled[name] = False
    for name, on in toggles.items():
        if name not in enabled:
            msg = f"unknown patch {name!r}; known patches: {', '.join(PATCH_NAMES)}"
            raise ValueError(msg)
        enabled[name] = bool(on)
    patches: list[_Patch] = []
    for cls in _ORDER:
        patches.append(TensorIndexDevice(tensor_index) if cls is TensorIndexDevice else cls())
    return Patcher(patches, enabled)


build_npu_patcher = build_vla_patcher


def self_test(device: str | torch.device | None = None, **patcher_options: Any) -> list[tuple[str, bool, str]]:
    """``(patch, ok, detail)`` for every patch, checked on ``device`` (default: npu, else cuda, else cpu).

    Uses the applied patcher if there is one, else builds one with ``patcher_options`` and applies it for the
    duration of the checks.
    """
    patcher = active_patcher()
    if patcher is None:
        patcher = build_vla_patcher(**patcher_options)
    return patcher.self_test(device)


def _main(argv: list[str]) -> int:
    """``python runtime_patches.py [DEVICE]``: print the self-test; exit 1 if a check failed."""
    results = self_test(argv[0] if argv else None)
    failed = 0
    for name, ok, detail in results:
        failed += not ok
        sys.stdout.write(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}\n")
    return 1 if failed else 0


def _mark_program_end() -> None:
    """Under npu-train (``$NPU_PATCHER_EXIT_MARKER``), leave a file named after this process when the interpreter
    starts its exit, after the program's own ``atexit`` handlers: npu-train then tells an abort at exit from a crash
    of the training."""
    import atexit

    folder = os.environ.get("NPU_PATCHER_EXIT_MARKER")
    if not folder:
        return

    def mark() -> None:
        try:
            with open(os.path.join(folder, str(os.getpid())), "w", encoding="utf-8"):
                pass
        except OSError:
            pass

    atexit.register(mark)


_mark_program_end()


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
