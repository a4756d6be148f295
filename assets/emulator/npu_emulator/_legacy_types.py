"""The legacy tensor types of ``torch.npu`` (``torch.npu.FloatTensor``, ``LongTensor``...), as torch_npu has them.

torch-npu 2.14.0 ``npu/__init__.py`` lists ``BoolTensor``, ``ByteTensor``, ``CharTensor``, ``DoubleTensor``,
``FloatTensor``, ``HalfTensor``, ``IntTensor``, ``LongTensor``, ``ShortTensor`` and ``BFloat16Tensor`` in its
``__all__``; ``transfer_to_npu`` copies them onto ``torch.cuda`` (and maps ``torch.cuda.DoubleTensor`` to
``torch.npu.FloatTensor``). Like torch's own ``torch.FloatTensor`` and ``torch.cuda.FloatTensor``, each is a
constructor (``FloatTensor(2, 3)``, ``FloatTensor([1, 2])``), an ``isinstance`` check (an npu tensor of its dtype)
and an argument of ``Tensor.type`` (``x.type(torch.npu.FloatTensor)``, ``x.type("torch.npu.LongTensor")``).
"""

from __future__ import annotations

from typing import Any

import torch

_DTYPES = {
    "BoolTensor": torch.bool,
    "ByteTensor": torch.uint8,
    "CharTensor": torch.int8,
    "DoubleTensor": torch.float64,
    "FloatTensor": torch.float32,
    "HalfTensor": torch.float16,
    "IntTensor": torch.int32,
    "LongTensor": torch.int64,
    "ShortTensor": torch.int16,
    "BFloat16Tensor": torch.bfloat16,
}


class LegacyTensorType(type):
    """The class of ``torch.npu.FloatTensor`` and its kin (torch's is ``torch.tensortype``)."""

    dtype: torch.dtype
    is_cuda = False
    is_sparse = False

    def __instancecheck__(cls, obj: Any) -> bool:
        return (
            isinstance(obj, torch.Tensor)
            and obj.device.type == "npu"
            and obj.dtype == cls.dtype
            and obj.layout == torch.strided
        )

    def __call__(cls, *args: Any, device: Any = None) -> torch.Tensor:  # type: ignore[override]
        target = torch.device("npu") if device is None else torch.device(device)
        if len(args) == 1 and isinstance(args[0], torch.Size):
            args = tuple(args[0])
        if all(isinstance(a, int) for a in args):  # FloatTensor(), FloatTensor(2, 3)
            return torch.empty(args, dtype=cls.dtype, device=target)
        if len(args) == 1:
            data = args[0]
            if isinstance(data, torch.Tensor):
                return data.to(device=target, dtype=cls.dtype)
            return torch.tensor(data, dtype=cls.dtype, device=target)
        msg = f"new(): invalid arguments for torch.npu.{cls.__name__}: {args!r}"
        raise TypeError(msg)

    def __repr__(cls) -> str:
        return f"<class 'torch.npu.{cls.__name__}'>"


TYPES: dict[str, LegacyTensorType] = {
    name: LegacyTensorType(name, (), {"dtype": dtype, "__module__": "torch.npu", "__qualname__": name})
    for name, dtype in _DTYPES.items()
}

_PREFIX = "torch.npu."


def _target(dtype: Any) -> LegacyTensorType | None:
    if isinstance(dtype, LegacyTensorType):
        return dtype
    if isinstance(dtype, str) and dtype.startswith(_PREFIX):
        return TYPES.get(dtype[len(_PREFIX) :])
    return None


def install(npu_module: Any) -> None:
    """Put the types on ``torch.npu`` and let ``Tensor.type`` take them (idempotent)."""
    for name, legacy in TYPES.items():
        setattr(npu_module, name, legacy)
    original = torch.Tensor.type
    if getattr(original, "_npu_legacy_types", False):
        return

    def type_(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        legacy = _target(args[0] if args else kwargs.get("dtype"))
        if legacy is None:
            return original(self, *args, **kwargs)
        if isinstance(self, legacy):
            return self  # as torch: already of that type, no copy
        non_blocking = bool(args[1]) if len(args) > 1 else bool(kwargs.get("non_blocking", False))
        return self.to(device="npu", dtype=legacy.dtype, non_blocking=non_blocking)

    type_.__doc__ = original.__doc__
    type_._npu_legacy_types = True  # type: ignore[attr-defined]
    torch.Tensor.type = type_  # type: ignore[method-assign]
