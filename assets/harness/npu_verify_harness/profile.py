"""The step profile of ``--pipeline``: what each training step asks of the device, by source line.

A ``TorchDispatchMode`` sees every aten op the program runs (after torch's composite decompositions, the ops a
backend receives), on the emulated npu and on a real one alike. Ops on the device are counted per step and per
source line (the innermost frame in the project; the ops autograd runs for ``backward()`` count at the line that
called it, marked ``(backward)``):

- ``launches``: aten ops on the device (each is at least one kernel launch on an NPU);
- ``syncs``: ops that make the host wait for the device: ``_local_scalar_dense`` (``.item()``, ``float()``,
  ``int()``, ``bool()`` and ``if`` of a device tensor, a device tensor used as an index or a slice bound), copies
  to the host (``.cpu()``, ``.to("cpu")``, ``.tolist()``, ``.numpy()`` after a copy), ``nonzero``,
  ``masked_select``, ``unique``, boolean-mask indexing (``x[mask]``, ``x[mask] = v``), ``repeat_interleave`` with a
  tensor of repeats, ``equal``;
- ``fallbacks``: ops torch_npu runs on the CPU (no NPU kernel in the torch_npu release in use; emulated, the
  release paired with this torch: ``npu_emulator._kernels``; on an NPU, torch_npu's own dispatcher registrations).

The first step is a warm-up and is not profiled. ``per_sample``: a line is a per-sample loop when, in every
profiled step, it ran a multiple of the batch size times (at least once per sample, the batch size being the
leading dimension of the DataLoader's batch), its function picked every sample of a batch-sized tensor
(``x[i]``: ``select`` on dimension 0 with each index, or iterating over the tensor), and it launched or synced
at least once per run; when the profiled steps saw batches of different sizes, its count must also follow them.
"""

import collections
import os
import sys

from .observe import Installed

_SELF_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

#: What verify flags (thresholds, per profiled step; documented in docs/cli/npu-verify.md).
SYNCS_PER_STEP_OK = 2  # a loss read for logging and one more: more than this is a warning
LINE_SYNCS_OK = 1  # one line syncing more than once per step is named in the warning
#: Scalar logging: a line that reads exactly one scalar per step (one ``.item()``/``float()`` of a logged value) is
#: what every training loop does on every device; up to this many such lines are allowed per step before their
#: syncs count towards SYNCS_PER_STEP_OK (and before --record-issues records them as P_TGT).
SCALAR_LOGGING_ALLOWANCE = 8
TOP_LINES = 8


def _kind_tables(torch):
    aten = torch.ops.aten
    syncs = {}
    for name, kind in (
        ("_local_scalar_dense", "_local_scalar_dense"),
        ("nonzero", "nonzero"),
        ("masked_select", "masked_select"),
        ("_unique2", "unique"),
        ("unique_dim", "unique"),
        ("unique_consecutive", "unique"),
        ("unique_dim_consecutive", "unique"),
        ("_unique", "unique"),
        ("equal", "equal"),
    ):
        packet = getattr(aten, name, None)
        if packet is not None:
            syncs[packet] = kind
    index = set()
    for name in ("index", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index", "_unsafe_index_put"):
        packet = getattr(aten, name, None)
        if packet is not None:
            index.add(packet)
    return syncs, index


class StepProfile(Installed):
    """Counts of one run, per step and per line; ``verdict(func)`` is None or ``(kind, message)`` of a CPU
    fallback."""

    def __init__(self, torch, project_root, device_type, observer, verdict, kernel_info):
        super().__init__()
        self.torch = torch
        self.root = os.path.abspath(project_root)
        self.device_type = device_type
        self.observer = observer
        self.verdict = verdict
        self.kernel_info = kernel_info
        self.steps = []  # one dict per finished step: {"batch": n or None, "sites": {site: counts}}
        self._current = {}
        self._batch = None
        self._batches_seen = 0
        self._code_sites = {}
        self._frames = {}
        self._sample_picks = collections.defaultdict(set)  # (file, line) -> sample indices picked this step
        self._unbound = set()  # (file, line) that iterated a batch-sized tensor this step
        self._loops = {}  # file -> [(first, last)] line ranges of its loops and comprehensions
        self._syncs, self._index_ops = _kind_tables(torch)
        aten = torch.ops.aten
        self._to_copy = aten._to_copy
        self._copy = aten.copy_
        self._select = aten.select
        self._unbind = aten.unbind
        self._repeat_interleave = getattr(aten, "repeat_interleave", None)
        self._bool = (torch.bool, torch.uint8)

    # -- the source line of an op ----------------------------------------------------------------------
    def _rel(self, code):
        try:
            return self._code_sites[code]
        except KeyError:
            path = os.path.abspath(code.co_filename)
            rel = None
            if (path.startswith(self.root + os.sep) and not path.startswith(_SELF_DIR)
                    and os.sep + "migrate_to_cloudrobo" + os.sep not in path and "site-packages" not in path):
                rel = os.path.relpath(path, self.root).replace(os.sep, "/")
            self._code_sites[code] = rel
            return rel

    def _site(self):
        """(site, frame) of the innermost project frame, or the backward call's site with frame None."""
        frame = sys._getframe(2)
        while frame is not None:
            rel = self._rel(frame.f_code)
            if rel is not None:
                return "{}:{}".format(rel, frame.f_lineno), frame
            frame = frame.f_back
        backward = getattr(self.observer, "backward_site", None)
        if backward:
            return backward + " (backward)", None
        return "<outside the project>", None

    def _count_run(self, site, frame, counts, func):
        """One more run of the line when the frame moved to it or jumped back in it (a loop): an op from an
        earlier instruction of the line, or the same single op of the line again."""
        key = id(frame)
        lasti = frame.f_lasti
        state = self._frames.get(key)
        if (state is None or state[0] is not frame.f_code or state[1] != frame.f_lineno or lasti < state[2]
                or (lasti == state[2] and state[4] == 1 and func is state[3])):
            counts["runs"] += 1
            self._frames[key] = (frame.f_code, frame.f_lineno, lasti, func, 1)
        else:
            self._frames[key] = (frame.f_code, frame.f_lineno, lasti, state[3], state[4] + 1)

    # -- one op ----------------------------------------------------------------------------------------
    def _on_device(self, value):
        torch = self.torch
        if isinstance(value, torch.Tensor):
            return value.device.type == self.device_type
        if isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, torch.Tensor) and item.device.type == self.device_type:
                    return True
        return False

    def _sync_kind(self, func, args, kwargs):
        packet = func.overloadpacket
        kind = self._syncs.get(packet)
        if kind is not None:
            return kind
        torch = self.torch
        if packet is self._to_copy:
            target = kwargs.get("device")
            if target is not None and torch.device(target).type == "cpu":
                return "copy to host"
            return None
        if packet is self._copy:
            dst = args[0] if args else None
            src = args[1] if len(args) > 1 else None
            if (isinstance(dst, torch.Tensor) and dst.device.type == "cpu" and isinstance(src, torch.Tensor)
                    and src.device.type == self.device_type):
                return "copy to host"
            return None
        if packet in self._index_ops:
            indices = args[1] if len(args) > 1 else kwargs.get("indices")
            for index in indices or ():
                if isinstance(index, torch.Tensor) and index.dtype in self._bool:
                    return "boolean-mask indexing"
            return None
        if packet is self._repeat_interleave and func._overloadname == "Tensor":
            if kwargs.get("output_size") is None and (len(args) < 2 or args[-1] is None):
                return "repeat_interleave"
        return None

    def _note_sample(self, func, args, frame):
        """``x[i]`` (select on dim 0) or iteration (unbind of dim 0) of a batch-sized device tensor."""
        if frame is None or self._batch is None or not args:
            return
        packet = func.overloadpacket
        tensor = args[0]
        if packet is self._select:
            dim = args[1] if len(args) > 1 else 0
            if dim == 0 and tensor.dim() > 0 and tensor.size(0) == self._batch and len(args) > 2:
                self._sample_picks[(frame.f_code.co_filename, frame.f_lineno)].add(int(args[2]) % self._batch)
        elif packet is self._unbind:
            dim = args[1] if len(args) > 1 else 0
            if dim == 0 and tensor.dim() > 0 and tensor.size(0) == self._batch:
                self._unbound.add((frame.f_code.co_filename, frame.f_lineno))

    def record(self, func, args, kwargs, kind=None):
        """Count one device op (``kind`` forces a sync kind: the emulator's ``tolist``)."""
        site, frame = self._site()
        counts = self._current.get(site)
        if counts is None:
            counts = self._current[site] = {
                "launches": 0, "runs": 0, "syncs": collections.Counter(), "fallbacks": collections.Counter(),
                "where": None,
            }
        if frame is not None:
            counts["where"] = (frame.f_code.co_filename, frame.f_lineno)
            self._count_run(site, frame, counts, func)
        if kind is not None:
            counts["syncs"][kind] += 1
            return
        counts["launches"] += 1
        sync = self._sync_kind(func, args, kwargs)
        if sync is not None:
            counts["syncs"][sync] += 1
        found = self.verdict(func)
        if found is not None:
            counts["fallbacks"][(str(func.name() if callable(getattr(func, "name", None)) else func), found[0],
                                 found[1])] += 1
        try:
            self._note_sample(func, args, frame)
        except Exception:
            pass

    # -- steps and batches -----------------------------------------------------------------------------
    def step_done(self):
        self.steps.append({"batch": self._batch, "sites": self._current, "picks": dict(self._sample_picks),
                           "unbound": set(self._unbound)})
        self._current = {}
        self._frames = {}
        self._sample_picks = collections.defaultdict(set)
        self._unbound = set()

    def note_batch(self, batch):
        size = batch_size(batch, self.torch)
        if size is not None:
            self._batch = size
            self._batches_seen += 1

    # -- install ---------------------------------------------------------------------------------------
    def install(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        profile = self

        class StepProfileMode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                on_device = False
                for value in args:
                    if profile._on_device(value):
                        on_device = True
                        break
                if not on_device:
                    device = kwargs.get("device")
                    if device is not None:
                        try:
                            on_device = profile.torch.device(device).type == profile.device_type
                        except Exception:
                            on_device = False
                if on_device and not profile.observer.busy:
                    try:
                        profile.record(func, args, kwargs)
                    except Exception:
                        pass
                return func(*args, **kwargs)

        try:
            from torch.utils.data import dataloader
        except ImportError:
            dataloader = None
        if dataloader is not None:
            base = dataloader._BaseDataLoaderIter
            original_next = base.__next__

            def __next__(self):
                batch = original_next(self)
                try:
                    profile.note_batch(batch)
                except Exception:
                    pass
                return batch

            base.__next__ = __next__
            self._undo.append(lambda: setattr(base, "__next__", original_next))
        emulator = sys.modules.get("npu_emulator._tensor")
        cls = getattr(emulator, "NPUTensor", None)
        if cls is not None and "tolist" in vars(cls):
            # The emulated tensor's tolist reads its host copy without an aten op: count the copy a device makes.
            original_tolist = vars(cls)["tolist"]

            def tolist(self):
                try:
                    if not profile.observer.busy:
                        profile.record(None, (), {}, kind="copy to host (tolist)")
                except Exception:
                    pass
                return original_tolist(self)

            cls.tolist = tolist
            self._undo.append(lambda: setattr(cls, "tolist", original_tolist))
        self._enter(StepProfileMode())

    # -- the figures -----------------------------------------------------------------------------------
    def profiled(self):
        """The steps after the warm-up."""
        return self.steps[1:]

    def summary(self):
        """Per line: counts per profiled step (lists, one entry per step), and the per-sample verdict."""
        steps = self.profiled()
        if not steps:
            return None
        sites = []
        for step in steps:
            for site in step["sites"]:
                if site not in sites:
                    sites.append(site)
        lines = {}
        for site in sites:
            per = [step["sites"].get(site) for step in steps]
            launches = [p["launches"] if p else 0 for p in per]
            runs = [p["runs"] if p else 0 for p in per]
            syncs = collections.Counter()
            sync_steps = []
            fallbacks = collections.Counter()
            for p in per:
                sync_steps.append(sum(p["syncs"].values()) if p else 0)
                if p:
                    syncs.update(p["syncs"])
                    fallbacks.update(p["fallbacks"])
            lines[site] = {
                "launches": launches,
                "syncs": sync_steps,
                "sync_kinds": {k: round(n / len(steps), 2) for k, n in sorted(syncs.items())},
                "runs": runs,
                "fallbacks": [
                    {"op": op, "kind": kind, "message": message, "per_step": round(n / len(steps), 2)}
                    for (op, kind, message), n in sorted(fallbacks.items())
                ],
                "per_sample": self._per_sample(site, steps),
            }
        return {
            "profiled_steps": len(steps),
            "warmup_steps": 1,
            "batch_sizes": [s["batch"] for s in steps],
            "torch_npu": self.kernel_info,
            "launches_per_step": [sum(p["launches"] for p in s["sites"].values()) for s in steps],
            "syncs_per_step": [sum(sum(p["syncs"].values()) for p in s["sites"].values()) for s in steps],
            "lines": lines,
        }

    def _samples_picked(self, where, step, batch):
        """Whether a loop around ``where`` (file, line) picked every sample of a batch-sized tensor in ``step``:
        ``x[i]`` for each ``i`` on one of its lines, or iteration over the tensor on its first line."""
        if where is None:
            return False
        path, line = where
        ranges = self._loops.get(path)
        if ranges is None:
            ranges = self._loops[path] = loop_ranges(path)
        for first, last in ranges:
            if not first <= line <= last:
                continue
            if (path, first) in step["unbound"]:
                return True
            for (picked_path, picked_line), indices in step["picks"].items():
                if picked_path == path and first <= picked_line <= last and len(indices) >= batch:
                    return True
        return False

    def _per_sample(self, site, steps):
        """None, or how the line was measured to run once per sample."""
        if site.endswith("(backward)"):
            return None
        batches = []
        for step in steps:
            counts = step["sites"].get(site)
            batch = step["batch"]
            if counts is None or not batch or batch < 2:
                return None
            runs = counts["runs"]
            if runs < batch or runs % batch:
                return None
            if counts["launches"] < runs and sum(counts["syncs"].values()) < runs:
                return None
            if not self._samples_picked(counts["where"], step, batch):
                return None
            batches.append((batch, runs))
        sizes = {b for b, _ in batches}
        if len(sizes) > 1:
            ratios = {r // b for b, r in batches}
            if len(ratios) != 1:
                return None
        batch, runs = batches[0]
        return {
            "runs_per_sample": runs // batch,
            "batch_sizes": sorted(sizes),
            "basis": "batch sizes {}".format(sorted(sizes)) if len(sizes) > 1 else "batch dimension",
        }


def loop_ranges(path):
    """The (first, last) line ranges of the loops and comprehensions of a source file (empty if unreadable)."""
    import ast

    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return []
    kinds = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
    return [(node.lineno, getattr(node, "end_lineno", node.lineno)) for node in ast.walk(tree)
            if isinstance(node, kinds)]


def batch_size(batch, torch, depth=0):
    """The leading dimension most of the batch's tensors share (numpy arrays too), or None."""
    sizes = collections.Counter()

    def walk(value, depth):
        if depth > 4:
            return
        if isinstance(value, torch.Tensor) or type(value).__module__ == "numpy" and hasattr(value, "shape"):
            shape = getattr(value, "shape", ())
            if len(shape) >= 1:
                sizes[int(shape[0])] += 1
        elif isinstance(value, dict):
            for item in list(value.values())[:64]:
                walk(item, depth + 1)
        elif isinstance(value, (list, tuple)):
            for item in value[:64]:
                walk(item, depth + 1)
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            for item in list(vars(value).values())[:64]:
                walk(item, depth + 1)

    walk(batch, depth)
    if not sizes:
        return None
    return sizes.most_common(1)[0][0]


def out_variants(torch, func):
    """The ``out=`` overloads (``name.overload``, without ``aten::``) whose inputs are ``func``'s plus ``out``
    arguments: what a structured op's functional and in-place forms run on a backend."""
    name = func.name().split("::")[-1]
    base = name.partition(".")[0]
    if base.endswith("_") and not base.endswith("__"):
        base = base[:-1]
    packet = getattr(torch.ops.aten, base, None)
    if packet is None:
        return []
    inputs = [a.name for a in func._schema.arguments]
    found = []
    for overload in packet.overloads():
        args = getattr(packet, overload)._schema.arguments
        if any(a.is_out for a in args) and [a.name for a in args if not a.is_out] == inputs:
            found.append(base if overload == "default" else "{}.{}".format(base, overload))
    return found


def real_verdict(torch):
    """The CPU-fallback verdict on a real NPU: torch_npu's own registrations in the dispatcher."""
    has = getattr(torch._C, "_dispatch_has_kernel_for_dispatch_key", None)
    cache = {}
    text = ("CAUTION: The operator '{}' is not currently supported on the NPU backend and will fall back to run "
            "on the CPU.")

    def kernel(name, key):
        try:
            return bool(has(name, key))
        except Exception:
            return False

    def verdict(func):
        try:
            return cache[func]
        except KeyError:
            pass
        found = None
        name = func.name() if callable(getattr(func, "name", None)) else ""
        if has is not None and name.startswith("aten::") and not kernel(name, "PrivateUse1"):
            if not (kernel(name, "CompositeImplicitAutograd") or kernel(name, "CompositeExplicitAutograd")):
                runs = name
                if kernel(name, "CompositeExplicitAutogradNonFunctional") and not kernel(name, "CPU"):
                    runs = ""  # a decomposition: it calls other ops
                elif kernel(name, "CompositeExplicitAutogradNonFunctional"):
                    # A structured op: its out= form runs on the backend.
                    outs = ["aten::" + o for o in out_variants(torch, func)]
                    present = [o for o in outs if kernel(o, "PrivateUse1")]
                    runs = present[0] if present else (outs[0] if outs else None)
                if runs != "" and (runs is None or not kernel(runs, "PrivateUse1")):
                    found = ("fallback", text.format(name if runs is None else runs))
        cache[func] = found
        return found

    return verdict


def _per_step(values):
    """``16`` when every profiled step had the same count, else ``12-16``."""
    low, high = min(values), max(values)
    return str(low) if low == high else "{}-{}".format(low, high)


def _fallback_rows(summary):
    rows = {}
    for site, line in summary["lines"].items():
        for entry in line["fallbacks"]:
            key = (entry["op"], entry["kind"])
            row = rows.setdefault(key, {"op": entry["op"], "kind": entry["kind"], "message": entry["message"],
                                        "sites": {}})
            row["sites"][site] = entry["per_step"]
    return sorted(rows.values(), key=lambda r: (r["kind"] != "fallback", -sum(r["sites"].values()), r["op"]))


def _base_op(name):
    return name.split("::")[-1].split(".")[0]


def scalar_logging(syncing):
    """The sites (at most SCALAR_LOGGING_ALLOWANCE, in file order) that read exactly one scalar in every profiled
    step and sync no other way: one ``.item()`` per logged value."""
    def order(site):
        file, _, line = site.rpartition(":")
        return (file, int(line) if line.isdigit() else 0)

    found = sorted(
        (site for site, line in syncing
         if min(line["syncs"]) == 1 and max(line["syncs"]) == 1 and set(line["sync_kinds"]) == {"_local_scalar_dense"}
         and not site.endswith("(backward)")),
        key=order,
    )
    return found[:SCALAR_LOGGING_ALLOWANCE]


def report(results, profile, observer, want):
    """``pipeline.profile``, ``pipeline.syncs``, ``pipeline.per_sample`` and ``pipeline.cpu_fallback``."""
    from .protocol import PASS, SKIP, WARN

    summary = profile.summary()
    if summary is None:
        why = ("the profile needs a warm-up step and one more: run with --steps 2 or more"
               if observer.steps >= 1 else "no optimizer step was reached")
        for name in ("pipeline.profile", "pipeline.syncs", "pipeline.per_sample"):
            results.check(name, SKIP, why)
        if observer.steps >= 1:
            from .program import report_fallbacks

            report_fallbacks(results, observer, "pipeline")
        return
    n = summary["profiled_steps"]
    lines = summary["lines"]
    info = summary["torch_npu"] or {}
    version = info.get("torch_npu")
    batch = summary["batch_sizes"]
    batch_text = "batch {}".format(_per_step(batch)) if all(b is not None for b in batch) else "no DataLoader batch"
    top = sorted(lines.items(), key=lambda kv: -sum(kv[1]["launches"]))[:50]
    results.check(
        "pipeline.profile",
        PASS,
        "measured {} step(s) after {} warm-up: {} aten ops launched on the device and {} host syncs per step "
        "({}); counts, not timings".format(
            n, summary["warmup_steps"], _per_step(summary["launches_per_step"]),
            _per_step(summary["syncs_per_step"]), batch_text),
        data=dict(summary, lines=dict(top)),
    )

    # -- host syncs --
    syncing = sorted(((site, line) for site, line in lines.items() if sum(line["syncs"])),
                     key=lambda kv: -sum(kv[1]["syncs"]))
    per_step = summary["syncs_per_step"]
    logging = scalar_logging(syncing)
    # The syncs of each step beyond the scalar-logging allowance.
    beyond = [n - sum(lines[site]["syncs"][i] for site in logging) for i, n in enumerate(per_step)]
    sync_rows = [{"site": site, "per_step": line["syncs"], "kinds": line["sync_kinds"]} for site, line in syncing]
    data = {"per_step": per_step, "threshold": SYNCS_PER_STEP_OK, "lines": sync_rows[:TOP_LINES * 2],
            "scalar_logging": {"allowance": SCALAR_LOGGING_ALLOWANCE, "sites": logging},
            "beyond_scalar_logging": beyond}
    listed = "; ".join(
        "{} at {} ({})".format(_per_step(line["syncs"]), site, ", ".join(sorted(line["sync_kinds"])))
        for site, line in syncing[:TOP_LINES])
    allowed = ""
    if logging:
        allowed = "; {} line(s) read one scalar each per step (logging, allowed up to {} lines)".format(
            len(logging), SCALAR_LOGGING_ALLOWANCE)
    if max(beyond) > SYNCS_PER_STEP_OK or any(max(line["syncs"]) > LINE_SYNCS_OK for _, line in syncing):
        results.check(
            "pipeline.syncs",
            WARN,
            "measured: {} host syncs per step ({} beyond scalar logging, more than {}){}: {}".format(
                _per_step(per_step), _per_step(beyond), SYNCS_PER_STEP_OK, allowed, listed),
            "each sync stops the host until the device has finished all queued work: keep values on the device "
            "(no .item()/.cpu()/.tolist()/bool() of device tensors inside the step; masks with torch.where instead "
            "of x[mask]); read the loss for logging every N steps (P_TGT, P_VEC)",
            data=data,
        )
    else:
        results.check(
            "pipeline.syncs",
            PASS,
            "measured: {} host syncs per step{}{}".format(
                _per_step(per_step), " ({})".format(listed) if listed else "", allowed),
            data=data,
        )

    # -- per-sample loops --
    loops = [(site, line) for site, line in lines.items() if line["per_sample"]]
    if not all(b is not None for b in batch):
        results.check("pipeline.per_sample", SKIP,
                      "no DataLoader batch was seen during the profiled steps, so there is no batch size to count "
                      "per-sample work against")
    elif loops:
        rows = [{"site": site, "runs": line["runs"], "launches": line["launches"], "syncs": line["syncs"],
                 "batch_sizes": line["per_sample"]["batch_sizes"], "basis": line["per_sample"]["basis"]}
                for site, line in loops]
        listed = "; ".join(
            "{} ran {} times per step, {} per sample of the batch of {} ({} launches, {} syncs per step)".format(
                site, _per_step(line["runs"]), line["per_sample"]["runs_per_sample"], _per_step(batch),
                _per_step(line["launches"]), _per_step(line["syncs"]))
            for site, line in loops[:TOP_LINES])
        results.check(
            "pipeline.per_sample",
            WARN,
            "measured: per-sample loop(s): " + listed,
            "compute the batch at once (masks instead of a loop over samples, `torch.stack` of whole tensors); on "
            "the NPU every op is a launch, so the step's time grows with the batch (P_VEC)",
            data={"lines": rows, "batch_sizes": batch},
        )
    else:
        results.check("pipeline.per_sample", PASS,
                      "measured: no line ran once per sample of the batch ({})".format(batch_text),
                      data={"batch_sizes": batch})

    # -- CPU fallback --
    rows = _fallback_rows(summary)
    seen = {_base_op(r["op"]) for r in rows}
    warned_only = {op: count for op, count in observer.fallbacks.items() if _base_op(op) not in seen}
    where = "torch_npu {}".format(version) if version else "no torch_npu kernel table ({})".format(
        info.get("reason", "?"))
    data = {"torch_npu": version, "table": info, "ops": rows,
            "warnings_only": warned_only}
    if version is None and not warned_only:
        results.check("pipeline.cpu_fallback", SKIP,
                      "no CPU-fallback verdict: {}".format(info.get("reason", "no torch_npu")), data=data)
        return
    falling = [r for r in rows if r["kind"] == "fallback"]
    if falling or warned_only:
        parts = ["{} at {}".format(r["op"], ", ".join("{} ({}/step)".format(s, c) for s, c in sorted(
            r["sites"].items(), key=lambda kv: -kv[1])[:4])) for r in falling[:TOP_LINES]]
        parts += ["aten::{} (torch_npu's warning, {}x; not seen by the profile)".format(op, c)
                  for op, c in sorted(warned_only.items())]
        results.check(
            "pipeline.cpu_fallback",
            WARN,
            "measured: {} op(s) have no NPU kernel in {} and run on the CPU: {}".format(
                len(falling) + len(warned_only), where, "; ".join(parts)),
            "each fallback copies its tensors to the host and back, every step: use an op with an NPU kernel "
            "(torch.special/log-space identities, a different distribution sampler), or compute that part on the "
            "host once, outside the step (P_FALLBACK); TORCH_NPU_FALLBACK_CPU_DISABLE=1 makes torch_npu 2.14 raise "
            "there instead",
            data=data,
        )
        return
    conditional = [r for r in rows if r["kind"] == "warned"]
    if conditional:
        results.check(
            "pipeline.cpu_fallback",
            WARN,
            "measured: no op without an NPU kernel in {}; {} op(s) whose NPU kernel torch_npu's binary says may "
            "run on the CPU: {}".format(where, len(conditional), "; ".join(
                "{} at {}: {}".format(r["op"], ", ".join(sorted(r["sites"])[:3]), r["message"])
                for r in conditional[:4])),
            "check the conditions in torch_npu's message (shape, dim, CANN version) for these calls",
            data=data,
        )
        return
    results.check("pipeline.cpu_fallback", PASS,
                  "measured: every aten op of the profiled steps has an NPU kernel in {}".format(where), data=data)
