"""Device memory of the run's training steps: the peak, by phase, the module at the peak, and per card when sharded.

An observer, independent of the others: module hooks say which module runs (forward) and which module's gradients
are being computed (backward, through a pre-hook on each module output's ``grad_fn``), ``Tensor.backward`` marks
the backward phase, the optimizer's step hooks the optimizer phase, and the storages of the parameters, gradients
and optimizer states are tagged so that the peak can be split into them. The bytes come from the emulator's
ledger (``npu_emulator._ledger``: every device storage, rounded as torch_npu's caching allocator rounds blocks);
without the emulator (a real NPU) this observer reports nothing: ``torch.npu.max_memory_allocated`` is the truth
there.

Sharding over N cards (``--nproc-per-node N`` in a one-process run) is arithmetic on the parts alive at the peak:

- DDP: every card holds the whole peak, plus DDP's gradient buckets, a second copy of the gradients as large as
  the parameters (torch's ``DistributedDataParallel`` default, ``gradient_as_bucket_view=False``);
- ZeRO-1: optimizer states (and the optimizer step's temporaries) divided over the cards; ZeRO-2: gradients too;
- FSDP2 (``fully_shard``, ZeRO-3): parameters, gradients and states divided, plus :data:`FSDP_UNITS` times the
  largest sharded unit's parameter bytes (the gathered parameters of the unit computing and of the one
  prefetched, the unit's unsharded gradients and the all-gather and reduce-scatter buffers), the unit being the
  largest block of a ``ModuleList``/``Sequential`` (a transformer layer), else the largest child module. The
  count is measured, not derived: torch's FSDP2 on two emulated cards peaked at the sharded parts plus six
  units (tests/python/harness/test_memory_sharding.py).
"""

import sys

from .protocol import FAIL, PASS, WARN

GB = float(1 << 30)
FSDP_UNITS = 6


def _ledger():
    return sys.modules.get("npu_emulator._ledger")


def gb(nbytes):
    """Bytes as GB (2^30 bytes, as HBM is counted), MB below 1 GB."""
    if nbytes >= GB:
        return "{:.1f} GB".format(nbytes / GB)
    return "{:.1f} MB".format(nbytes / float(1 << 20))


class MemoryWatch:
    """Phase and module labels for the emulator's memory ledger while the program runs."""

    def __init__(self, torch):
        self.torch = torch
        self.ledger = _ledger()
        self._undo = []
        self._names = {}
        self._stack = []
        self._roots = []
        self.optimizers = []

    def _name(self, module):
        name = self._names.get(id(module))
        if name is None:
            # A module first seen outside any watched model: it is a model itself; name its modules.
            root = type(module).__name__
            self._roots.append(module)
            for path, sub in module.named_modules():
                self._names.setdefault(id(sub), root + "." + path if path else root)
            name = self._names[id(module)]
        return name

    def _pre(self, module, args):
        name = self._name(module)
        self._stack.append(name)
        self.ledger.set_where("forward", name)

    def _post(self, module, args, output):
        if self._stack:
            self._stack.pop()
        name = self._names.get(id(module))
        self.ledger.set_where("forward", self._stack[-1] if self._stack else None)
        torch = self.torch
        if torch.is_grad_enabled() and name is not None:
            for out in output if isinstance(output, (tuple, list)) else (output,):
                fn = getattr(out, "grad_fn", None) if isinstance(out, torch.Tensor) else None
                if fn is not None:
                    fn.register_prehook(self._backward_at(name))
                    break

    def _backward_at(self, name):
        ledger = self.ledger

        def at(grad_outputs):
            ledger.set_where("backward", name)

        return at

    def _opt_pre(self, optimizer, args, kwargs):
        self.ledger.set_where("optimizer", None)
        if optimizer not in self.optimizers:
            self.optimizers.append(optimizer)
        self.tag(optimizer)

    def _opt_post(self, optimizer, args, kwargs):
        self.tag(optimizer)
        self.ledger.set_where("other", None)

    def tag(self, optimizer):
        """Tag the storages of ``optimizer``'s parameters, their gradients and its states."""
        params = [p for group in optimizer.param_groups for p in group["params"]]
        self.ledger.tag(params, "parameters")
        self.ledger.tag([p.grad for p in params if p.grad is not None], "gradients")
        states = []
        for state in optimizer.state.values():
            if isinstance(state, dict):
                states.extend(v for v in state.values() if isinstance(v, self.torch.Tensor))
        self.ledger.tag(states, "optimizer_states")

    def install(self):
        if self.ledger is None:
            return False
        torch = self.torch
        from torch.nn.modules import module as nn_module
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        for handle in (
            nn_module.register_module_forward_pre_hook(self._pre),
            nn_module.register_module_forward_hook(self._post),
            register_optimizer_step_pre_hook(self._opt_pre),
            register_optimizer_step_post_hook(self._opt_post),
        ):
            self._undo.append(handle.remove)
        original = torch.Tensor.backward
        ledger = self.ledger
        watch = self

        def backward(tensor, *args, **kwargs):
            watch._stack.clear()
            ledger.set_where("backward", None)
            try:
                return original(tensor, *args, **kwargs)
            finally:
                ledger.set_where("other", None)

        backward.__wrapped__ = original
        torch.Tensor.backward = backward
        self._undo.append(lambda: setattr(torch.Tensor, "backward", original))
        return True

    def uninstall(self):
        for optimizer in self.optimizers:
            try:
                self.tag(optimizer)
            except Exception:
                pass
        while self._undo:
            try:
                self._undo.pop()()
            except Exception:
                pass

    def unit_bytes(self):
        """Parameter bytes of the largest FSDP unit of the models seen (see the module doc)."""
        ledger = self.ledger
        torch = self.torch
        best = 0
        for root in self._roots:
            units = []
            for module in root.modules():
                if isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)):
                    units.extend(module.children())
            if not units:
                units = list(root.children())
            for unit in units:
                size = sum(ledger.round_size(p.numel() * p.element_size()) for p in unit.parameters())
                best = max(best, size)
        return best


def per_card(summary, nproc, unit):
    """Per-card bytes of the same step under DDP, ZeRO-1, ZeRO-2 and FSDP2 over ``nproc`` cards: the largest, over
    the phases' peaks, of what each strategy keeps of the parts alive at that peak (see the module doc)."""
    n = max(int(nproc), 1)
    moments = list((summary.get("at_phase_peak") or {}).values()) or [summary.get("at_peak") or {}]
    totals = {"ddp_bytes": 0, "zero1_bytes": 0, "zero2_bytes": 0, "fsdp_bytes": 0}
    for parts in moments:
        params, grads, states = (parts.get(k, 0) for k in ("parameters", "gradients", "optimizer_states"))
        step_temps = parts.get("optimizer_temporaries", 0)  # the optimizer's temporaries scale with the shard
        other = sum(parts.values()) - params - grads - states - step_temps
        totals["ddp_bytes"] = max(totals["ddp_bytes"], sum(parts.values()) + params)
        totals["zero1_bytes"] = max(totals["zero1_bytes"], other + params + grads + (states + step_temps) // n)
        totals["zero2_bytes"] = max(totals["zero2_bytes"], other + params + (grads + states + step_temps) // n)
        totals["fsdp_bytes"] = max(totals["fsdp_bytes"], other + (params + grads + states + step_temps) // n
                                   + (FSDP_UNITS * unit if n > 1 else 0))  # fmt: skip
    return dict(totals, nproc=n, fsdp_unit_bytes=unit)


def report(results, watch, request):
    """``pipeline.memory``: the peak device memory of the run against the card (``--hbm-gb``), one line."""
    if watch is None or watch.ledger is None:
        return
    summary = watch.ledger.summary()
    if summary["peak_bytes"] == 0:
        return
    hbm_gb = request.get("hbm_gb")
    hbm = int(float(hbm_gb) * GB) if hbm_gb else None
    ranks = request.get("distributed")
    shard_over = int(request.get("shard_over") or 1)
    sharding = None
    if not ranks:
        sharding = per_card(summary, shard_over if shard_over > 1 else 8, watch.unit_bytes())
    peak = summary["peak_bytes"]
    where = "peak in {}".format(summary["phase"] or "other")
    if summary.get("module"):
        where += " at " + summary["module"]
    data = dict(summary, hbm_bytes=hbm, fits=None if hbm is None else peak <= hbm, sharding=sharding,
                shapes_only=bool(request.get("shapes_only")))  # fmt: skip
    remedy = None
    if hbm is None:
        status = PASS
        detail = "peak device memory {} ({}); give --hbm-gb N to compare with a card".format(gb(peak), where)
    elif peak <= hbm:
        status = PASS
        detail = "fits: {} of {:g} GB, {}".format(gb(peak), float(hbm_gb), where)
    else:
        status = FAIL
        detail = "does not fit: {} of {:g} GB, {}".format(gb(peak), float(hbm_gb), where)
        if sharding is not None:
            detail += "; FSDP over {} cards: {} per card".format(sharding["nproc"], gb(sharding["fsdp_bytes"]))
        remedy = ("shard the model (FSDP2 fully_shard / ZeRO) over more cards, lower the batch size, or "
                  "recompute activations (torch.utils.checkpoint)")  # fmt: skip
    results.check("pipeline.memory", status, detail, remedy, data=data)


def report_shapes(results):
    """``pipeline.shapes_only``: what the shapes-only run could not check because it has no values."""
    shapes = sys.modules.get("npu_emulator._shapes")
    if shapes is None or not shapes.enabled():
        return
    missing = shapes.unchecked()
    if not missing:
        results.check("pipeline.shapes_only", PASS, "shapes only: no value was read back to the host",
                      data={"unchecked": []})  # fmt: skip
        return
    listed = "; ".join("{} ({}x): {}".format(m["op"], m["count"], m["assumed"]) for m in missing[:8])
    if len(missing) > 8:
        listed += "; and {} more".format(len(missing) - 8)
    results.check(
        "pipeline.shapes_only",
        WARN,
        "shapes only: values the run could not check (stand-ins used): " + listed,
        "control flow that depends on these values is checked only in a full run (without --shapes-only)",
        data={"unchecked": missing},
    )
