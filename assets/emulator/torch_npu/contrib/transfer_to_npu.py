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

from typing import Any

import torch
import torch.distributed

from torch_npu.contrib import _real_transfer, _table_transfer


def _apply() -> str:
    """Replay, from the remap table, what the paired torch-npu release's own module does; its version."""
    version, entry = _table_transfer.entry_for(torch.__version__)
    _table_transfer.apply(entry)
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
