"""Map torch's public Python APIs to the aten ops they dispatch to the backend.

Run by ``cargo xtask codegen`` with the test venv's CPU torch; prints JSON on stdout. Everything comes from torch's
own bindings and dispatcher: an API is a builtin of ``torch`` (``torch._C._VariableFunctions``),
``torch.special`` / ``torch.linalg`` (``torch._C._special`` / ``torch._C._linalg``), ``torch.nn.functional`` (the
same builtin object as one of ``torch._C._nn`` or ``torch``) or a method of ``torch._C.TensorBase`` (not one that
``torch.distributions.Distribution`` has too), bound to the aten
op packet of that name. For each non-``out`` overload the dispatcher says whether it reaches the backend:

* a ``CompositeImplicitAutograd`` or ``CompositeExplicitAutograd`` kernel runs on every backend and calls other ops.
  Such an API is run once on a sample input (a float32 CPU tensor of 4 elements in (0.5, 1.5), as its only
  argument) under a ``TorchDispatchMode``: the backend ops the call reached are recorded under ``decomposed``. An
  API that fails on that input (it needs other arguments) is listed under ``composite`` and not judged;
* a ``CompositeExplicitAutogradNonFunctional`` kernel beside a CPU kernel is a structured op's wrapper: it runs the
  ``out=`` form on the backend, so the keys that run it are the overload and its ``out`` variants;
* otherwise the overload itself needs a backend kernel.

``decomposed`` maps such an API to the backend ops its sample call ran, in the same form (one entry per op).
``apis`` maps each judged API to one entry per overload: the op keys (``name.overload``) any one of which, with an
NPU kernel, runs that overload on the NPU.
"""

import json
import sys

import torch

COMPOSITE = ("CompositeImplicitAutograd", "CompositeExplicitAutograd")


def has(full, key):
    return torch._C._dispatch_has_kernel_for_dispatch_key(full, key)


def out_variants(packet, base, inputs):
    found = []
    for overload in packet.overloads():
        args = getattr(packet, overload)._schema.arguments
        if any(a.is_out for a in args) and [a.name for a in args if not a.is_out] == inputs:
            found.append(base if overload == "default" else "{}.{}".format(base, overload))
    return found


def alternatives_of(packet, name, overload):
    """The keys that run one overload on the backend; ``"composite"`` when it decomposes; None when it has no CPU
    kernel (CUDA-only, meta-only) or the dispatcher does not register it (TorchScript-only overloads)."""
    schema = getattr(packet, overload)._schema
    key = name if overload == "default" else "{}.{}".format(name, overload)
    full = "aten::" + key
    try:
        has(full, "CPU")
    except RuntimeError:
        return None
    if any(has(full, k) for k in COMPOSITE):
        return "composite"
    alternatives = [key]
    if has(full, "CompositeExplicitAutogradNonFunctional"):
        if not has(full, "CPU"):
            return "composite"
        inputs = [a.name for a in schema.arguments]
        alternatives += [o for o in out_variants(packet, name, inputs) if o != key]
    elif not has(full, "CPU"):
        return None
    return alternatives


def sample_run(api):
    """The backend ops (as alternatives lists) one call of ``api`` on a sample tensor runs, or None if it fails."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            packet = func.overloadpacket
            found = alternatives_of(packet, packet.__name__, func._overloadname)
            if isinstance(found, list) and found not in seen:
                seen.append(found)
            return func(*args, **(kwargs or {}))

    owner, _, attr = api.rpartition(".")
    x = torch.rand(4) + 0.5
    try:
        if owner == "Tensor":
            fn = getattr(x, attr)
            with Record():
                fn()
        else:
            module = {"torch": torch, "torch.special": torch.special, "torch.linalg": torch.linalg,
                      "torch.nn.functional": torch.nn.functional}[owner]
            fn = getattr(module, attr)
            with Record():
                fn(x)
    except Exception:  # noqa: BLE001 - an API that needs other arguments is not judged
        return None
    return seen


def judge(name):
    """(``"judged"``, [[key, ...] per overload]) / (``"composite"``, None) / None when no aten op has that name or
    none of its overloads has a CPU kernel."""
    packet = getattr(torch.ops.aten, name, None)
    if packet is None or not hasattr(packet, "overloads"):
        return None
    entries = []
    for overload in sorted(packet.overloads()):
        if any(a.is_out for a in getattr(packet, overload)._schema.arguments):
            continue
        found = alternatives_of(packet, name, overload)
        if found == "composite":
            return ("composite", None)
        if found is not None:
            entries.append(found)
    if not entries:
        return None
    return ("judged", entries)


def candidates():
    """(public API, aten op name) pairs."""
    vf = torch._C._VariableFunctions
    for name in dir(vf):
        if not name.startswith("_") and getattr(torch, name, None) is getattr(vf, name):
            yield "torch." + name, name
    for module, binding, prefix in (
        (torch.special, torch._C._special, "special_"),
        (torch.linalg, torch._C._linalg, "linalg_"),
    ):
        for name in dir(binding):
            if name.startswith(prefix):
                public = name[len(prefix):]
                if getattr(module, public, None) is getattr(binding, name):
                    yield "{}.{}".format(module.__name__, public), name
    functional = torch.nn.functional
    for public in dir(functional):
        if public.startswith("_"):
            continue
        obj = getattr(functional, public)
        for binding in (torch._C._nn, vf):
            name = getattr(obj, "__name__", None)
            if name and getattr(binding, name, None) is obj:
                yield "torch.nn.functional." + public, name
                break
    # A method name that torch's distribution objects answer too (``mode``, ``sample``, ``entropy``) is not a
    # tensor's without types: ``vae.encode(x)[0].mode()`` is a distribution's. Such names are left out.
    distribution = set(dir(torch.distributions.Distribution))
    for name in dir(torch._C.TensorBase):
        if not name.startswith("_") and name not in distribution:
            yield "Tensor." + name, name


def main():
    torch.manual_seed(0)
    apis, decomposed, composite = {}, {}, set()
    for api, op in candidates():
        found = judge(op)
        if found is None:
            continue
        kind, entries = found
        if kind == "judged":
            apis[api] = entries
            continue
        ran = sample_run(api)
        if ran:
            decomposed[api] = ran
        else:
            composite.add(api)
    ops = sorted({k for table in (apis, decomposed) for entries in table.values() for alts in entries for k in alts})
    json.dump(
        {
            "torch": torch.__version__.split("+")[0],
            "apis": dict(sorted(apis.items())),
            "decomposed": dict(sorted(decomposed.items())),
            "composite": sorted(composite),
            "ops": ops,
        },
        sys.stdout,
    )


main()
