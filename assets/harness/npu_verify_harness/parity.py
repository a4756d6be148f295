"""`--parity`: record what a training run computes, cheaply, so that two runs can be compared step by step and
module by module (npu-verify compares the records).

The record (one JSON object per run, ``npu-verify-parity`` version 1; docs/cli/npu-verify.md describes it):

- ``steps``: per optimizer step ``loss`` (the tensor ``backward()`` was called on), ``lr`` and ``grad_norm`` per
  parameter group and ``grad_norm`` over all (the gradients the optimizer stepped with), and ``param_norms`` (the L2
  norm of every parameter after the step, by qualified name);
- ``events``: per module call, in the order the calls finished (forward) or the gradients arrived (backward):
  ``step`` (1 = before the first optimizer step), ``dir`` (``forward`` / ``backward``), ``module`` (qualified name:
  the class of the outermost module, then the attribute path), ``cls``, ``call`` (the how-manieth call of that
  module in that step and direction), ``parent`` (the enclosing module call, ``[module, call]``), ``autocast`` (the dtype autocast
  computed in during the forward call, else false),
  ``site`` (the module's source file and line), ``called_at`` (the project line that called it), ``inputs`` and ``outputs`` (forward) or ``outputs`` (backward: the
  gradient of the module's output): per floating tensor ``[dtype, numel, max, min, mean, l2]``; the first forward
  call of each module also has ``buffers`` (its own floating buffers by name, the same summary);
- ``initial_param_norms``: the norms before the first step;
- ``spans``: per module ``site``, ``[first, last]`` line of its class in that file;
- ``patches``: the runtime patches of the run (``name``, ``state``: ``applied`` / ``disabled`` / ``skipped``...,
  ``fires``), from the patchers' own reports; ``patch_fires``: where they acted, ``patch``, ``site`` (the project
  line), ``module`` (the innermost module call in progress, else null), ``step``, ``count``.

Batches: the reference saves the first DataLoader batches it draws (``batches_out``); a run given ``batches_in``
still draws its own (so the program's random draws stay the same) and is handed the saved ones instead.
"""

import copy
import inspect
import os

from .observe import Installed, call_site

FORMAT = "npu-verify-parity"
VERSION = 1
#: The most floating tensors summarised per input or output of one call.
TENSORS_PER_SIDE = 4


class NoPatcher:
    """The reference runs without runtime patches: a program that applies the patcher gets this one."""

    def apply(self):
        return self

    def remove(self):
        return None

    def report(self):
        return []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def install_no_patches():
    """Register a ``runtime_patches`` whose builders return :class:`NoPatcher`, for the reference run."""
    import sys
    import types

    module = types.ModuleType("runtime_patches")
    module.build_vla_patcher = lambda *a, **k: NoPatcher()
    module.build_npu_patcher = lambda *a, **k: NoPatcher()
    module.active_patcher = lambda: None
    sys.modules["runtime_patches"] = module
    package = types.ModuleType("migrate_to_cloudrobo")
    package.__path__ = []
    package.runtime_patches = module
    sys.modules["migrate_to_cloudrobo"] = package
    sys.modules["migrate_to_cloudrobo.runtime_patches"] = module


#: The most distinct (patch, line, module, step) places remembered; later fires are counted only.
FIRE_PLACES = 2000


class PatchFires:
    """Where the runtime patches act: the patch base class's counting method is wrapped once the module is loaded,
    before a patcher installs (its patches bind the method then), and each fire is filed under the project line, the
    module call in progress and the step."""

    def __init__(self, module):
        self.recorder = None
        self.places = {}
        self.extra = {}
        self._base = getattr(module, "_Patch", None)
        self._original = getattr(self._base, "fired", None)
        if self._base is None or not callable(self._original):
            self._base = None
            return
        original = self._original
        watch = self

        def fired(patch):
            original(patch)
            watch.note(getattr(patch, "name", type(patch).__name__))

        self._base.fired = fired

    def note(self, name):
        recorder = self.recorder
        if recorder is None or recorder.busy:
            return
        module = recorder.stack[-1][0] if recorder.stack else None
        step = recorder.step_now()
        site = call_site(recorder.observer.root, recorder.observer.skip_dirs) if len(self.places) < FIRE_PLACES \
            else None
        key = (name, site, module, step)
        if key in self.places:
            self.places[key] += 1
        elif len(self.places) < FIRE_PLACES:
            self.places[key] = 1
        else:
            self.extra[name] = self.extra.get(name, 0) + 1

    def entries(self):
        out = [{"patch": n, "site": s, "module": m, "step": st, "count": c}
               for (n, s, m, st), c in self.places.items()]
        out += [{"patch": n, "site": None, "module": None, "step": None, "count": c} for n, c in self.extra.items()]
        return out

    def uninstall(self):
        if self._base is not None:
            self._base.fired = self._original
            self._base = None


def patch_states(watch):
    """``[{name, state, fires}]`` of every patch of the patchers the run built (the last report of a name wins)."""
    if watch is None:
        return []
    found = {}
    for report in watch.reports():
        if not isinstance(report, list):
            continue
        for row in report:
            if isinstance(row, dict) and row.get("name"):
                found[row["name"]] = {"name": row["name"], "state": row.get("state"), "fires": row.get("fires", 0)}
    return list(found.values())


class Recorder(Installed):
    def __init__(self, torch, observer, batches_in=None, batches_out=None, max_batches=8):
        super().__init__()
        self.torch = torch
        self.observer = observer
        self.names = {}  # id(module) -> qualified name
        self.stack = []  # (module name, call) of the module calls in progress
        self.calls = {}  # (step, dir, name) -> count
        self.events = []
        self.steps = []
        self.initial = None
        self.busy = False
        self.batches_in = batches_in
        self.batches_out = batches_out
        self.max_batches = max_batches
        self.saved = []
        self.replayed = 0
        self.batches_drawn = 0
        self._sites = {}
        self.spans = {}
        self.watch = None
        self.fires = None
        self._buffers_seen = set()

    # -- statistics ----------------------------------------------------------------------------------
    def stats(self, value, depth=0, out=None):
        torch = self.torch
        if out is None:
            out = []
        if len(out) >= TENSORS_PER_SIDE or depth > 2:
            return out
        if isinstance(value, torch.Tensor):
            if value.is_floating_point() and value.numel() > 0 and value.device.type != "meta":
                t = value.detach()
                if t.device.type != "cpu":
                    t = t.cpu()
                t = t.double()
                figures = torch.stack([t.max(), t.min(), t.mean(), t.norm()]).tolist()
                out.append([str(value.dtype).replace("torch.", ""), int(value.numel())] + figures)
        elif isinstance(value, (list, tuple)):
            for item in value:
                self.stats(item, depth + 1, out)
        elif isinstance(value, dict):
            for key in sorted(value, key=str):
                self.stats(value[key], depth + 1, out)
        return out

    def step_now(self):
        return self.observer.steps + 1

    def name_of(self, module):
        name = self.names.get(id(module))
        if name is None:
            root = type(module).__name__
            for sub_name, sub in module.named_modules():
                self.names.setdefault(id(sub), root + ("." + sub_name if sub_name else ""))
            name = self.names[id(module)]
        return name

    def site_of(self, module):
        cls = type(module)
        site = self._sites.get(cls)
        if site is None:
            try:
                path = inspect.getsourcefile(cls) or "?"
                line = inspect.getsourcelines(cls.forward)[1]
                site = "{}:{}".format(os.path.relpath(path) if path.startswith(os.getcwd()) else path, line)
                try:
                    lines, first = inspect.getsourcelines(cls)
                    self.spans[site] = [first, first + len(lines) - 1]
                except (OSError, TypeError):
                    pass
            except (OSError, TypeError):
                site = "?"
            self._sites[cls] = site
        return site

    def autocast(self):
        """The dtype autocast computes in where it is on (``"bfloat16"``...), else False."""
        torch = self.torch
        for device in ("cpu", "cuda", "npu"):
            try:
                if torch.is_autocast_enabled(device):
                    return str(torch.get_autocast_dtype(device)).replace("torch.", "")
            except Exception:
                continue
        return False

    def next_call(self, step, direction, name):
        key = (step, direction, name)
        self.calls[key] = self.calls.get(key, 0) + 1
        return self.calls[key]

    # -- hooks ---------------------------------------------------------------------------------------
    def _pre(self, module, args, kwargs=None):
        if self.busy:
            return
        self.busy = True
        try:
            name = self.name_of(module)
            step = self.step_now()
            call = self.next_call(step, "forward", name)
            inputs = self.stats(list(args) + (list(kwargs.values()) if kwargs else []))
            called_at = call_site(self.observer.root, self.observer.skip_dirs)
            self.stack.append((name, call, step, inputs, self.stack[-1][:2] if self.stack else None, called_at))
        finally:
            self.busy = False

    def _post(self, module, args, output, kwargs=None):
        if self.busy or not self.stack:
            return
        self.busy = True
        try:
            name, call, step, inputs, parent, called_at = self.stack.pop()
            if name != self.name_of(module):
                return
            autocast = self.autocast()
            event = {
                "step": step, "dir": "forward", "module": name, "cls": type(module).__name__, "call": call,
                "parent": list(parent) if parent else None, "autocast": autocast, "site": self.site_of(module),
                "called_at": called_at, "inputs": inputs, "outputs": self.stats(output),
            }
            if id(module) not in self._buffers_seen:
                self._buffers_seen.add(id(module))
                buffers = {}
                for buffer_name, buffer in module.named_buffers(recurse=False):
                    figures = self.stats(buffer)
                    if figures:
                        buffers[buffer_name] = figures[0]
                if buffers:
                    event["buffers"] = buffers
            self.events.append(event)
            self._watch_grads(module, name, output, autocast)
        finally:
            self.busy = False

    def _watch_grads(self, module, name, output, autocast):
        torch = self.torch
        tensors = []

        def collect(value, depth=0):
            if len(tensors) >= TENSORS_PER_SIDE or depth > 2:
                return
            if isinstance(value, torch.Tensor):
                if value.requires_grad and value.is_floating_point():
                    tensors.append(value)
            elif isinstance(value, (list, tuple)):
                for item in value:
                    collect(item, depth + 1)
            elif isinstance(value, dict):
                for key in sorted(value, key=str):
                    collect(value[key], depth + 1)

        collect(output)
        recorder = self
        cls = type(module).__name__
        site = self.site_of(module)
        for tensor in tensors:
            def hook(grad, name=name):
                if recorder.busy:
                    return None
                recorder.busy = True
                try:
                    step = recorder.step_now()
                    recorder.events.append({
                        "step": step, "dir": "backward", "module": name, "cls": cls,
                        "call": recorder.next_call(step, "backward", name), "parent": None, "autocast": autocast,
                        "site": site, "inputs": [], "outputs": recorder.stats(grad),
                    })
                finally:
                    recorder.busy = False
                return None

            try:
                tensor.register_hook(hook)
            except RuntimeError:
                pass

    def named_params(self, optimizer):
        """``[(qualified name, parameter)]`` of the optimizer's parameters (``group<g>.<i>`` when no module has it)."""
        wanted = {id(p) for group in optimizer.param_groups for p in group["params"]}
        found = {}
        for module_id, name in list(self.names.items()):
            module = self._modules.get(module_id)
            if module is None:
                continue
            for pname, p in module.named_parameters(recurse=False):
                if id(p) in wanted and id(p) not in found:
                    found[id(p)] = name + "." + pname
        out = []
        for g, group in enumerate(optimizer.param_groups):
            for i, p in enumerate(group["params"]):
                out.append((found.get(id(p), "group{}.{}".format(g, i)), p))
        return out

    def _norms(self, optimizer):
        return {name: float(p.detach().cpu().double().norm()) for name, p in self.named_params(optimizer)}

    def _step_pre(self, optimizer, args, kwargs):
        self.busy = True
        try:
            if self.initial is None:
                self.initial = self._norms(optimizer)
            groups = []
            total = 0.0
            for group in optimizer.param_groups:
                sq = 0.0
                for p in group["params"]:
                    if p.grad is not None:
                        sq += float(p.grad.detach().cpu().double().pow(2).sum())
                total += sq
                lr = group.get("lr")
                groups.append({"lr": float(lr) if lr is not None else None, "grad_norm": sq ** 0.5})
            loss = None
            if self.observer.losses and self.observer.losses[-1].get("step") == self.step_now():
                loss = self.observer.losses[-1].get("value")
            self._pending = {"step": self.step_now(), "loss": loss, "grad_norm": total ** 0.5, "groups": groups,
                             "optimizer": type(optimizer).__name__}
        finally:
            self.busy = False

    def _step_post(self, optimizer, args, kwargs):
        self.busy = True
        try:
            entry = getattr(self, "_pending", None) or {"step": self.step_now()}
            entry["param_norms"] = self._norms(optimizer)
            self.steps.append(entry)
            self._pending = None
        finally:
            self.busy = False

    # -- batches -------------------------------------------------------------------------------------
    def _on_batch(self, batch):
        index = self.batches_drawn
        self.batches_drawn += 1
        if self.batches_out is not None and len(self.saved) < self.max_batches:
            self.saved.append(_to_cpu(batch, self.torch))
        if self.batches_in is not None and index < len(self.batches_in):
            self.replayed += 1
            return copy.deepcopy(self.batches_in[index])
        return batch

    def install(self):
        torch = self.torch
        import weakref

        from torch.nn.modules import module as module_mod
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._modules = weakref.WeakValueDictionary()
        recorder = self
        original_name_of = self.name_of

        def name_of(module):
            recorder._modules[id(module)] = module
            return original_name_of(module)

        self.name_of = name_of
        self._undo.append(module_mod.register_module_forward_pre_hook(self._pre).remove)
        self._undo.append(module_mod.register_module_forward_hook(self._post).remove)
        self._undo.append(register_optimizer_step_pre_hook(self._step_pre).remove)
        self._undo.append(register_optimizer_step_post_hook(self._step_post).remove)

        from torch.utils.data import dataloader

        cls = dataloader._BaseDataLoaderIter
        original_next = cls.__next__

        def __next__(self):
            batch = original_next(self)
            return recorder._on_batch(batch)

        cls.__next__ = __next__
        self._undo.append(lambda: setattr(cls, "__next__", original_next))
        del torch

    def record(self, role, device_type, emulated):
        torch = self.torch
        return {
            "format": FORMAT,
            "version": VERSION,
            "role": role,
            "device": device_type,
            "emulated": emulated,
            "torch": str(torch.__version__),
            "threads": torch.get_num_threads(),
            "batches_replayed": self.replayed,
            "batches_drawn": self.batches_drawn,
            "initial_param_norms": self.initial,
            "steps": self.steps,
            "events": self.events,
            "spans": self.spans,
            "patches": patch_states(self.watch),
            "patch_fires": self.fires.entries() if self.fires is not None else [],
        }


def _to_cpu(value, torch, depth=0):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if depth > 6:
        return copy.deepcopy(value)
    if isinstance(value, dict):
        return type(value)((k, _to_cpu(v, torch, depth + 1)) for k, v in value.items()) if type(value) is dict \
            else copy.deepcopy(value)
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_to_cpu(v, torch, depth + 1) for v in value)
    try:
        return copy.deepcopy(value)
    except Exception:
        return value


def report(request, results, observer, recorder, outcome, ended):
    """Write the run's record (and, for the reference, its batches); a ``parity.run`` check says whether the run
    reached its steps."""
    import json

    from .protocol import FAIL, PASS, _finite

    parity = request["parity"]
    torch = recorder.torch
    want = int(request.get("steps") or 0)
    role = parity.get("role", "port")
    devices = (observer.params or {}).get("devices") or {}
    device = max(devices, key=devices.get).split(":")[0] if devices else None
    record = recorder.record(role, device, bool(request.get("emulate")))
    with open(parity["record"], "w", encoding="utf-8") as f:
        json.dump(_finite(record), f, allow_nan=False)
    if parity.get("batches_out") and recorder.saved:
        torch.save(recorder.saved, parity["batches_out"])
    data = {"role": role, "steps": observer.steps, "events": len(recorder.events), "record": parity["record"],
            "batches_drawn": recorder.batches_drawn, "batches_replayed": recorder.replayed,
            "threads": torch.get_num_threads()}
    if ended is not None:
        status, detail, remedy, reason = ended
        data["reason"] = reason
        if role.startswith("reference"):
            # Not a fault of the port: the program cannot run as the CPU reference.
            remedy = ("the reference is the program on the CPU without torch_npu or CUDA: give it a launch "
                      "command or config that runs there (a CPU device option), or make a record where the "
                      "original runs (`--parity --record FILE` on a CUDA machine) and use `--compare FILE`")
        results.check("parity." + role, FAIL, "the {} run stopped after {} of {} optimizer steps: {}".format(
            role, observer.steps, want, detail), remedy, data=data)
        return 0
    if observer.steps < want:
        results.check("parity." + role, FAIL, "the {} run ended after {} of {} optimizer steps".format(
            role, observer.steps, want), "give the command a config that trains at least {} steps".format(want),
            data=data)
        return 0
    results.check("parity." + role, PASS, "the {} run recorded {} steps, {} module events".format(
        role, observer.steps, len(recorder.events)), data=data)
    return 0
