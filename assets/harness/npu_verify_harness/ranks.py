"""One rank of a distributed ``--pipeline`` run (``npu-verify --nproc-per-node N``): what npu-verify compares
across ranks.

Each rank records the backend its program asked ``init_process_group`` for (after ``transfer_to_npu`` rewrote
it, as torch received it) and the one the process group runs, the device of its parameters and of the tensors
its model was called with, and a digest of its parameters after the last step: after a data-parallel step the
all-reduced gradients make every rank's parameters equal. Sharded parameters (FSDP) differ between ranks by design
and are counted, not digested.
"""

import hashlib
import os

from .observe import call_site


class DistWatch:
    def __init__(self, torch, root, observer):
        self.torch = torch
        self.root = root
        self.observer = observer
        self.calls = []
        self.batch_devices = {}
        self._batch_step = None
        self._undo = []

    def install(self):
        torch = self.torch
        try:
            import torch.distributed as dist
        except ImportError:
            return
        watch = self
        original = dist.init_process_group

        def init_process_group(*args, **kwargs):
            backend = kwargs.get("backend", args[0] if args and isinstance(args[0], str) else None)
            device_id = kwargs.get("device_id")
            watch.calls.append(
                {
                    "backend": backend if isinstance(backend, str) or backend is None else str(backend),
                    "device_id": None if device_id is None else str(device_id),
                    "site": call_site(watch.root, watch.observer.skip_dirs),
                }
            )
            return original(*args, **kwargs)

        init_process_group.__wrapped__ = original
        dist.init_process_group = init_process_group
        self._undo.append(lambda: setattr(dist, "init_process_group", original))

        from torch.nn.modules.module import register_module_forward_pre_hook

        def pre_hook(module, args):
            # The first module call of each step is the outermost one (the DDP wrapper or the model).
            if watch._batch_step == watch.observer.steps:
                return None
            watch._batch_step = watch.observer.steps
            for tensor in _tensors(torch, args):
                name = str(tensor.device)
                watch.batch_devices[name] = watch.batch_devices.get(name, 0) + 1
            return None

        handle = register_module_forward_pre_hook(pre_hook)
        self._undo.append(handle.remove)

    def uninstall(self):
        while self._undo:
            try:
                self._undo.pop()()
            except Exception:
                pass

    def fact(self):
        torch = self.torch
        env = os.environ
        value = {
            "rank": _int(env.get("RANK")),
            "local_rank": _int(env.get("LOCAL_RANK")),
            "world_size": _int(env.get("WORLD_SIZE")),
            "local_world_size": _int(env.get("LOCAL_WORLD_SIZE")),
            "init_calls": self.calls,
            "requested_backend": self.calls[0]["backend"] if self.calls else None,
            "backend": None,
            "steps": self.observer.steps,
            "params_devices": (self.observer.params or {}).get("devices", {}),
            "batch_devices": self.batch_devices,
            "current_device": None,
            "params_digest": None,
        }
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                value["backend"] = str(dist.get_backend())
        except Exception as exc:
            value["backend_error"] = "{}: {}".format(type(exc).__name__, exc)
        npu = getattr(torch, "npu", None)
        try:
            if npu is not None:
                value["current_device"] = int(npu.current_device())
        except Exception:
            pass
        optimizer = self.observer.optimizer
        if optimizer is not None:
            try:
                value["params_digest"], value["params_count"], value["params_sharded"] = digest(torch, optimizer)
            except Exception as exc:
                value["params_digest_error"] = "{}: {}".format(type(exc).__name__, exc)
        return value


def sharded(p):
    """A parameter each rank holds only a shard of (FSDP's DTensor or flat parameter)."""
    return hasattr(p, "_local_tensor") or getattr(p, "_is_flat_param", False) or type(p).__name__ in (
        "DTensor", "FlatParameter")


def digest(torch, optimizer):
    """(sha256 of every replicated parameter's bytes in order, or None when there is none; the number of
    replicated parameters; the number of sharded ones, which differ between ranks by design)."""
    sha = hashlib.sha256()
    count = shards = 0
    with torch.no_grad():
        for group in optimizer.param_groups:
            for p in group["params"]:
                if sharded(p):
                    shards += 1
                    continue
                host = p.detach().to("cpu").contiguous().reshape(-1)
                sha.update(str(host.dtype).encode())
                sha.update(host.view(torch.uint8).numpy().tobytes())
                count += 1
    return (sha.hexdigest() if count else None), count, shards


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _tensors(torch, args, depth=0):
    for item in args if isinstance(args, (list, tuple)) else (args,):
        if isinstance(item, torch.Tensor):
            yield item
        elif depth < 2 and isinstance(item, dict):
            for value in list(item.values())[:16]:
                yield from _tensors(torch, value, depth + 1)
        elif depth < 2 and isinstance(item, (list, tuple)):
            yield from _tensors(torch, list(item)[:16], depth + 1)
