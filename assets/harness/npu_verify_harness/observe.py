"""Hooks that watch the user's training program: optimizer steps, the loss, float64 tensors, CPU fallbacks.

Each hook only records (and, for the step and batch counters, stops the program with :class:`HarnessStop`
once enough was seen); the program computes exactly what it would compute without them.
"""

import os
import re
import sys
import time
import warnings

FALLBACK_RE = re.compile(r"(?:operator '?aten::(\w+)'?.*)?fall back to run on the CPU", re.IGNORECASE)
_SELF_DIR = os.path.dirname(os.path.abspath(__file__))


class HarnessStop(BaseException):
    """Raised inside the user's program once the harness has seen enough; a BaseException so that the
    program's own ``except Exception`` does not swallow it."""


def call_site(project_root, skip_dirs=()):
    """`file:line` of the innermost caller inside the project (relative path), or None."""
    root = os.path.abspath(project_root) + os.sep
    frame = sys._getframe(2)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if path.startswith(root) and not path.startswith(_SELF_DIR) and not any(path.startswith(d) for d in skip_dirs):
            return "{}:{}".format(os.path.relpath(path, project_root).replace(os.sep, "/"), frame.f_lineno)
        frame = frame.f_back
    return None


class Installed:
    """Hooks installed into torch for one run: a torch mode entered with ``_enter`` and the undo callables in
    ``_undo``; ``uninstall`` leaves the mode and undoes the rest, last first, each failure ignored."""

    def __init__(self):
        self._undo = []
        self._mode = None

    def _enter(self, mode):
        self._mode = mode
        mode.__enter__()

    def uninstall(self):
        if self._mode is not None:
            try:
                self._mode.__exit__(None, None, None)
            except Exception:
                pass
            self._mode = None
        while self._undo:
            try:
                self._undo.pop()()
            except Exception:
                pass


class Observer(Installed):
    def __init__(self, torch, project_root, device_type, steps=None):
        super().__init__()
        self.torch = torch
        self.root = project_root
        self.skip_dirs = (os.path.join(os.path.abspath(project_root), "migrate_to_cloudrobo") + os.sep,)
        self.device_type = device_type
        # The real float64, known by its name: the harness may have applied the runtime patcher (Float64To32) before
        # this observer exists, and then the name torch.float64 is float32.
        self._is_float64 = {}
        self.want_steps = steps
        self.steps = 0
        self.started = time.perf_counter()
        self.step_times = []
        self._last = None
        self.losses = []
        self.params = None
        self.optimizer = None  # the last optimizer stepped
        self.float64_count = 0
        self.float64_sites = {}
        self.fallbacks = {}
        self._in_backward = False
        self.backward_site = None  # the line of the backward() call in progress
        self.busy = False  # the harness's own tensor ops run (reading the loss): not the program's
        self.profile = None  # the step profile (profile.StepProfile), told about each optimizer step

    # -- optimizer steps ---------------------------------------------------------------------------
    def _step_hook(self, optimizer, args, kwargs):
        sync = getattr(getattr(self.torch, "npu", None), "synchronize", None)
        if sync is not None and self.device_type == "npu":
            try:
                sync()
            except Exception:
                pass
        now = time.perf_counter()
        self.step_times.append(now - (self._last if self._last is not None else self.started))
        self._last = now
        self.steps += 1
        if self.profile is not None:
            self.profile.step_done()
        self.optimizer = optimizer
        if self.params is None:
            self.busy = True
            try:
                self.params = self._describe_params(optimizer)
            finally:
                self.busy = False
        if self.want_steps is not None and self.steps >= self.want_steps:
            raise HarnessStop("{} optimizer steps done".format(self.steps))

    def _describe_params(self, optimizer):
        devices, dtypes, off_device = {}, {}, []
        total = 0
        for group in optimizer.param_groups:
            for p in group["params"]:
                total += 1
                dev = str(p.device)
                devices[dev] = devices.get(dev, 0) + 1
                dt = str(p.dtype).replace("torch.", "")
                dtypes[dt] = dtypes.get(dt, 0) + 1
                if p.device.type != self.device_type and len(off_device) < 5:
                    off_device.append({"shape": list(p.shape), "device": dev})
        return {
            "optimizer": type(optimizer).__module__ + "." + type(optimizer).__name__,
            "count": total,
            "devices": devices,
            "dtypes": dtypes,
            "off_device_examples": off_device,
        }

    # -- the loss: the tensor backward() is called on -----------------------------------------------
    def _record_loss(self, tensor):
        self.busy = True
        try:
            self._read_loss(tensor)
        finally:
            self.busy = False

    def _read_loss(self, tensor):
        entry = {"step": self.steps + 1, "dtype": str(tensor.dtype).replace("torch.", ""), "device": str(tensor.device)}
        try:
            value = tensor.detach()
            finite = bool(self.torch.isfinite(value).all().cpu())
            entry["finite"] = finite
            if value.numel() == 1:
                entry["value"] = float(value.float().cpu())
        except BaseException as exc:  # reading the value must never break the program
            entry["error"] = "{}: {}".format(type(exc).__name__, exc)
        entry["site"] = call_site(self.root, self.skip_dirs)
        self.losses.append(entry)

    # -- float64 tensors on the device --------------------------------------------------------------
    def _note_outputs(self, out, depth=0):
        torch = self.torch
        if isinstance(out, torch.Tensor):
            dtype = out.dtype
            is_float64 = self._is_float64.get(dtype)
            if is_float64 is None:
                is_float64 = self._is_float64[dtype] = str(dtype) == "torch.float64"
            if is_float64 and out.device.type not in ("cpu", "meta"):
                self.float64_count += 1
                site = call_site(self.root, self.skip_dirs) or "<outside the project>"
                self.float64_sites[site] = self.float64_sites.get(site, 0) + 1
        elif depth < 2 and isinstance(out, (tuple, list)):
            for item in out[:8]:
                self._note_outputs(item, depth + 1)

    # -- CPU fallback warnings ----------------------------------------------------------------------
    def note_text(self, text):
        match = FALLBACK_RE.search(text)
        if match:
            op = match.group(1) or "?"
            self.fallbacks[op] = self.fallbacks.get(op, 0) + 1

    def install(self):
        torch = self.torch
        from torch.optim.optimizer import register_optimizer_step_post_hook

        handle = register_optimizer_step_post_hook(self._step_hook)
        self._undo.append(handle.remove)

        original_backward = torch.Tensor.backward
        observer = self

        def backward(self, *args, **kwargs):
            # A tensor subclass may route its backward through Tensor.backward again: record the outer call only.
            if observer._in_backward:
                return original_backward(self, *args, **kwargs)
            observer._record_loss(self)
            observer._in_backward = True
            observer.backward_site = observer.losses[-1].get("site") if observer.losses else None
            try:
                return original_backward(self, *args, **kwargs)
            finally:
                observer._in_backward = False
                observer.backward_site = None

        backward.__wrapped__ = original_backward
        torch.Tensor.backward = backward
        self._undo.append(lambda: setattr(torch.Tensor, "backward", original_backward))

        original_show = warnings.showwarning

        def showwarning(message, category, filename, lineno, file=None, line=None):
            observer.note_text(str(message))
            return original_show(message, category, filename, lineno, file, line)

        warnings.showwarning = showwarning
        warnings.filterwarnings("always", message=r".*fall back to run on the CPU.*")
        self._undo.append(lambda: setattr(warnings, "showwarning", original_show))

        from torch.overrides import TorchFunctionMode

        class Float64Watch(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                try:
                    observer._note_outputs(out)
                except Exception:
                    pass
                return out

        self._enter(Float64Watch())


def describe_batch(batch, torch, np=None, prefix="batch", out=None, depth=0):
    """Flatten a batch into {field: {shape, dtype, nan, inf}} (tensors and numpy arrays)."""
    if out is None:
        out = {}
    if depth > 4:
        return out
    if isinstance(batch, torch.Tensor):
        entry = {"shape": list(batch.shape), "dtype": str(batch.dtype).replace("torch.", ""), "device": str(batch.device)}
        if batch.is_floating_point() or batch.is_complex():
            data = batch.detach().cpu()
            entry["nan"] = int(torch.isnan(data).sum())
            entry["inf"] = int(torch.isinf(data).sum())
        out[prefix] = entry
    elif np is not None and isinstance(batch, np.ndarray):
        entry = {"shape": list(batch.shape), "dtype": str(batch.dtype), "device": "numpy"}
        if batch.dtype.kind in "fc":
            entry["nan"] = int(np.isnan(batch).sum())
            entry["inf"] = int(np.isinf(batch).sum())
        out[prefix] = entry
    elif isinstance(batch, dict):
        for key in sorted(batch, key=str):
            describe_batch(batch[key], torch, np, "{}.{}".format(prefix, key), out, depth + 1)
    elif isinstance(batch, (list, tuple)):
        for index, item in enumerate(batch[:32]):
            describe_batch(item, torch, np, "{}[{}]".format(prefix, index), out, depth + 1)
    elif hasattr(batch, "__dict__") and not isinstance(batch, type):
        for key, value in sorted(vars(batch).items()):
            describe_batch(value, torch, np, "{}.{}".format(prefix, key), out, depth + 1)
    else:
        out[prefix] = {"type": type(batch).__name__}
    return out
