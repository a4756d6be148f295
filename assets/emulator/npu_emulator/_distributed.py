"""``torch.distributed`` on the emulated device: an ``hccl`` backend that runs gloo underneath, and no NCCL.

- ``hccl`` is registered as torch_npu registers it (``Backend.register_backend("hccl", ..., extended_api=True,
  devices=["npu"])``, torch-npu 2.14.0 ``_init/registry/distributed.py``), so user code, ``transfer_to_npu``
  (which rewrites ``nccl`` to ``hccl``, ``contrib/transfer_to_npu.py`` ``_wrapper_hccl``) and
  ``dist.get_backend()`` all see ``hccl``. Its process group runs each collective with gloo on the host tensors
  behind the device tensors, in place, so results land in the device tensors; DDP (parameter broadcast at
  construction, gradient buckets, ``find_unused_parameters``/``static_graph`` where the C++ hooks give pinned
  host memory), ``all_reduce``, ``broadcast``, ``all_gather``, ``reduce_scatter`` and ``barrier`` work, on every
  torch of the matrix. Collectives are synchronous.
- NCCL is unavailable, as with the CPU build of torch that torch_npu runs on: ``init_process_group("nccl")``
  raises torch's own ``Distributed package doesn't have NCCL built in`` unless ``transfer_to_npu`` rewrote it.
- ``NPU_EMULATOR_COLLECTIVE_TIMEOUT`` (seconds) caps the process group's timeout, so that a rank waiting for a
  peer that never joins a collective fails with gloo's timeout instead of waiting for torch's default 30 minutes.
- With more than one device, ``Tensor.to("npu")`` goes to the current device (backward runs on the calling thread
  with any number of devices, see ``_install``).
"""

from __future__ import annotations

import datetime
import inspect
import os
from typing import Any

import torch

from npu_emulator import _devices
from npu_emulator._errors import EmulatedNPUError, emulated_message

TIMEOUT_ENV = "NPU_EMULATOR_COLLECTIVE_TIMEOUT"
BACKEND = "hccl"


def install(pinned_host_memory: bool = True, why_not: str | None = None) -> None:
    """Called once by ``npu_emulator.install()``.

    ``pinned_host_memory``: the PrivateUse1 hooks give a pinned-memory allocator (the emulator's C++ hooks; on
    torch >= 2.10 without a C++ compiler torch's Python hooks, which cannot); without it DDP options that need one
    are refused at construction, ``why_not`` saying why the C++ hooks are missing.
    """
    if _devices.count() > 1:
        _devices.install_current_device_to()
    import torch.distributed as dist

    if not dist.is_available():
        return
    c10d = dist.distributed_c10d
    # torch_npu runs on a CPU build of torch: no NCCL (NPU-FACTS.md, "torch_npu basics": the backend is hccl).
    c10d._NCCL_AVAILABLE = False
    if not hasattr(dist, "is_hccl_available"):
        dist.is_hccl_available = lambda: True  # type: ignore[attr-defined]
    if BACKEND.upper() not in dist.Backend._plugins:
        takes_devices = "devices" in inspect.signature(dist.Backend.register_backend).parameters
        kwargs = {"devices": ["npu"]} if takes_devices else {}
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, **kwargs)
    if not pinned_host_memory:
        _guard_used_parameter_map(why_not)


#: The DDP options whose reducer copies its map of used parameters through pinned host memory.
PINNED_MAP_OPTIONS = ("find_unused_parameters", "static_graph")

PINNED_MAP_CAUSE = (
    "DDP's reducer copies its map of used parameters to the device through pinned host memory, and torch's Python "
    "device hooks (torch >= 2.10) have no pinned-memory allocator (NotImplementedError for getPinnedMemoryAllocator "
    "at the first backward); the emulator's C++ hooks, which have one, are not in use: {why_not}"
)
PINNED_MAP_HINT = (
    "install a C++ compiler (apt-get install g++) so that the emulator builds its C++ hooks (then this trains as on "
    "CPU ranks); torch_npu's NPU hooks provide pinned memory (torch-npu 2.14.0 "
    "torch_npu/csrc/core/npu/NPUHooksInterface.h), so this runs on a real NPU; or set {option}=False where no "
    "parameter goes unused in a step"
)


def _guard_used_parameter_map(why_not: str | None) -> None:
    """Refuse ``DistributedDataParallel(find_unused_parameters=True)`` / ``static_graph=True`` over npu
    parameters at construction, as an emulator limitation that names the option, instead of torch's
    NotImplementedError from inside the first backward pass."""
    import functools
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    original = DistributedDataParallel.__init__
    if getattr(original, "_npu_emulator_guard", False):
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            bound = signature.bind(self, *args, **kwargs).arguments
        except TypeError:
            bound = {}
        module = bound.get("module")
        on_device = module is not None and any(p.device.type == "npu" for p in module.parameters())
        for option in PINNED_MAP_OPTIONS:
            if on_device and bound.get(option):
                from npu_emulator._errors import limitation

                op = f"DistributedDataParallel({option}=True)"
                cause = PINNED_MAP_CAUSE.format(why_not=why_not or "unknown")
                raise limitation(op, NotImplementedError(cause), PINNED_MAP_HINT.format(option=option))
        original(self, *args, **kwargs)

    init._npu_emulator_guard = True  # type: ignore[attr-defined]
    DistributedDataParallel.__init__ = init  # type: ignore[method-assign]


def _timeout(given: datetime.timedelta | None) -> datetime.timedelta:
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    try:
        cap = datetime.timedelta(seconds=float(raw)) if raw else None
    except ValueError:
        cap = None
    if given is None:
        return cap or datetime.timedelta(minutes=30)
    return min(given, cap) if cap is not None and cap.total_seconds() > 0 else given


def _create(opts: Any, pg_options: Any) -> Any:
    del pg_options
    import torch.distributed as dist

    timeout = _timeout(opts.timeout)
    gloo = dist.ProcessGroupGloo(opts.store, opts.group_rank, opts.group_size, timeout)
    group = _group_class()(opts.group_rank, opts.group_size, gloo, timeout)
    # Collectives that go through torch's dispatcher (functional collectives of FSDP and DTensor) reach
    # gloo with the host tensors the device tensors unwrap to; the group's name lives on its backend.
    gloo_type = dist.ProcessGroup.BackendType.GLOO
    group._register_backend(torch.device("cpu"), gloo_type, gloo)
    # A group made for a device (`init_process_group(device_id=npu:N)`, eager init) looks its backend up by the
    # device's type: the npu's is the same gloo.
    group._register_backend(torch.device("npu"), gloo_type, gloo)
    if hasattr(group, "_set_default_backend"):  # torch < 2.2 has no default backend per group
        group._set_default_backend(gloo_type)
    return group


def _options(name: str) -> Any:
    """A collective's options object (torch < 2.10 exports some only from ``torch._C._distributed_c10d``)."""
    import torch.distributed as dist

    found = getattr(dist, name, None) or getattr(torch._C._distributed_c10d, name)
    return found()


def _regroup(hosts: list[Any], start: int, sizes: list[int]) -> tuple[list[list[Any]], int]:
    """``hosts`` from ``start`` cut back into the nested lists of ``sizes`` a collective takes; and where they end."""
    groups = []
    for size in sizes:
        groups.append(hosts[start : start + size])
        start += size
    return groups, start


_CLASSES: dict[str, type] = {}
#: torch >= 2.10 keeps a Python ``Work`` object alive while C++ waits on it; older torch drops its Python half, so
#: C++ (DDP's ``_verify_params_across_processes``) waited on the base class forever: it gets a C++ work there.
_PYTHON_WORK_KEPT = hasattr(torch.utils.backend_registration, "_setup_privateuseone_for_python_backend")


def _group_class() -> type:
    """The process group and work classes, built on first use (``torch.distributed`` imports lazily)."""
    found = _CLASSES.get("group")
    if found is not None:
        return found
    import torch.distributed as dist

    class EmulatedHCCLWork(dist._Work):  # type: ignore[misc, name-defined]
        """A finished collective: the emulated collectives run synchronously."""

        def __init__(self, result: Any) -> None:
            super().__init__()
            self._result = result
            self._future: Any = None

        def wait(self, timeout: Any = None) -> bool:
            del timeout
            return True

        def is_completed(self) -> bool:
            return True

        def is_success(self) -> bool:
            return True

        def get_future(self) -> Any:
            if self._future is None:
                self._future = torch.futures.Future()
                self._future.set_result(self._result)
            return self._future

    class EmulatedHCCL(dist.ProcessGroup):  # type: ignore[misc]
        """The ``hccl`` process group of the emulated device: gloo on the host copies of device tensors."""

        def __init__(self, rank: int, size: int, gloo: Any, timeout: datetime.timedelta) -> None:
            super().__init__(rank, size)
            self._gloo = gloo
            self.timeout = timeout

        def getBackendName(self) -> str:  # noqa: N802 - torch's method name
            return BACKEND

        def name(self) -> str:
            return BACKEND

        def _run(self, call: Any, tensors: list[Any], result: Any) -> Any:
            hosts, back = [], []
            for tensor in tensors:
                host, copy_back = _host(tensor)
                hosts.append(host)
                if copy_back is not None:
                    back.append(copy_back)
            call(hosts).wait()
            for copy_back in back:
                copy_back()
            return _finished(result)

        def allreduce(self, tensors: Any, opts: Any = None) -> Any:
            opts = opts if opts is not None else _options("AllreduceOptions")
            if not isinstance(tensors, list):
                tensors = [tensors]
            return self._run(lambda h: self._gloo.allreduce(h, opts), tensors, tensors)

        def allreduce_coalesced(self, tensors: Any, opts: Any = None) -> Any:
            opts = opts if opts is not None else _options("AllreduceCoalescedOptions")
            return self._run(lambda h: self._gloo.allreduce_coalesced(h, opts), tensors, tensors)

        def broadcast(self, tensors: Any, opts: Any = None) -> Any:
            opts = opts if opts is not None else _options("BroadcastOptions")
            if not isinstance(tensors, list):
                tensors = [tensors]
            return self._run(lambda h: self._gloo.broadcast(h, opts), tensors, tensors)

        def reduce(self, tensors: Any, opts: Any = None) -> Any:
            opts = opts if opts is not None else _options("ReduceOptions")
            return self._run(lambda h: self._gloo.reduce(h, opts), tensors, tensors)

        def allgather(self, output_lists: Any, inputs: Any, opts: Any = None) -> Any:
            opts = opts if opts is not None else _options("AllgatherOptions")
            flat = [t for group in output_lists for t in group]
            sizes = [len(group) for group in output_lists]

            def call(hosts: list[Any]) -> Any:
                outs, end = _regroup(hosts, 0, sizes)
                return self._gloo.allgather(outs, hosts[end:], opts)

            return self._run(call, [*flat, *inputs], output_lists)

        def _allgather_base(self, output: Any, input: Any, opts: Any = None) -> Any:  # noqa: A002
            opts = opts if opts is not None else _options("AllgatherOptions")
            return self._run(lambda h: self._gloo._allgather_base(h[0], h[1], opts), [output, input], output)

        def reduce_scatter(self, outputs: Any, input_lists: Any, opts: Any = None) -> Any:
            opts = opts if opts is not None else _options("ReduceScatterOptions")
            flat = [t for group in input_lists for t in group]
            sizes = [len(group) for group in input_lists]

            def call(hosts: list[Any]) -> Any:
                count = len(outputs)
                ins, _ = _regroup(hosts, count, sizes)
                return self._gloo.reduce_scatter(hosts[:count], ins, opts)

            return self._run(call, [*outputs, *flat], outputs)

        def _reduce_scatter_base(self, output: Any, input: Any, opts: Any = None) -> Any:  # noqa: A002
            opts = opts if opts is not None else _options("ReduceScatterOptions")
            return self._run(
                lambda h: self._gloo._reduce_scatter_base(h[0], h[1], opts), [output, input], output
            )

        def gather(self, output_lists: Any, inputs: Any, opts: Any = None) -> Any:
            opts = opts if opts is not None else _options("GatherOptions")
            flat = [t for group in output_lists for t in group]
            sizes = [len(group) for group in output_lists]

            def call(hosts: list[Any]) -> Any:
                outs, end = _regroup(hosts, 0, sizes)
                return self._gloo.gather(outs, hosts[end:], opts)

            return self._run(call, [*flat, *inputs], output_lists)

        def scatter(self, outputs: Any, input_lists: Any, opts: Any = None) -> Any:
            opts = opts if opts is not None else _options("ScatterOptions")
            flat = [t for group in input_lists for t in group]
            sizes = [len(group) for group in input_lists]

            def call(hosts: list[Any]) -> Any:
                count = len(outputs)
                ins, _ = _regroup(hosts, count, sizes)
                return self._gloo.scatter(hosts[:count], ins, opts)

            return self._run(call, [*outputs, *flat], outputs)

        def barrier(self, opts: Any = None) -> Any:
            opts = opts if opts is not None else _options("BarrierOptions")
            self._gloo.barrier(opts).wait()
            return _finished([])

        def send(self, tensors: Any, dst: int, tag: int = 0) -> Any:
            return self._run(lambda h: self._gloo.send(h, dst, tag), tensors, tensors)

        def recv(self, tensors: Any, src: int, tag: int = 0) -> Any:
            return self._run(lambda h: self._gloo.recv(h, src, tag), tensors, tensors)

    def _finished(result: Any) -> Any:
        if not _PYTHON_WORK_KEPT:
            future = torch.futures.Future()
            future.set_result(result)
            return torch._C._distributed_c10d._create_work_from_future(future)
        return EmulatedHCCLWork(result)

    _CLASSES["group"] = EmulatedHCCL
    return EmulatedHCCL


def _host(tensor: Any) -> tuple[torch.Tensor, Any]:
    """The host tensor gloo works on for ``tensor``, and a callable copying a contiguous stand-in back (or None)."""
    from npu_emulator._tensor import NPUTensor

    if isinstance(tensor, NPUTensor):
        elem = tensor.elem
    elif isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu":
        elem = tensor
    else:
        detail = f"an hccl collective got a {getattr(tensor, 'device', type(tensor).__name__)} tensor"
        raise EmulatedNPUError(emulated_message("Tensors must be npu or cpu tensors", detail, "the emulated hccl"))
    if elem.is_contiguous():
        return elem, None
    dense = elem.contiguous()
    return dense, lambda: elem.copy_(dense)
