"""Shapes-only mode (``NPU_EMULATOR_SHAPES_ONLY=1``): the emulated npu keeps shape, dtype and device, no data.

The tensor behind a device tensor is a ``meta`` tensor instead of a CPU one, so every op still passes the device's
checks (device placement, the op table's CPU fallbacks, the restriction groups, SDPA masks) and runs torch's meta
kernel, which computes the result's shape and dtype only. Memory is counted as for data (``_ledger``), so a step of
a model far larger than the host's memory can be pre-flighted.

What has no data:

- Parameters and buffers a module registers while it is built on the host become meta tensors (their host bytes
  are never touched), so ``Model(config).to("npu")`` costs no host memory for its weights.
- ``torch.load`` of a file maps it (``mmap=True``) instead of reading it: the bytes are read only where the
  program computes on them on the host. :func:`load_safetensors` (and ``safetensors.torch.load_file`` when that
  package is installed) reads a safetensors file's header only and gives meta tensors of its shapes and dtypes.

Values read back to the host have a documented stand-in, and each read is recorded (:func:`unchecked`):

- a device tensor copied to the host (``.cpu()``, ``.tolist()``, ``.item()``, ``bool(t)``, ``float(t)``) reads
  0 (False), except a tensor known to be constant: the results of ``isfinite`` (True) and ``isnan``/``isinf``
  (False), and ``all``/``any``/``logical_not`` of those, so that a finite-loss guard takes its usual branch;
- ``nonzero`` / ``argwhere`` assume every element is nonzero, and an index with a boolean mask (``x[mask]``,
  ``x[mask] = v``), ``masked_select`` and ``masked_scatter`` that every mask element is true (upper bounds of the
  result's size, hence of its memory);
- any other op whose result's shape depends on values (``unique``, ``repeat_interleave`` with tensor counts, ...)
  raises ``EmulatorLimitation``: an emulator limit, named in the report, not a fault of the program.
"""

from __future__ import annotations

import functools
import json
import os
import struct
from typing import Any

import torch

aten = torch.ops.aten

ENV = "NPU_EMULATOR_SHAPES_ONLY"
META = torch.device("meta")
_STATE: dict[str, Any] = {"on": False}
# (op, what the stand-in assumed) -> count
_UNCHECKED: dict[tuple[str, str], int] = {}


#: The oldest torch shapes-only mode runs on (on torch 2.1 meta-backed device tensors lose their device checks).
MIN_TORCH = (2, 6)


def supported() -> bool:
    """Whether this torch runs shapes-only mode (:data:`MIN_TORCH`)."""
    parts = torch.__version__.split("+")[0].split(".")
    try:
        return (int(parts[0]), int(parts[1])) >= MIN_TORCH
    except (IndexError, ValueError):
        return False


def requested() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")


def enabled() -> bool:
    return bool(_STATE["on"])


def host_device() -> torch.device:
    """Where the tensor behind a device tensor lives: ``meta`` in shapes-only mode, else the CPU."""
    return META if _STATE["on"] else torch.device("cpu")


def unchecked() -> list[dict[str, Any]]:
    """What shapes-only mode could not check because it has no values: ``[{"op", "assumed", "count"}]``."""
    return [{"op": op, "assumed": assumed, "count": count} for (op, assumed), count in sorted(_UNCHECKED.items())]


def clear_unchecked() -> None:
    _UNCHECKED.clear()


def _note(op: Any, assumed: str) -> None:
    key = (str(op), assumed)
    _UNCHECKED[key] = _UNCHECKED.get(key, 0) + 1


# Ops whose result is the same constant in every element, and how a known constant passes through ops.
_CONSTANT_RESULT = {
    aten.isfinite: True,
    aten.isnan: False,
    aten.isinf: False,
    aten.isposinf: False,
    aten.isneginf: False,
}
_KEEPS = frozenset({aten.all, aten.any, aten._to_copy, aten.clone, aten.view, aten.reshape, aten.detach,
                    aten.alias, aten.squeeze, aten.unsqueeze, aten.expand, aten.logical_and, aten.logical_or})  # fmt: skip
_NEGATES = frozenset({aten.logical_not, aten.bitwise_not})


def known_value(tensor: Any) -> Any:
    return getattr(tensor, "_npu_shapes_value", None)


def after(func: Any, args: tuple[Any, ...], result: Any) -> None:
    """Carry a known constant value from the op's device inputs to its device result (see the module doc)."""
    if not isinstance(result, torch.Tensor) or result.device.type != "npu":
        return
    packet = func.overloadpacket
    value = _CONSTANT_RESULT.get(packet)
    if value is None and (packet in _KEEPS or packet in _NEGATES):
        values = [known_value(a) for a in args if isinstance(a, torch.Tensor)]
        if values and all(v is not None for v in values) and len(set(values)) == 1:
            value = values[0] if packet in _KEEPS else (not values[0])
    if value is not None:
        result._npu_shapes_value = value


def host_value(tensor: torch.Tensor) -> Any:
    """The stand-in value of a device tensor read on the host: its known constant, else 0."""
    value = known_value(tensor)
    return 0 if value is None else value


def stand_in(func: Any, args: list[Any], kwargs: dict[str, Any], originals: dict[int, Any]) -> Any:
    """The result of an op that needs values a meta tensor lacks, or ``NotImplemented`` when there is none."""
    packet = func.overloadpacket

    def source_value(elem: Any) -> Any:
        original = originals.get(id(elem))
        return host_value(original) if original is not None else 0

    if packet is aten._local_scalar_dense:
        value = source_value(args[0])
        _note(func, "read as {!r}".format(value))
        dtype = args[0].dtype
        if dtype is torch.bool:
            return bool(value)
        return float(value) if dtype.is_floating_point else int(value)
    if packet in (aten._to_copy, aten._copy_from, aten._copy_from_and_resize, aten.copy_):
        if packet is aten._to_copy:
            source = args[0]
            dtype = kwargs.get("dtype") or source.dtype
            out = torch.full(source.shape, source_value(source), dtype=dtype)
            _note("host copy of a device tensor", "read as its known constant, else 0")
            return out
        if packet is aten.copy_:
            dst, src = args[0], args[1]
            if dst.device.type == "cpu" and src.is_meta:
                dst.fill_(source_value(src))
                _note("host copy of a device tensor", "read as its known constant, else 0")
                return dst
        return NotImplemented
    if packet in _MASK_OPS:
        config = _nonzero_config()
        if config is not None:
            # torch's own meta kernels, told to assume every element nonzero (every mask element true).
            with config.patch(meta_nonzero_assume_all_nonzero=True):
                out = func(*args, **kwargs)
            _note(func, "every mask element true, every element nonzero")
            return out
    if packet in (aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_) and len(args) > 1:
        # torch without that switch: each boolean mask becomes the long indices of all its elements.
        indices = _all_selected(args[1])
        if indices is not None:
            _note(func, "every mask element true, every element nonzero")
            return func(args[0], indices, *args[2:], **kwargs)
    if packet in (aten.nonzero, aten.argwhere):
        source = args[0]
        _note(func, "every element nonzero")
        return torch.empty((source.numel(), source.dim()), dtype=torch.long, device=META)
    if packet is aten.masked_select:
        source, mask = args[0], args[1]
        _note(func, "every element selected")
        shape = torch.broadcast_shapes(source.shape, mask.shape)
        return torch.empty((int(torch.Size(shape).numel()),), dtype=source.dtype, device=META)
    _note(func, "not run: its result's shape depends on values")
    return NotImplemented


def _isfinite(tensor: torch.Tensor) -> torch.Tensor:
    result = torch.ones_like(tensor, dtype=torch.bool)
    result._npu_shapes_value = True
    return result


# Ops whose result's shape follows a boolean mask's values (an index with a bool mask runs nonzero).
_MASK_OPS = frozenset({aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_, aten.nonzero,
                       aten.argwhere, aten.masked_select, aten.masked_scatter, aten.masked_scatter_})  # fmt: skip


def _all_selected(indices: Any) -> Any:
    """``indices`` of an index op with each boolean mask replaced by the long indices that select all of its
    elements (one index tensor per mask dimension), or None when there is no mask."""
    if not isinstance(indices, (list, tuple)):
        return None
    found = False
    expanded: list[Any] = []
    for index in indices:
        if isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8):
            found = True
            count = int(index.numel())
            expanded.extend(torch.empty((count,), dtype=torch.long, device=META) for _ in range(max(index.dim(), 1)))
        else:
            expanded.append(index)
    return expanded if found else None


def _nonzero_config() -> Any:
    """torch's switch that makes the meta ``nonzero`` assume every element nonzero (torch.fx.experimental._config,
    ``meta_nonzero_assume_all_nonzero``), or None on a torch without it."""
    try:
        from torch.fx.experimental import _config  # noqa: PLC0415
    except ImportError:
        return None
    return _config if hasattr(_config, "meta_nonzero_assume_all_nonzero") else None


def meta_like(tensor: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(tensor.size(), tensor.stride(), dtype=tensor.dtype, device=META)


# -- weights without bytes --

_ORIGINAL: dict[str, Any] = {}


def _on_host(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "cpu" and not hasattr(value, "elem")


def _register_parameter(self: torch.nn.Module, name: str, param: Any) -> None:
    if _on_host(param) and type(param) is torch.nn.Parameter:
        param = torch.nn.Parameter(meta_like(param), requires_grad=param.requires_grad)
    _ORIGINAL["register_parameter"](self, name, param)


def _register_buffer(self: torch.nn.Module, name: str, tensor: Any, persistent: bool = True) -> None:
    if _on_host(tensor) and tensor.numel() > 0:
        tensor = meta_like(tensor)
    _ORIGINAL["register_buffer"](self, name, tensor, persistent)


def _load(load: Any) -> Any:
    @functools.wraps(load)
    def shapes_load(f: Any, *args: Any, **kwargs: Any) -> Any:
        if "mmap" not in kwargs and isinstance(f, (str, os.PathLike)) and _is_zip(f):
            kwargs["mmap"] = True
        return load(f, *args, **kwargs)

    return shapes_load


def _is_zip(path: Any) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"PK\x03\x04"
    except OSError:
        return False


# safetensors dtype names (the format's header, huggingface/safetensors docs) -> torch dtypes.
_SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}  # fmt: skip


def load_safetensors(path: Any, device: Any = "cpu") -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file as meta tensors of their shapes and dtypes, from its header alone (an
    8-byte little-endian header length, then a JSON header; the weights after it are never read)."""
    del device
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = _SAFETENSORS_DTYPES.get(entry["dtype"])
        if dtype is None:
            msg = "safetensors dtype {!r} of {!r} is not known to the shapes-only loader".format(entry["dtype"], name)
            raise ValueError(msg)
        tensors[name] = torch.empty(entry["shape"], dtype=dtype, device=META)
    return tensors


def install() -> None:
    """Turn shapes-only mode on for this process (``install()`` does when ``NPU_EMULATOR_SHAPES_ONLY=1``)."""
    if _STATE["on"]:
        return
    if not supported():
        from npu_emulator._errors import EmulatorLimitation

        raise EmulatorLimitation(
            "shapes-only mode",
            f"it is built and tested on torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]}; this is torch {torch.__version__}",
            "run the shapes-only pre-flight with a newer torch, or the full emulated run on this one",
        )
    _STATE["on"] = True
    module = torch.nn.Module
    _ORIGINAL["register_parameter"] = module.register_parameter
    _ORIGINAL["register_buffer"] = module.register_buffer
    module.register_parameter = _register_parameter  # type: ignore[method-assign]
    module.register_buffer = _register_buffer  # type: ignore[method-assign]
    torch.load = _load(torch.load)
    # isfinite is composite (torch decomposes it into eq/abs/ne before the device sees it): give the device its
    # own kernel so that the result carries its known value.
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("isfinite", _isfinite, "AutogradPrivateUse1")
    _STATE["lib"] = lib
    try:
        import safetensors.torch as st  # noqa: PLC0415 - optional
    except ImportError:
        return
    st.load_file = load_safetensors
