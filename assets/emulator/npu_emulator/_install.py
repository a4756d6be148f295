"""Registering the emulated ``npu`` backend with torch (once per process)."""

from __future__ import annotations

import atexit
import importlib
import warnings
from typing import Any

import torch

from npu_emulator import (
    _accelerator,
    _amp,
    _backend,
    _checks,
    _distributed,
    _generator,
    _legacy_types,
    _older_torch,
    _serialization,
    _shapes,
    _tensor,
)
from npu_emulator._errors import EmulatedNPUError, emulated_message
from npu_emulator._tensor import NPUTensor

_state: dict[str, Any] = {"installed": False, "libs": ()}


def is_installed() -> bool:
    """True once :func:`install` registered the emulated ``npu`` device in this process."""
    return bool(_state["installed"])


def _empty_memory_format(
    size: list[int],
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
    memory_format: torch.memory_format | None = None,
) -> torch.Tensor:
    del layout, pin_memory
    index = None if device is None else _checks.check_device_index(torch.device(device), "aten.empty.memory_format")
    host = _shapes.host_device()
    return NPUTensor(torch.empty(size, dtype=dtype, memory_format=memory_format, device=host), index=index)


def _empty_strided(
    size: list[int],
    stride: list[int],
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> torch.Tensor:
    del layout, pin_memory
    index = None if device is None else _checks.check_device_index(torch.device(device), "aten.empty_strided")
    return NPUTensor(torch.empty_strided(size, stride, dtype=dtype, device=_shapes.host_device()), index=index)


def _indices_factory(op: Any) -> Any:
    def kernel(row: int, col: int, offset: int = 0, **kwargs: Any) -> torch.Tensor:
        device = kwargs.get("device")
        index = None if device is None else _checks.check_device_index(torch.device(device), op)
        kwargs["device"] = _shapes.host_device()
        return NPUTensor(op(row, col, offset, **kwargs), index=index)

    return kernel


# Ops that torch may call on device tensors with the Python dispatch key excluded (e.g. torch.tensor(...,
# device="npu")): route them to the same handler as every other op.
_BYPASSING_PYTHON_KEY = ("_copy_from", "_copy_from_and_resize", "copy_", "_to_copy", "_local_scalar_dense")


def _via_dispatch(op: Any) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        return NPUTensor.__torch_dispatch__(op, (), args, kwargs)

    return kernel


# storage _cdata -> torch's weak reference to that storage: is_pinned() answers True for exactly those storages.
_PINNED: dict[int, Any] = {}


def _pin_memory(tensor: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    """``pin_memory()`` (DataLoader(pin_memory=True)): a copy in host memory that ``is_pinned()`` reports pinned,
    as torch_npu's pinned host memory is (the emulator has no page-locked allocator)."""
    from torch.multiprocessing.reductions import StorageWeakRef

    del device
    pinned = tensor.clone()
    if len(_PINNED) > 256:
        for key in [key for key, ref in _PINNED.items() if ref.expired()]:
            del _PINNED[key]
    storage = pinned.untyped_storage()
    _PINNED[storage._cdata] = StorageWeakRef(storage)
    return pinned


def _is_pinned(tensor: torch.Tensor, device: torch.device | None = None) -> bool:
    del device
    if tensor.device.type != "cpu":
        return False
    storage = tensor.untyped_storage()
    ref = _PINNED.get(storage._cdata)
    if ref is not None and not ref.expired():
        return True
    # Host memory from the C++ hooks' pinned allocator (torch's own pinned allocations, e.g. DDP's reducer).
    native_pinned = _state.get("is_pinned_ptr")
    return native_pinned is not None and bool(native_pinned(storage.data_ptr()))


def _sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    _checks.sdpa_mask(query, key, attn_mask)
    if attn_mask is not None and attn_mask.dtype is torch.bool:
        # As SDPA's own entry point does before its math kernel: True = keep becomes 0, False becomes -inf.
        float_mask = torch.zeros_like(attn_mask, dtype=query.dtype)
        attn_mask = float_mask.masked_fill_(attn_mask.logical_not(), float("-inf"))
    # enable_gqa is in SDPA's schema from torch 2.5 on; before, torch never passes it.
    extra = {"enable_gqa": enable_gqa} if enable_gqa else {}
    out = torch.ops.aten._scaled_dot_product_attention_math(
        query, key, value, attn_mask, dropout_p, is_causal, scale=scale, **extra
    )
    return out[0]


def install() -> None:
    """Register the emulated ``npu`` device type and the ``torch.npu`` module (idempotent).

    torch >= 2.10 registers the device guard from Python, and the hooks from the small C++ extension of
    :mod:`npu_emulator._native` (built on first use) when a compiler is present, else from Python; older torch
    gets both from that extension. Raises :class:`EmulatedNPUError` when older torch's extension cannot be built
    (naming what is missing) or when another backend already owns PrivateUse1 (e.g. the real ``torch_npu`` was
    imported).
    """
    if _state["installed"]:
        return
    owner = torch._C._get_privateuse1_backend_name()
    if owner != "privateuseone":
        detail = f"PrivateUse1 is already registered as {owner!r} (the real torch_npu, or another backend)"
        raise EmulatedNPUError(emulated_message("cannot install", detail, "torch allows one rename per process"))

    _start_engine_without_device_threads()
    setup = getattr(torch.utils.backend_registration, "_setup_privateuseone_for_python_backend", None)
    if setup is not None:
        if not _register_python_backend_with_native_hooks():
            setup(rename="npu", backend_module=_backend.npu)
            _state["hooks"] = "python"
        _state["backend"] = "python"
    else:
        _register_native()
        _state["backend"] = "c++ extension"
        _state["hooks"] = "c++ extension"
    _tensor.DEVICE = torch.device("npu", 0)
    _backend.register_modules()
    _legacy_types.install(_backend.npu)

    lib = torch.library.Library("aten", "IMPL")
    own = _state.get("kernel_wrapper", _as_is)
    lib.impl("empty.memory_format", own(_empty_memory_format), "PrivateUse1")
    lib.impl("empty_strided", own(_empty_strided), "PrivateUse1")
    lib.impl("tril_indices", own(_indices_factory(torch.ops.aten.tril_indices.default)), "PrivateUse1")
    lib.impl("triu_indices", own(_indices_factory(torch.ops.aten.triu_indices.default)), "PrivateUse1")
    for name in _BYPASSING_PYTHON_KEY:
        lib.impl(name, own(_via_dispatch(getattr(torch.ops.aten, name).default)), "PrivateUse1")
    lib.impl("scaled_dot_product_attention", _sdpa, "AutogradPrivateUse1")
    with warnings.catch_warnings():
        # Replaces torch's CPU kernel, which would ask the npu hooks for a pinned allocator they cannot give.
        warnings.simplefilter("ignore")
        lib.impl("_pin_memory", own(_pin_memory), "CPU")
        lib.impl("is_pinned", _is_pinned, "CPU")
        if _state["backend"] != "python":
            # torch < 2.10 picks the kernels of is_pinned/_pin_memory by their device argument (CUDA when it is
            # None), and CUDA's initialise CUDA, which fails on a machine without a driver. Host memory is never
            # pinned here (pinning is a copy), for either device argument.
            for key in ("CUDA", "PrivateUse1"):
                lib.impl("is_pinned", _is_pinned, key)
                lib.impl("_pin_memory", own(_pin_memory), key)
    global_lib = torch.library.Library("_", "IMPL")
    _amp.register(lib, global_lib)
    if _state["backend"] != "python":
        _autograd_fallback(global_lib)
    _accelerator.install()
    _serialization.install()
    atexit.register(_PINNED.clear)
    _generator.install()
    _enable_foreach()
    _older_torch.install()
    _state["libs"] = (lib, global_lib)
    _state["installed"] = True
    _backward_on_the_calling_thread()
    _distributed.install(pinned_host_memory=_state["hooks"] == "c++ extension", why_not=_state.get("hooks_error"))
    _mark_program_end()
    if _shapes.requested():
        _shapes.install()


#: npu-train's folder for the processes of a run that returned from their program (see its --help).
EXIT_MARKER = "NPU_PATCHER_EXIT_MARKER"


def _mark_program_end() -> None:
    """Under npu-train, leave a file named after this process in ``$NPU_PATCHER_EXIT_MARKER`` when the
    interpreter starts its exit (registered first, so it runs after the program's own ``atexit`` handlers): an
    abort after it is an abort at exit, which npu-train then says."""
    import os

    folder = os.environ.get(EXIT_MARKER)
    if not folder:
        return

    def mark() -> None:
        try:
            with open(os.path.join(folder, str(os.getpid())), "w", encoding="utf-8"):
                pass
        except OSError:
            pass

    atexit.register(mark)


def _autograd_fallback(global_lib: torch.library.Library) -> None:
    """Let operators without an autograd kernel of their own (``torch.library`` operators of the program or of a
    library) reach the device tensors, as they reach CPU tensors.

    torch < 2.10 registers its autograd fallback for the CPU, CUDA, XLA... keys but not for AutogradPrivateUse1,
    where such an operator then fails with ``Could not run '...' with arguments from the 'Autogradnpu' backend``.
    A fallthrough sends it on to the emulator (its backward, if any, is not recorded, as with torch's fallback in
    its default mode for an operator that has no autograd formula).
    """
    try:
        if hasattr(global_lib, "fallback"):
            global_lib.fallback(torch.library.fallthrough_kernel, dispatch_key="AutogradPrivateUse1")
        else:  # torch < 2.3
            global_lib.m.fallback_fallthrough("AutogradPrivateUse1")
    except RuntimeError as error:  # this torch has a fallback there already
        if "fallback" not in str(error).lower():
            raise


def backend() -> str | None:
    """How the device is registered: ``"python"`` (torch >= 2.10), ``"c++ extension"``, or None before install."""
    return _state.get("backend")


# c10::ScalarType numbers of the autocast dtypes (c10/core/ScalarType.h).
_SCALAR_TYPES = {torch.float16: 5, torch.float32: 6, torch.float64: 7, torch.bfloat16: 15}


def _as_is(kernel: Any) -> Any:
    return kernel


def _non_hermetic(native: Any) -> Any:
    """Kernels run with torch's hermetic-PyObject mode off (torch < 2.3 forces it on; see npu_device.cpp).

    The mode stays off until the kernel's caller in torch puts its own saved state back: the result's Python
    object is released there, and only outside hermetic mode does the tensor keep it (else it dangles).
    """

    def wrap(kernel: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            native.set_hermetic(False)
            return kernel(*args, **kwargs)

        return run

    return wrap


def _register_native() -> None:
    """What ``_setup_privateuseone_for_python_backend`` does on torch >= 2.10, with the guard and hooks in C++."""
    from npu_emulator import _native

    native = _native.load()
    _state["kernel_wrapper"] = _non_hermetic(native)
    native.set_device_count(_backend.device_count())
    native.register_hooks()
    _state["is_pinned_ptr"] = getattr(native, "is_pinned_ptr", None)
    torch.utils.rename_privateuse1_backend("npu")
    torch.utils.generate_methods_for_privateuse1_backend()
    if hasattr(native, "set_autocast_enabled"):
        # torch < 2.4: torch.autocast("npu") reads and writes the autocast state through the backend module.
        dtypes = {number: dtype for dtype, number in _SCALAR_TYPES.items()}
        module = _backend.npu
        module.is_autocast_enabled = native.autocast_enabled  # type: ignore[attr-defined]
        module.set_autocast_enabled = native.set_autocast_enabled  # type: ignore[attr-defined]
        module.get_autocast_dtype = lambda: dtypes[native.autocast_dtype()]  # type: ignore[attr-defined]
        module.set_autocast_dtype = lambda dtype: native.set_autocast_dtype(_SCALAR_TYPES[dtype])  # type: ignore[attr-defined]
    torch._register_device_module("npu", _backend.npu)
    _checkpoint_device_type()


#: Set to 0 to keep torch's Python hooks on torch >= 2.10 (no C++ build; DDP that needs pinned memory is refused).
NATIVE_HOOKS_ENV = "NPU_EMULATOR_NATIVE_HOOKS"


def _register_python_backend_with_native_hooks() -> bool:
    """torch >= 2.10: the Python backend (device module, Python device guard) with the C++ extension's hooks.

    torch's Python hooks cannot give a pinned-memory allocator, which DDP's reducer asks the hooks for with
    ``find_unused_parameters=True`` or ``static_graph=True``; the extension's hooks give one (host memory, as the
    rest of the device). The hooks can be registered once per process, so this happens instead of the Python
    registration. False (and the reason kept for the DDP refusal) when the extension cannot be built, e.g. without
    a C++ compiler: the Python hooks are registered then.
    """
    import os

    from torch.utils import backend_registration

    if os.environ.get(NATIVE_HOOKS_ENV, "").strip() == "0":
        _state["hooks_error"] = f"{NATIVE_HOOKS_ENV}=0 keeps torch's Python hooks"
        return False
    from npu_emulator import _native

    try:
        native = _native.load()
    except EmulatedNPUError as error:
        _state["hooks_error"] = str(error)
        return False
    # The order of torch's _setup_privateuseone_for_python_backend, with the hooks from C++.
    torch.utils.rename_privateuse1_backend("npu")
    torch.utils.generate_methods_for_privateuse1_backend()
    torch._register_device_module("npu", _backend.npu)
    native.register_hooks()
    torch._C._acc.register_python_privateuseone_device_guard(backend_registration._DummyDeviceGuard())
    _state["is_pinned_ptr"] = native.is_pinned_ptr
    _state["hooks"] = "c++ extension"
    return True


def hooks() -> str | None:
    """Where the PrivateUse1 hooks come from: ``"c++ extension"`` (pinned host memory for DDP's reducer) or
    ``"python"`` (torch >= 2.10 without a C++ compiler); None before install."""
    return _state.get("hooks")


def _checkpoint_device_type() -> None:
    """Let torch.utils.checkpoint restore the npu RNG state on torch releases that infer its device from it.

    Before ``set_device_states`` took a ``device_type`` (torch < 2.2), it inferred the device from the saved
    states, which are CPU tensors, and so always fell back to ``DefaultDeviceType`` ("cuda"). With no CUDA in
    this process, that default becomes the emulated device.
    """
    import inspect

    from torch.utils import checkpoint

    takes_device = "device_type" in inspect.signature(checkpoint.set_device_states).parameters
    if not takes_device and not torch.cuda.is_available():
        checkpoint.DefaultDeviceType.set_device_type("npu")


def _enable_foreach() -> None:
    """Let optimizers and clip_grad_norm_ take their multi-tensor (foreach) paths for device tensors.

    torch checks ``type(p)`` against a list of plain tensor types; on a real device the parameters are plain
    tensors, so the default there is foreach (NPU-FACTS.md, "Optimizers": stock AdamW is multi-tensor).
    """
    for name in ("torch.optim.optimizer", "torch.utils._foreach_utils"):
        supported = getattr(importlib.import_module(name), "_foreach_supported_types", None)
        if supported is not None and NPUTensor not in supported:
            supported.append(NPUTensor)


def _start_engine_without_device_threads() -> None:
    """Start autograd's engine before the npu device exists, so that it has no worker thread for it.

    The engine starts its per-device worker threads once, at the first backward() of the process, one per device
    index that a registered device guard reports. A worker thread of the emulated device would run every npu
    backward op in Python (``__torch_dispatch__``) and take the GIL at moments the program does not control: on
    start (the device guard's ``setDevice``) and after it has signalled the end of a backward pass (releasing the
    graph's device tensors). When the program has meanwhile returned and the interpreter is finalizing, CPython
    ends that thread with ``pthread_exit``, whose unwinding through torch's ``noexcept`` code calls
    ``std::terminate`` ("terminate called without an active exception", exit 134) after all the program's work.
    Started here, from a CPU backward, the engine has no queue and no thread for the device (a CPU build of torch
    registers no other device guard); every npu backward then runs on its calling thread, see
    :func:`_backward_on_the_calling_thread`.
    """
    leaf = torch.ones(1, requires_grad=True)
    (leaf * 2).sum().backward()


class _CallingThreadEngine:
    """torch's autograd engine object, running each backward pass on the thread that asks for it.

    ``torch.autograd.backward``/``grad`` call ``Variable._execution_engine.run_backward``; switching autograd
    multithreading off for the calling thread first (a per-thread setting) makes the engine run the device's
    backward ops on that thread, as it runs CPU backward ops, for every thread that calls backward. Everything
    else (``queue_callback``, ``is_checkpoint_valid``) is the engine's own.
    """

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def run_backward(self, *args: Any, **kwargs: Any) -> Any:
        torch._C._set_multithreading_enabled(False)
        return self._engine.run_backward(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


def _backward_on_the_calling_thread() -> None:
    """Run every backward pass on its calling thread (see :func:`_start_engine_without_device_threads`) and check
    that a backward pass on the device works."""
    from torch.autograd.variable import Variable

    if not isinstance(Variable._execution_engine, _CallingThreadEngine):
        Variable._execution_engine = _CallingThreadEngine(Variable._execution_engine)
    torch._C._set_multithreading_enabled(False)
    probe = NPUTensor(torch.ones(1), requires_grad=True)
    (probe * 2).sum().backward()
