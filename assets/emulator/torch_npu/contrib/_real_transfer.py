"""Running the real ``contrib/transfer_to_npu.py`` of a torch-npu wheel over the emulated device.

The wheel's Python sources are test data, not part of this package: ``cargo xtask torch-npu`` extracts the pinned
wheels of ``torch-npu/wheels.json`` into ``$NPU_PATCHER_TORCH_NPU_DIR`` (default
``~/.cache/npu-patcher/torch-npu/<version>/``). :func:`locate` finds the one whose base version equals torch's (the
pairing rule torch_npu itself enforces); :func:`prepare` adds the few torch_npu internals that module touches
(``utils._dynamo``, ``_init.patches.monkey_patches._apply_patches``, ``npu.__all__`` and submodules, ``_C`` and
``profiler`` names) on top of the emulator, so that the real file runs unchanged. Nothing from the wheel is
copied here: it is read from the cache at import time.
"""

from __future__ import annotations

import ast
import os
import sys
import types
from pathlib import Path
from typing import Any

import torch

TRANSFER = Path("torch_npu", "contrib", "transfer_to_npu.py")


def wheels_dir() -> Path:
    """Where ``cargo xtask torch-npu`` puts the extracted wheels."""
    if os.environ.get("NPU_PATCHER_TORCH_NPU_DIR"):
        return Path(os.environ["NPU_PATCHER_TORCH_NPU_DIR"])
    if os.environ.get("NPU_PATCHER_VENV_DIR"):
        return Path(os.environ["NPU_PATCHER_VENV_DIR"]) / "torch-npu"
    cache = Path(os.environ["XDG_CACHE_HOME"]) if os.environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return cache / "npu-patcher" / "torch-npu"


def _base(version: str) -> str:
    return version.split("+")[0].split(".post")[0]


def _post(version: str) -> int:
    """``5`` of ``2.6.0.post5`` (0 without a post release): the newest post of a base version wins."""
    _, _, post = version.partition(".post")
    return int(post) if post.isdigit() else 0


def locate() -> tuple[str, Path] | None:
    """``(torch-npu version, wheel root)`` of the extracted wheel that pairs with this torch, if any.

    ``NPU_EMULATOR_TRANSFER=standin`` forces the stand-in (returns None).
    """
    if os.environ.get("NPU_EMULATOR_TRANSFER", "").strip().lower() == "standin":
        return None
    root = wheels_dir()
    torch_base = _base(torch.__version__)
    try:
        candidates = sorted(
            (p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")), key=lambda p: _post(p.name)
        )
    except OSError:
        return None
    for wheel in reversed(candidates):
        if _base(wheel.name) == torch_base and (wheel / ".complete").is_file() and (wheel / TRANSFER).is_file():
            return wheel.name, wheel
    return None


def why_not() -> str:
    """Why :func:`locate` found nothing, for the report."""
    if os.environ.get("NPU_EMULATOR_TRANSFER", "").strip().lower() == "standin":
        return "NPU_EMULATOR_TRANSFER=standin asks for it"
    return "no extracted torch-npu wheel under $NPU_PATCHER_TORCH_NPU_DIR (default ~/.cache/npu-patcher/torch-npu) " \
        f"pairs with torch {torch.__version__}"


def _literal_all(path: Path) -> list[str]:
    """``__all__`` of a wheel module, read with ``ast`` (the module itself cannot be imported without CANN)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return []
    for stmt in tree.body:
        if (
            isinstance(stmt, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets)
            and isinstance(stmt.value, (ast.List, ast.Tuple))
        ):
            return [e.value for e in stmt.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _module(name: str, doc: str, **attrs: Any) -> types.ModuleType:
    module = sys.modules.get(name)
    if module is None:
        module = types.ModuleType(name, doc)
        sys.modules[name] = module
    for key, value in attrs.items():
        setattr(module, key, value)
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], child, module)
    return module


def _apply_patches(monkey_patches: list[list[Any]]) -> None:
    """torch_npu's ``_apply_patches`` contract (``_init/patches/monkey_patches.py``): for ``[dest, patch]``, a
    module patch with ``__all__`` copies those names onto the existing ``torch.<dest>``; any other patch (or a
    missing destination) is set as ``torch.<dest>`` itself."""
    for dest, patch in monkey_patches:
        *parents, last = dest.split(".")
        owner: Any = torch
        for part in parents:
            if not hasattr(owner, part):
                name = f"{owner.__name__}.{part}"
                sys.modules[name] = types.ModuleType(name)
                setattr(owner, part, sys.modules[name])
            owner = getattr(owner, part)
        if not isinstance(patch, types.ModuleType):
            setattr(owner, last, patch)
        elif not hasattr(owner, last) or not hasattr(patch, "__all__"):
            setattr(owner, last, patch)
            sys.modules[f"{owner.__name__}.{last}"] = patch
        else:
            target = getattr(owner, last)
            for attr in patch.__all__:
                setattr(target, attr, getattr(patch, attr))


class _Unsupported:
    """A torch_npu class the emulator does not model (graphs, HCCL process groups): using it raises."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        del args, kwargs
        from npu_emulator._errors import EmulatedNPUError

        raise EmulatedNPUError(f"{type(self).__name__} is not emulated (graph mode and HCCL run only on an NPU)")


class _ExperimentalConfig:
    """``torch_npu.profiler._ExperimentalConfig``: the NPU profiler's options, kept (the CPU profiler ignores them)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


class _HcclOptions:
    """``ProcessGroupHCCL.Options``: the options of an HCCL group, kept (the emulated hccl runs gloo)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs
        self.hccl_config: dict[str, Any] = {}
        self.is_high_priority_stream = False


def prepare(root: Path) -> None:
    """Add the torch_npu internals that ``transfer_to_npu._init`` touches (``root``: the wheel to run)."""
    wheel_npu = root / "torch_npu" / "npu"
    prepare_internals(
        {
            "torch_npu.npu": _literal_all(wheel_npu / "__init__.py"),
            "torch_npu.npu.amp": _literal_all(wheel_npu / "amp" / "__init__.py"),
            "torch_npu.npu.random": _literal_all(wheel_npu / "random.py"),
        }
    )


def prepare_internals(npu_all: dict[str, list[str]]) -> None:
    """Add the torch_npu internals that ``transfer_to_npu._init`` touches; ``npu_all``: the ``__all__`` of
    ``torch_npu.npu``, ``torch_npu.npu.amp`` and ``torch_npu.npu.random`` in the release that runs."""
    import importlib

    import torch.distributed
    import torch.profiler

    # Submodules that transfer_to_npu reaches as attributes, where this torch has them (torch 2.1 has no
    # torch.distributed.device_mesh; torch 2.6 imports torch.distributed.checkpoint only when asked).
    for name in ("torch.distributed.device_mesh", "torch.distributed.fsdp", "torch.distributed.checkpoint.filesystem"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass

    import torch_npu
    from npu_emulator import _backend

    npu = _backend.npu
    # torch_npu copies the names of torch_npu.npu.__all__ onto torch.cuda: the emulated module offers those of
    # this version's list that it implements (the others keep CUDA's meaning here; emulator README).
    npu._lazy_call = lambda callback: callback()  # type: ignore[attr-defined]
    npu.default_generators = (_backend.DEVICE_GENERATOR,)  # type: ignore[attr-defined]
    npu.NPUGraph = type("NPUGraph", (_Unsupported,), {})  # type: ignore[attr-defined]
    if not hasattr(npu, "set_autocast_dtype"):
        npu.set_autocast_dtype = lambda dtype: torch.set_autocast_dtype("npu", dtype)  # type: ignore[attr-defined]
    npu.__all__ = [n for n in npu_all.get("torch_npu.npu", []) if hasattr(npu, n)]  # type: ignore[attr-defined]
    amp = npu.amp
    amp.__all__ = [n for n in npu_all.get("torch_npu.npu.amp", []) if hasattr(amp, n)]
    _module(
        "torch.npu.amp.autocast_mode",
        "torch_npu.npu.amp.autocast_mode (emulated)",
        autocast=amp.autocast,
        custom_fwd=amp.custom_fwd,
        custom_bwd=amp.custom_bwd,
    )
    amp.autocast_mode = sys.modules["torch.npu.amp.autocast_mode"]
    amp.common = _module(
        "torch.npu.amp.common",
        "torch_npu.npu.amp.common (emulated)",
        amp_definitely_not_available=lambda: not npu.is_available(),
    )
    amp.grad_scaler = _module(
        "torch.npu.amp.grad_scaler", "torch_npu.npu.amp.grad_scaler (emulated)", GradScaler=amp.GradScaler
    )
    random_names = [n for n in npu_all.get("torch_npu.npu.random", []) if hasattr(npu, n)]
    npu.random = _module(  # type: ignore[attr-defined]
        "torch.npu.random",
        "torch_npu.npu.random (emulated)",
        __all__=random_names,
        **{n: getattr(npu, n) for n in random_names},
    )
    nothing = lambda *args, **kwargs: None  # noqa: E731
    npu.memory = _module(  # type: ignore[attr-defined]
        "torch.npu.memory",
        "torch_npu.npu.memory (emulated: no memory history)",
        _record_memory_history=nothing,
        _snapshot=lambda *args, **kwargs: {"segments": [], "device_traces": []},
        _dump_snapshot=nothing,
    )
    sys.modules.setdefault("torch_npu.npu", npu)
    sys.modules.setdefault("torch_npu.npu.amp", amp)

    _module("torch_npu.utils", "torch_npu.utils (emulated)")
    _module("torch_npu.utils._dynamo", "torch_npu.utils._dynamo (emulated)", use_jit_script=False)
    _module("torch_npu._init", "torch_npu._init (emulated)")
    _module("torch_npu._init.patches", "torch_npu._init.patches (emulated)")
    _module(
        "torch_npu._init.patches.monkey_patches",
        "torch_npu._init.patches.monkey_patches (emulated)",
        _apply_patches=_apply_patches,
    )
    torch_npu._apply_patches = _apply_patches  # type: ignore[attr-defined]  (2.1: torch_npu._apply_patches)
    torch_npu._C = types.SimpleNamespace(  # type: ignore[attr-defined]
        _npu_hostEmptyCache=nothing,
        _distributed_c10d=types.SimpleNamespace(
            ProcessGroupHCCL=type("ProcessGroupHCCL", (_Unsupported,), {"Options": _HcclOptions})
        ),
    )

    activity = types.SimpleNamespace(NPU=torch.profiler.ProfilerActivity.CPU, CPU=torch.profiler.ProfilerActivity.CPU)
    torch_npu.profiler = _module(  # type: ignore[attr-defined]
        "torch_npu.profiler",
        "torch_npu.profiler (emulated: torch's CPU profiler)",
        profile=torch.profiler.profile,
        schedule=torch.profiler.schedule,
        tensorboard_trace_handler=torch.profiler.tensorboard_trace_handler,
        ProfilerAction=torch.profiler.ProfilerAction,
        ProfilerActivity=activity,
        _KinetoProfile=type("_KinetoProfile", (torch.profiler.profiler._KinetoProfile,), {}),
        _ExperimentalConfig=_ExperimentalConfig,
    )

    if not hasattr(torch.storage.TypedStorage, "is_npu"):
        torch.storage.TypedStorage.is_npu = property(lambda self: self.device.type == "npu")  # type: ignore[attr-defined]
    if not hasattr(torch.distributed, "is_hccl_available"):
        # torch_npu adds it at import (npu_emulator.install() does too; its hccl runs gloo underneath).
        torch.distributed.is_hccl_available = lambda: True  # type: ignore[attr-defined]
