"""``from torch_npu.contrib import transfer_to_npu``: remap CUDA to the npu device for the rest of the process.

When the torch-npu wheel that pairs with this torch is extracted in the cache (``cargo xtask torch-npu``), this
module runs that wheel's own ``contrib/transfer_to_npu.py`` over the emulated device (``_real_transfer``), and
``SOURCE`` says so (``"torch-npu 2.14.0 contrib/transfer_to_npu.py"``). Otherwise (offline, no cache, a torch
that no pinned wheel pairs with, or ``NPU_EMULATOR_TRANSFER=standin``) the stand-in below runs and ``SOURCE`` is
``"stand-in"``.

The stand-in is that same module's behaviour replayed from the remap table (``_table_transfer``): the effects
that ``torch-npu/transfer_to_npu.json`` records for the release that pairs with this torch (module patches of
``torch.cuda``, device arguments, assignments such as ``Tensor.cuda`` -> ``Tensor.npu``, ``nccl`` -> ``hccl``,
``torch.jit.script`` a no-op), so the stand-in and the real module differ only where the real one depends on
torch_npu internals the table does not record. ``STANDIN_TABLE`` names the release replayed. Like the real module
it does NOT fix string comparisons (``device.type == "cuda"``) or ``torch.device(0)``. There is no undo: import it
in the process that should run remapped.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed

from torch_npu.contrib import _real_transfer, _table_transfer

# -- the module's own helpers under its names (its callers, torch_npu's tests included, reach them here); the
# -- real module, when it runs, replaces them with its own.

#: ``torch.cuda.is_available`` before the remap: what third-party code wrapped by
#: :func:`_wrapper_libraries_func` sees during its call.
_CUDA_IS_AVAILABLE = torch.cuda.is_available

#: The largest config file :func:`_check_input_file_valid` accepts (the module's 10 MiB).
_MAX_CONFIG_BYTES = 10 * 1024**2


def _check_input_file_valid(file_path: str) -> bool:
    """Whether ``file_path`` is a config file the module reads: not a link, existing, readable, a base name of at
    most 200 characters and at most 10 MiB."""
    if os.path.islink(os.path.abspath(file_path)):
        return False
    real = os.path.realpath(file_path)
    return (
        os.path.exists(real)
        and os.access(real, os.R_OK)
        and len(os.path.basename(real)) <= 200
        and os.path.getsize(real) <= _MAX_CONFIG_BYTES
    )


def _load_json_file(file_path: str) -> dict[str, Any]:
    """The JSON object in ``file_path``; ``{}`` when the file is not valid, not JSON or not an object."""
    if not _check_input_file_valid(file_path):
        return {}
    try:
        with open(file_path, encoding="utf-8") as file:
            loaded = json.load(file)
    except json.JSONDecodeError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _replace_cuda_to_npu_in_dict(device_dict: dict[Any, Any]) -> dict[Any, Any]:
    """A copy of ``device_dict`` with ``cuda`` written ``npu`` in its string keys and string values."""
    return {
        (k.replace("cuda", "npu") if isinstance(k, str) else k): (v.replace("cuda", "npu") if isinstance(v, str) else v)
        for k, v in device_dict.items()
    }


def _wrapper_libraries_func(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` run with ``torch.cuda.is_available`` as it was before the remap (False without CUDA): what the
    module does to the third-party functions its ``apis_config.json`` lists. As there, the remapped one is put back
    when ``function`` returns, not when it raises."""

    @functools.wraps(function)
    def unremapped(*args: Any, **kwargs: Any) -> Any:
        remapped = torch.cuda.is_available
        torch.cuda.is_available = _CUDA_IS_AVAILABLE
        result = function(*args, **kwargs)
        torch.cuda.is_available = remapped
        return result

    return unremapped


def _del_nccl_device_backend_map() -> None:
    """Drop ``cuda`` from ``torch.distributed.Backend.default_device_backend_map`` where torch has that map."""
    backend_map = getattr(torch.distributed.Backend, "default_device_backend_map", None)
    if backend_map is not None and "cuda" in backend_map:
        del backend_map["cuda"]





def _apply() -> str:
    """Replay, from the remap table, what the paired torch-npu release's own module does; its version."""
    version, entry = _table_transfer.entry_for(torch.__version__)
    _table_transfer.apply(entry)
    _table_transfer.apply_calls(version)
    torch._npu_transfer_applied = True  # type: ignore[attr-defined]
    return version


def _run_real(version: str, root: Any) -> str:
    """Run the wheel's own transfer_to_npu.py as this module (its ``__file__`` finds its apis_config.json)."""
    path = root / _real_transfer.TRANSFER
    _real_transfer.prepare(root)
    globals()["__file__"] = str(path)
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), globals())  # noqa: S102
    torch._npu_transfer_applied = True  # type: ignore[attr-defined]
    return f"torch-npu {version} contrib/transfer_to_npu.py"


_real = None if getattr(torch, "_npu_transfer_applied", False) else _real_transfer.locate()
if _real is None:
    SOURCE = "stand-in"
    #: Why the wheel's own module did not run.
    STANDIN_REASON = _real_transfer.why_not()
    #: The torch-npu release whose recorded effects the stand-in replayed.
    STANDIN_TABLE = _apply()
    # The wrappers the table's expressions name, under the real module's names.
    _wrapper_cuda = _table_transfer._wrapper_cuda
    _wrapper_hccl = _table_transfer._wrapper_hccl
    _wrapper_profiler = _table_transfer._wrapper_profiler
else:
    SOURCE = _run_real(*_real)
