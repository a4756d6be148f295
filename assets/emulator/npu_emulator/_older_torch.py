"""What torch (mostly before 2.3) lacks for a device whose tensors are a Python subclass, filled in as torch_npu does.

On a real NPU the tensors are plain tensors of the PrivateUse1 key, so torch's own code paths take them; the
emulated device's tensors are :class:`~npu_emulator._tensor.NPUTensor` wrappers, which torch < 2.3 treats as
foreign in more places than newer torch. Each shim acts only on device tensors and only where torch needs it.

- ``Module._apply`` (``.to("npu")``, ``.cuda()`` under transfer_to_npu; on every torch, back with ``.cpu()``):
  torch < 2.3 cannot set a CPU parameter's ``.data`` to a device subclass, nor any torch a device parameter's
  ``.data`` to a CPU tensor, and then makes a new Parameter per module, so a parameter shared by two modules
  (``head.weight = emb.weight``) would come back as two, silently. torch_npu keeps the tie (its
  ``_has_compatible_shallow_copy_type`` accepts NPU tensors, so torch sets ``.data`` in place); here every module
  that held the shared parameter gets the same new one. Unlike torch_npu, that Parameter is a new object: an
  optimizer built before the move holds the old ones (torch >= 2.3 swaps CPU -> device in place, keeping them).
- foreach: torch 2.1's ``_has_foreach_support`` accepts only ``type(t) == torch.Tensor``, so
  ``clip_grad_norm_(..., foreach=True)`` raised "can't use the foreach API on npu tensors"; torch_npu 2.1 runs
  ``_foreach_norm`` on the device. Device tensors count as plain tensors here.
- ``_amp_foreach_non_finite_check_and_unscale_`` and ``_amp_update_scale_`` have no CPU kernel before torch 2.3:
  torch_npu's GradScaler checks and unscales the gradients with the first (``npu/amp/grad_scaler.py``, 2.1.0.post17),
  and code may call either directly; torch_npu has NPU kernels for both. They are computed here on the tensors
  behind the device tensors, with the formulas of torch's CUDA kernels (``aten/src/ATen/native/cuda/AmpKernels.cu``).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from npu_emulator import _rnn
from npu_emulator._tensor import NPUTensor

aten = torch.ops.aten

_state: dict[str, Any] = {"installed": False, "depth": 0}


def install() -> None:
    """Install the shims this torch needs (once)."""
    if _state["installed"]:
        return
    _state["installed"] = True
    _keep_shared_parameters()
    _accept_device_tensors_in_foreach()
    _compute_amp_ops_on_the_host()
    _only_parameter_takes_the_param_flag()


def _only_parameter_takes_the_param_flag() -> None:
    """``isinstance(p, UninitializedParameter)`` is False for a device parameter, as on later torch.

    torch < 2.2's ``_ParameterMeta.__instancecheck__`` counts every tensor with ``_is_param`` as an instance of
    each Parameter class, ``UninitializedParameter`` included, so DistributedDataParallel refused a module on the
    device ("Modules with uninitialized parameters"). Later torch applies the flag to ``Parameter`` only; this is
    that check.
    """
    meta = type(torch.nn.Parameter)
    flagged = torch.Tensor()
    flagged._is_param = True  # type: ignore[attr-defined]
    if not isinstance(flagged, torch.nn.parameter.UninitializedParameter):
        return  # this torch checks the flag for Parameter only

    def instancecheck(cls: Any, instance: Any) -> bool:
        if cls is torch.nn.Parameter and isinstance(instance, torch.Tensor) and getattr(instance, "_is_param", False):
            return True
        return super(meta, cls).__instancecheck__(instance)

    meta.__instancecheck__ = instancecheck  # type: ignore[method-assign]


def _lacks_cpu_kernel(call: Any) -> bool:
    try:
        call()
    except NotImplementedError:
        return True
    return False


def _compute_amp_ops_on_the_host() -> None:
    """Kernels for the two GradScaler ops where CPU torch has none (torch < 2.3)."""
    scale, tracker, found = torch.ones(()), torch.zeros((), dtype=torch.int32), torch.zeros(())
    if _lacks_cpu_kernel(lambda: torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 2000)):
        _rnn.KERNELS[aten._amp_update_scale_.default] = update_scale
    grads, inv = [torch.ones(1)], torch.ones(())
    if _lacks_cpu_kernel(lambda: torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)):
        _rnn.KERNELS[aten._amp_foreach_non_finite_check_and_unscale_.default] = non_finite_check_and_unscale


def _keep_shared_parameters() -> None:
    original = torch.nn.Module._apply

    def _apply(self: torch.nn.Module, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if _state["depth"]:
            return original(self, fn, *args, **kwargs)
        held = [
            (module, key, param)
            for module in self.modules()
            for key, param in module._parameters.items()
            if param is not None
        ]
        _state["depth"] += 1
        try:
            result = original(self, fn, *args, **kwargs)
        finally:
            _state["depth"] -= 1
        first: dict[int, Any] = {}
        for module, key, old in held:
            new = module._parameters.get(key)
            if new is None or new is old:
                continue
            kept = first.setdefault(id(old), new)
            if kept is not new and (isinstance(kept, NPUTensor) or isinstance(old, NPUTensor)):
                module._parameters[key] = kept
        return result

    _apply.__wrapped__ = original  # type: ignore[attr-defined]
    torch.nn.Module._apply = _apply  # type: ignore[method-assign]


def _accept_device_tensors_in_foreach() -> None:
    import torch.nn.utils.clip_grad as clip_grad
    import torch.utils._foreach_utils as foreach_utils

    if hasattr(foreach_utils, "_foreach_supported_types"):
        return  # torch >= 2.2 checks a list of types, which install() extends with NPUTensor
    original = foreach_utils._has_foreach_support

    def _has_foreach_support(tensors: list[Any], device: torch.device) -> bool:
        if device.type == "npu" and not torch.jit.is_scripting():
            return all(t is None or type(t) in (torch.Tensor, NPUTensor) for t in tensors)
        return original(tensors, device)

    for module in (foreach_utils, clip_grad):
        if getattr(module, "_has_foreach_support", None) is original:
            module._has_foreach_support = _has_foreach_support  # type: ignore[attr-defined]


def non_finite_check_and_unscale(grads: list[torch.Tensor], found_inf: torch.Tensor, inv_scale: torch.Tensor) -> None:
    """``_amp_foreach_non_finite_check_and_unscale_`` on the CPU tensors behind device tensors."""
    for grad in grads:
        if not bool(torch.isfinite(grad).all()):
            found_inf.fill_(1.0)
        grad.mul_(inv_scale)


def update_scale(
    scale: torch.Tensor,
    growth_tracker: torch.Tensor,
    found_inf: torch.Tensor,
    growth_factor: float,
    backoff_factor: float,
    growth_interval: int,
) -> torch.Tensor:
    """``_amp_update_scale_`` on CPU tensors: back off after an inf/nan, grow after ``growth_interval`` clean steps."""
    if float(found_inf.sum()) != 0.0:
        scale.mul_(backoff_factor)
        growth_tracker.fill_(0)
    else:
        successful = int(growth_tracker) + 1
        if successful == growth_interval:
            grown = float(scale) * growth_factor
            if math.isfinite(grown):
                scale.fill_(grown)
            growth_tracker.fill_(0)
        else:
            growth_tracker.fill_(successful)
    return scale
