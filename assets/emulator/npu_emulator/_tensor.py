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
import os
from typing import Any

import torch

from npu_emulator import _checks, _devices, _kernels, _ledger, _rnn, _serialization, _shapes, _streams
from npu_emulator._errors import EmulatedNPUError, emulated_message, limitation, record_fault
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
        if tensor.elem.is_meta:
            return tensor.detach().cpu().numpy()  # shapes-only: the host stand-in (npu_emulator._shapes)
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
        _ledger.track(elem, index)
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
        try:
            return _repr(self, tensor_contents)
        except Exception as error:  # noqa: BLE001 - an emulator fault, reported as such
            raise limitation("Tensor.__repr__", error) from error

    def __format__(self, format_spec: str) -> str:
        # torch's Tensor.__format__ formats a 0-dim tensor as its Python number only for plain tensors.
        if self.dim() == 0:
            return self.detach().item().__format__(format_spec)
        if format_spec:
            msg = "unsupported format string passed to Tensor.__format__"
            raise TypeError(msg)
        return str(self)

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
        if self.elem.is_meta:
            return self.cpu().tolist()  # shapes-only: the host stand-in (npu_emulator._shapes)
        return self.elem.tolist()

    def data_ptr(self) -> int:
        return self.elem.data_ptr()

    def untyped_storage(self) -> torch.UntypedStorage:
        """The backing storage (host memory): its ``data_ptr()`` identifies shared tensors, as on a device."""
        return self.elem.untyped_storage()

    def record_stream(self, stream: Any) -> None:
        """``Tensor.record_stream`` with a stream of the emulated device (torch_npu has an NPU kernel for it; the
        emulated device runs every op synchronously, so there is nothing to record). Other streams: torch's."""
        if isinstance(stream, _streams.Stream):
            return None
        return super().record_stream(stream)

    def __deepcopy__(self, memo: dict[Any, Any]) -> NPUTensor:
        if id(self) in memo:
            return memo[id(self)]
        if not self.is_leaf:
            return torch.Tensor.__deepcopy__(self, memo)  # torch's own error for a non-leaf tensor
        if getattr(self, "_is_param", False):
            # As torch.nn.Parameter.__deepcopy__: a clone of the data, without its .grad.
            with torch.no_grad():
                data = NPUTensor(self.elem.clone(memory_format=torch.preserve_format), index=self.index)
            result = torch.nn.Parameter(data, self.requires_grad)
            memo[id(self)] = result
            return result
        elem = self.elem
        # Tensors sharing a storage share its copy, as torch's deepcopy of storages through the memo does.
        key = ("npu_emulator.storage", elem.untyped_storage()._cdata)
        storage = memo.get(key)
        if storage is None:
            storage = memo[key] = elem.untyped_storage().clone()
            memo.setdefault(id(memo), []).append(elem)  # keep the source alive while the memo refers to it
        with torch.no_grad():
            copied = torch.empty(0, dtype=elem.dtype).set_(storage, elem.storage_offset(), elem.size(), elem.stride())
            new = NPUTensor(copied, requires_grad=self.requires_grad, index=self.index)
        memo[id(self)] = new
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        for key_, value in self.__dict__.items():
            if key_ in ("elem", "index"):
                continue
            setattr(new, key_, copy.deepcopy(value, memo))
        return new

    def __reduce_ex__(self, proto: int) -> Any:
        # What a device tensor gives (torch._utils._rebuild_tensor_v2 over its storage, tagged npu:N at save time;
        # see _serialization): torch.load(weights_only=True) accepts it and rebuilds it on the device.
        elem = self.elem
        _serialization.remember_saved(elem, self.index)
        data = elem.detach()
        if getattr(self, "_is_param", False):
            return torch._utils._rebuild_parameter, (self.detach(), self.requires_grad, collections.OrderedDict())
        func, args = data._reduce_ex_internal(proto)
        # Rebuilt in this process (copy.copy), the tensor is a device tensor over the same storage.
        _serialization.remember_loaded(args[0]._untyped_storage, self.index)
        args = (*args[:4], self.requires_grad, *args[5:])
        return func, args

    @classmethod
    def __torch_dispatch__(
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        del types
        _kernels.observe(func)  # torch_npu's CPU fallback for an op without an NPU kernel: warned and recorded
        info = _OP_INFO.get(func)
        if info is None:
            info = _OP_INFO[func] = _op_info(func)
        cross_device_ok, index_op, rule, random_op, kernel, host_results = info
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
                        new_kwargs[key] = _shapes.host_device()
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
                    _checks.index_device(func, bool(args) and isinstance(args[0], NPUTensor), index or 0)
                else:
                    _checks.device_mismatch(func, index or 0)
        if target_index is not None:
            index = target_index
        if rule is not None:
            try:
                rule(func, new_args, new_kwargs, npu_dtypes)
            except EmulatedNPUError:
                raise
            except Exception as error:  # noqa: BLE001 - a fault of the check, not of the program
                record_fault(str(func), _describe(error), "skipped the emulated restriction check and ran the op")

        try:
            out = kernel(*new_args, **new_kwargs) if kernel else _run(func, random_op, new_args, new_kwargs)
        except Exception as error:  # noqa: BLE001 - classified below
            out = NotImplemented
            if _shapes.enabled():
                out = _shapes.stand_in(func, new_args, new_kwargs, originals)
            if out is NotImplemented:
                out = _fallback(func, error, random_op, new_args, new_kwargs)
        try:
            if host_results:
                result = tuple(
                    item if at in host_results else _wrap(item, originals, to_device, index)
                    for at, item in enumerate(out)
                )
            else:
                result = _wrap(out, originals, to_device, index)
        except Exception as error:  # noqa: BLE001 - an emulator fault, reported as such
            raise limitation(str(func), error) from error
        if func is _CONVOLUTION and torch._C._get_tracing_state() is not None:
            _trace_convolution(args, kwargs or {}, result)
        if _shapes.enabled():
            _shapes.after(func, args, result)
        return result


_CONVOLUTION = aten.convolution.default


def _trace_convolution(args: tuple[Any, ...], kwargs: dict[str, Any], result: torch.Tensor) -> None:
    """Record ``aten::_convolution`` for a convolution in ``torch.jit.trace``, as torch's tracer does on every device.

    torch's tracer does not record ``aten::convolution`` itself (it is one of the ops the generated tracing kernels
    skip): it records the ``aten::_convolution`` that convolution calls on a device. Here the device op runs inside
    ``__torch_dispatch__``, which receives ``aten.convolution`` before that call, so the node is added here, with the
    cuDNN flags torch records, and the output is tied to it.
    """
    names = ("input", "weight", "bias", "stride", "padding", "dilation", "transposed", "output_padding", "groups")
    values = dict(zip(names, args))
    values.update({k: v for k, v in kwargs.items() if k in names})
    graph = torch._C._get_tracing_state().graph()
    inputs = []
    for name in names:
        value = values.get(name)
        if isinstance(value, torch.Tensor):
            inputs.append(torch._C._get_value_trace(value))
        else:
            inputs.append(graph.insertConstant(list(value) if isinstance(value, (list, tuple)) else value))
    cudnn = torch.backends.cudnn
    for flag in (cudnn.benchmark, cudnn.deterministic, cudnn.enabled, cudnn.allow_tf32):
        inputs.append(graph.insertConstant(bool(flag)))
    node = graph.create("aten::_convolution", inputs, 1)
    graph.insertNode(node)
    node.output().inferTypeFrom(result)
    torch._C._set_value_trace(result, node.output())


def _repr(tensor: NPUTensor, tensor_contents: object) -> str:
    """torch's repr of a device tensor (torch/_tensor_str.py, ``_str_intern``, for a dense strided tensor): the
    numbers formatted from the CPU tensor behind it (torch's formatter computes in float64, which the device
    refuses), then the suffixes in torch's order, ``device='npu:N'`` first."""
    from torch._tensor_str import PRINT_OPTS, _add_suffixes, _tensor_str

    elem = tensor.elem
    prefix = "tensor("
    indent = len(prefix)
    suffixes = []
    default_device = getattr(torch._C, "_get_default_device", lambda: "cpu")()
    if tensor.device.type != default_device:
        suffixes.append(f"device='{tensor.device}'")
    default_dtype = torch.get_default_dtype()
    default_complex = torch.cdouble if default_dtype == torch.double else torch.cfloat
    has_default_dtype = tensor.dtype in (default_dtype, default_complex, torch.int64, torch.bool)
    with torch.no_grad():
        if tensor.numel() == 0:
            if tensor.dim() != 1:
                suffixes.append(f"size={tuple(tensor.shape)}")
            if tensor.dtype != default_dtype:
                suffixes.append(f"dtype={tensor.dtype}")
            contents = "[]"
        else:
            if not PRINT_OPTS.edgeitems:
                suffixes.append(f"size={tuple(tensor.shape)}")
            if not has_default_dtype:
                suffixes.append(f"dtype={tensor.dtype}")
            if elem.is_meta:  # shapes-only: no values to print
                if PRINT_OPTS.edgeitems:
                    suffixes.append(f"size={tuple(tensor.shape)}")
                contents = "..."
            else:
                contents = _tensor_str(elem.detach(), indent)
    if tensor_contents is not None:
        contents = str(tensor_contents)
    if tensor.grad_fn is not None:
        name = type(tensor.grad_fn).__name__
        if name == "CppFunction":
            name = tensor.grad_fn.name().rsplit("::", 1)[-1]
        suffixes.append(f"grad_fn=<{name}>")
    elif tensor.requires_grad:
        suffixes.append("requires_grad=True")
    text = _add_suffixes(prefix + contents, suffixes, indent, force_newline=False)
    if getattr(tensor, "_is_param", False):
        text = "Parameter containing:\n" + text  # as torch.nn.Parameter.__repr__
    return text


#: ``NPU_EMULATOR_RNG=cpu``: random ops on the device draw from the CPU default generator, so a run on the emulated
#: device draws the same numbers as the same program on the CPU (``npu-verify --parity`` aligns its two runs so).
_RNG_FOLLOWS_CPU = os.environ.get("NPU_EMULATOR_RNG", "").strip().lower() == "cpu"


def _run(func: Any, random_op: bool, args: list[Any], kwargs: dict[str, Any]) -> Any:
    if random_op and kwargs.get("generator") is None and not _RNG_FOLLOWS_CPU:
        return _checks.run_random(func, args, kwargs)
    return func(*args, **kwargs)


def _describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


# CPU torch lacks kernels that the device has (float16 matmul on torch 2.1, ...): the program is not at fault.
_MISSING_HALF_KERNEL = ("not implemented for 'Half'", "not implemented for 'BFloat16'")
_MISSING_KERNEL = ("with arguments from the 'CPU' backend",)
_HALF = (torch.float16, torch.bfloat16)


def _fallback(func: Any, error: Exception, random_op: bool, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """What to do when the op itself failed on the CPU tensors behind the device tensors.

    A CPU kernel missing for float16/bfloat16: run the op in float32 and cast back (recorded as an emulator
    fault, with a warning). Another missing CPU kernel: :class:`EmulatorLimitation`. Anything else is what the
    CPU says about the program (a shape mismatch...), raised unchanged, as on any device.
    """
    text = str(error)
    if any(marker in text for marker in _MISSING_HALF_KERNEL):
        try:
            out = _in_float32(func, random_op, args, kwargs)
        except Exception:  # noqa: BLE001 - then it is not only the missing half kernel
            raise limitation(str(func), error, "CPU torch has no kernel for this dtype") from error
        record_fault(str(func), _describe(error), "computed the op in float32 on the CPU and cast the result back")
        return out
    if any(marker in text for marker in _MISSING_KERNEL) or isinstance(error, NotImplementedError):
        raise limitation(str(func), error, "CPU torch has no kernel for this op") from error
    error._npu_emulator_program_error = True  # type: ignore[attr-defined]
    raise error


def _in_float32(func: Any, random_op: bool, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Run ``func`` with its float16/bfloat16 tensors in float32: written arguments are copied back, results are
    cast to the half dtype of the inputs."""
    upcast: dict[int, torch.Tensor] = {}
    dtype: list[torch.dtype] = []

    def up(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.dtype in _HALF:
            dtype.append(value.dtype)
            wide = value.float()
            upcast[id(wide)] = value
            return wide
        if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
            return type(value)(up(item) for item in value)
        return value

    wide_args = [up(a) for a in args]
    wide_kwargs = {k: up(v) for k, v in kwargs.items()}
    out = _run(func, random_op, wide_args, wide_kwargs)
    for wide in [*_tensors(wide_args), *_tensors(list(wide_kwargs.values()))]:
        original = upcast.get(id(wide))
        if original is not None and not torch.equal(wide.to(original.dtype), original):
            original.copy_(wide)
    half = dtype[0] if dtype else torch.float32

    def down(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            original = upcast.get(id(value))
            if original is not None:
                return original
            return value.to(half) if value.dtype is torch.float32 else value
        if isinstance(value, (list, tuple)):
            return type(value)(down(item) for item in value)
        return value

    return down(out)


def _tensors(values: list[Any]) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(_tensors(list(value)))
    return found


# Per-op facts, computed once per OpOverload: (may mix devices, is an index op, restriction rule, draws random).
_OP_INFO: dict[Any, tuple[bool, bool, Any, bool, Any, tuple[int, ...]]] = {}


def _op_info(func: Any) -> tuple[bool, bool, Any, bool, Any, tuple[int, ...]]:
    packet = func.overloadpacket
    return (
        packet in _CROSS_DEVICE_OK or packet in _rnn.HOST_RESULTS,
        packet in _INDEX_OPS,
        _checks.rule_for(func),
        packet in _checks.RANDOM_OPS,
        _rnn.KERNELS.get(func),
        _rnn.HOST_RESULTS.get(packet, ()),
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
        if torch.is_inference_mode_enabled() and not out.is_inference():
            # A view of a normal tensor made inside inference_mode is a normal tensor (torch then shares the
            # base's version counter with it): so is its wrapper.
            with torch.inference_mode(False):
                return NPUTensor(out, index=index)
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
    _ledger.track(elem, wrapper.index)  # a resize in place changes the storage's size
    replacement = NPUTensor(elem, index=wrapper.index)
    with torch.no_grad():
        TensorBase.data.__set__(wrapper, replacement)
    wrapper.elem = elem


_serialization.use_device_tensor(NPUTensor)


def to_npu(tensor: torch.Tensor) -> NPUTensor:
    """Copy a CPU tensor onto the emulated device (keeps ``requires_grad`` as a leaf)."""
    if isinstance(tensor, NPUTensor):
        return tensor
    if _shapes.enabled():
        return NPUTensor(_shapes.meta_like(tensor), requires_grad=tensor.requires_grad)
    return NPUTensor(tensor.detach().clone(), requires_grad=tensor.requires_grad)
