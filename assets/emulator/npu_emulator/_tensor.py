"""The device tensor of the emulated ``npu`` backend.

An :class:`NPUTensor` is a wrapper tensor whose metadata says ``npu:N`` and which holds a CPU tensor (``elem``);
``index`` is N. Ops mixing tensors of two devices fail as torch's same-device check does.
Every aten op that reaches it goes through :meth:`NPUTensor.__torch_dispatch__`: the arguments are unwrapped, the
restrictions of :mod:`npu_emulator._rules` are checked, the op runs on CPU and tensor results are wrapped again.
In-place and ``out=`` ops return the original wrapper, so aliasing and identity behave as on a real device.
"""

from __future__ import annotations

import collections
import copy
import functools
from typing import Any

import torch

from npu_emulator import _checks, _devices
from npu_emulator._errors import EmulatedNPUError, emulated_message
from npu_emulator._rules import ENABLED

aten = torch.ops.aten

# Set by install(): the device type "npu" exists only after PrivateUse1 was renamed.
DEVICE = torch.device("cpu")
_DEVICES: dict[int, torch.device] = {}


def _device(index: int) -> torch.device:
    found = _DEVICES.get(index)
    if found is None:
        found = DEVICE if index == 0 else torch.device(DEVICE.type, index)
        _DEVICES[index] = found
    return found

# torch.Tensor's C base class (torch._C._TensorBase before torch 2.2).
TensorBase: Any = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase
# The C method; a runtime patch replaces torch.Tensor.numpy, never the base class's.
_ORIGINAL_NUMPY = TensorBase.numpy
_NUMPY_MESSAGE = (
    "can't convert npu:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first."
)

# Ops whose job is to move data between devices: they may mix npu and CPU tensors of any shape.
_CROSS_DEVICE_OK = frozenset(
    {
        aten.copy_,
        aten._to_copy,
        aten._copy_from,
        aten._copy_from_and_resize,
    }
)
_INDEX_OPS = frozenset(
    {
        aten.index,
        aten.index_put,
        aten.index_put_,
        aten._index_put_impl_,
        aten._unsafe_index,
        aten._unsafe_index_put,
    }
)


def _device_numpy(tensor: NPUTensor, *, force: bool = False) -> Any:
    """``Tensor.numpy()`` of a device tensor: fails as on a real device (``force=True`` copies to host)."""
    if force:  # as for any device tensor: a host copy
        return tensor.elem.detach().clone().numpy()
    if not ENABLED["numpy"]:
        return tensor.elem.detach().numpy()
    raise _checks.numpy_error(_NUMPY_MESSAGE)


class _NumpyMethod:
    """``NPUTensor.numpy``: the device behaviour, or ``torch.Tensor.numpy`` once something replaced it.

    A descriptor rather than a method so that a replaced ``torch.Tensor.numpy`` (a runtime patch) is called
    directly from the user's frame, exactly as for a real device tensor.
    """

    def __get__(self, instance: NPUTensor | None, owner: type) -> Any:
        current = torch.Tensor.numpy
        if current is not _ORIGINAL_NUMPY:
            bind = getattr(current, "__get__", None)
            if instance is None or bind is None:
                return current if instance is None else functools.partial(current, instance)
            return bind(instance, owner)
        if instance is None:
            return _device_numpy
        return functools.partial(_device_numpy, instance)


class NPUTensor(torch.Tensor):
    """A tensor on the emulated device ``npu:index`` (default: the current device), backed by the CPU tensor
    ``elem``."""

    elem: torch.Tensor
    index: int

    @staticmethod
    def __new__(cls, elem: torch.Tensor, requires_grad: bool = False, index: int | None = None) -> NPUTensor:
        if isinstance(elem, NPUTensor):
            if index is None:
                index = elem.index
            elem = elem.elem
        if index is None:
            index = _devices.current()
        wrapper = torch.Tensor._make_wrapper_subclass(
            cls,
            elem.size(),
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            layout=elem.layout,
            device=_device(index),
            requires_grad=requires_grad,
        )
        wrapper.elem = elem
        wrapper.index = index
        return wrapper

    # No per-call __torch_function__ work: only aten dispatch is intercepted.
    __torch_function__ = torch._C._disabled_torch_function_impl

    # -- traceable-wrapper-subclass protocol: Module._apply swaps tensors in place (Parameter identity kept) --
    def __tensor_flatten__(self) -> tuple[list[str], int]:
        return ["elem"], self.index

    @staticmethod
    def __tensor_unflatten__(
        inner: dict[str, torch.Tensor], meta: object, outer_size: object, outer_stride: object
    ) -> NPUTensor:
        del outer_size, outer_stride
        return NPUTensor(inner["elem"], index=meta if isinstance(meta, int) else None)

    def __repr__(self, *, tensor_contents: object = None) -> str:
        del tensor_contents
        text = repr(self.elem)
        if not text.endswith(")"):
            return text
        extra = f", device='npu:{self.index}'"
        if self.grad_fn is not None:
            extra += f", grad_fn=<{type(self.grad_fn).__name__}>"
        elif self.requires_grad:
            extra += ", requires_grad=True"
        return f"{text[:-1]}{extra})"

    # -- methods that torch refuses for every tensor subclass; give them their device semantics --
    numpy = _NumpyMethod()

    @property
    def data(self) -> torch.Tensor:
        return TensorBase.data.__get__(self)

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        if not isinstance(value, NPUTensor):
            detail = f"assigning a {value.device} tensor to .data of an npu tensor"
            msg = emulated_message(
                "not supported by the emulator", detail, "the emulator keeps npu tensors on the npu device"
            )
            raise EmulatedNPUError(msg)
        TensorBase.data.__set__(self, value)
        self.elem = value.elem
        self.index = value.index

    def tolist(self) -> Any:
        return self.elem.tolist()

    def data_ptr(self) -> int:
        return self.elem.data_ptr()

    def untyped_storage(self) -> torch.UntypedStorage:
        """The backing storage (host memory): its ``data_ptr()`` identifies shared tensors, as on a device."""
        return self.elem.untyped_storage()

    def __deepcopy__(self, memo: dict[int, Any]) -> NPUTensor:
        if id(self) in memo:
            return memo[id(self)]
        if not self.is_leaf:
            msg = (
                "Only Tensors created explicitly by the user (graph leaves) support the deepcopy protocol at "
                "the moment."
            )
            raise RuntimeError(msg)
        with torch.no_grad():
            new = NPUTensor(self.elem.clone(), requires_grad=self.requires_grad, index=self.index)
        memo[id(self)] = new
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        for key, value in self.__dict__.items():
            setattr(new, key, copy.deepcopy(value, memo))
        return new

    def __reduce_ex__(self, proto: int) -> Any:
        # Saved as plain CPU tensors: checkpoints written under the emulator load anywhere (also with
        # torch.load(weights_only=True)); load_state_dict copies them back onto the device.
        data = self.elem.detach()
        if getattr(self, "_is_param", False):
            return torch._utils._rebuild_parameter, (data, self.requires_grad, collections.OrderedDict())
        if self.requires_grad:
            data = data.clone().requires_grad_(True)
        return data.__reduce_ex__(proto)

    @classmethod
    def __torch_dispatch__(
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        del types
        info = _OP_INFO.get(func)
        if info is None:
            info = _OP_INFO[func] = _op_info(func)
        cross_device_ok, index_op, rule, random_op = info
        originals: dict[int, Any] = {}
        cpu_dense: list[torch.Tensor] = []
        npu_dtypes: list[torch.dtype] = []
        indices: list[int] = []
        new_args = [_unwrap(a, originals, cpu_dense, npu_dtypes, indices) for a in args]
        new_kwargs: dict[str, Any] = {}
        to_device = True
        target_index = None
        if kwargs:
            for key, value in kwargs.items():
                if key == "device" and value is not None:
                    target = torch.device(value)
                    if target.type == "npu":
                        target_index = _checks.check_device_index(target, func)
                        new_kwargs[key] = torch.device("cpu")
                        continue
                    to_device = False
                new_kwargs[key] = _unwrap(value, originals, cpu_dense, npu_dtypes, indices)

        index = indices[0] if indices else None
        if not cross_device_ok:
            if index is not None and len(indices) > 1:
                for other in indices:
                    if other != index:
                        _checks.devices_mismatch(func, index, other)
            if cpu_dense and npu_dtypes:
                if index_op:
                    _checks.index_device(func, args, index or 0)
                else:
                    _checks.device_mismatch(func, index or 0)
        if target_index is not None:
            index = target_index
        if rule is not None:
            rule(func, new_args, new_kwargs, npu_dtypes)

        if random_op and new_kwargs.get("generator") is None:
            out = _checks.run_random(func, new_args, new_kwargs)
        else:
            out = func(*new_args, **new_kwargs)
        return _wrap(out, originals, to_device, index)


# Per-op facts, computed once per OpOverload: (may mix devices, is an index op, restriction rule, draws random).
_OP_INFO: dict[Any, tuple[bool, bool, Any, bool]] = {}


def _op_info(func: Any) -> tuple[bool, bool, Any, bool]:
    packet = func.overloadpacket
    return (
        packet in _CROSS_DEVICE_OK,
        packet in _INDEX_OPS,
        _checks.OP_RULES.get(packet),
        packet in _checks.RANDOM_OPS,
    )


def _unwrap(
    value: Any,
    originals: dict[int, Any],
    cpu_dense: list[torch.Tensor],
    npu_dtypes: list[torch.dtype],
    indices: list[int],
) -> Any:
    """The CPU tensor behind an npu tensor (recording what the checks need); other values unchanged."""
    if isinstance(value, NPUTensor):
        elem = value.elem
        originals[id(elem)] = value
        npu_dtypes.append(elem.dtype)
        indices.append(value.index)
        return elem
    if isinstance(value, torch.Tensor):
        originals[id(value)] = value
        if value.dim() != 0 and value.device.type == "cpu":
            cpu_dense.append(value)
        return value
    if isinstance(value, (list, tuple)) and value and not isinstance(value, torch.Size):
        return type(value)(_unwrap(item, originals, cpu_dense, npu_dtypes, indices) for item in value)
    return value


def _wrap(out: Any, originals: dict[int, Any], to_device: bool, index: int | None = None) -> Any:
    if isinstance(out, torch.Tensor):
        original = originals.get(id(out))
        if original is not None:
            if isinstance(original, NPUTensor):
                _resync(original)
            return original
        if not to_device:
            return out
        return NPUTensor(out, index=index)
    if isinstance(out, (list, tuple)):
        return type(out)(_wrap(item, originals, to_device, index) for item in out)
    return out


def _resync(wrapper: NPUTensor) -> None:
    """Make the wrapper's sizes/strides follow its backing tensor after a write-alias op (resize_, t_, out=)."""
    elem = wrapper.elem
    if (
        wrapper.shape == elem.shape
        and wrapper.stride() == elem.stride()
        and wrapper.storage_offset() == elem.storage_offset()
    ):
        return
    replacement = NPUTensor(elem, index=wrapper.index)
    with torch.no_grad():
        TensorBase.data.__set__(wrapper, replacement)
    wrapper.elem = elem


def to_npu(tensor: torch.Tensor) -> NPUTensor:
    """Copy a CPU tensor onto the emulated device (keeps ``requires_grad`` as a leaf)."""
    if isinstance(tensor, NPUTensor):
        return tensor
    return NPUTensor(tensor.detach().clone(), requires_grad=tensor.requires_grad)
