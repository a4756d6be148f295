"""``torch.npu.amp.GradScaler`` as torch_npu builds it (``torch_npu/npu/amp/grad_scaler.py``, the same class in
torch-npu 2.1.0.post17 and 2.14.0): torch's GradScaler (``torch.amp.GradScaler``, on torch < 2.3 the CUDA one,
``torch.cuda.amp.GradScaler``) without its CUDA checks, with

- ``dynamic`` (``False``: a static loss scale, gradients unscaled without an inf/nan check, every step taken);
- the inverse scale computed in float32 (``self._scale.float().reciprocal()``);
- an overflow flag for the step: an inf/nan gradient skips ``optimizer.step()`` and prints
  ``Gradient overflow. Skipping step``;
- the scale updated in Python after each step, printing ``Loss scaler reducing loss scale to <scale>`` after an
  overflow and ``Loss scaler increasing loss scale to <scale>`` when it grows (every ``growth_interval`` clean
  steps).

torch_npu also reads the device's float status registers (``npu_get_float_status``) on SoCs without inf/nan
support and all-reduces the overflow count over ranks; the emulated device checks the gradients themselves
(``_amp_foreach_non_finite_check_and_unscale_``; before torch 2.3 CPU torch has no kernel for it and the emulator
computes it on the host, npu_emulator/_older_torch.py) and does not all-reduce. Under transfer_to_npu,
``torch.cuda.amp.GradScaler`` is this class (the wheel's ``_patch_cuda`` copies ``torch_npu.npu.amp.__all__`` onto
``torch.cuda.amp``). ``torch.amp.GradScaler("npu")`` stays torch's own class, as with torch_npu.
"""

from __future__ import annotations

import collections
import collections.abc
from typing import Any

import torch

if hasattr(torch.amp, "GradScaler"):
    from torch.amp import grad_scaler as _base
else:  # torch < 2.3: only CUDA's exists
    from torch.cuda.amp import grad_scaler as _base  # type: ignore[no-redef]

_READY, _UNSCALED, _STEPPED = _base.OptState.READY, _base.OptState.UNSCALED, _base.OptState.STEPPED


class _Replicator(_base._MultiDeviceReplicator):
    """Per-device copies of the scale (torch < 2.3's own class asserts ``is_cuda``)."""

    def __init__(self, master_tensor: torch.Tensor) -> None:
        self.master = master_tensor
        self._per_device_tensors: dict[torch.device, torch.Tensor] = {}


class GradScaler(_base.GradScaler):
    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        dynamic: bool = True,
        enabled: bool = True,
    ) -> None:
        # torch's constructor disables itself without CUDA (or for its device); the device here is the npu.
        super().__init__(
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=False,
        )
        self._device = "npu"
        self._enabled = enabled
        if not enabled:
            return
        if growth_factor <= 1.0:
            raise ValueError("The growth factor must be > 1.0.")
        if backoff_factor >= 1.0:
            raise ValueError("The backoff factor must be < 1.0.")
        self._init_scale = init_scale
        self._scale = None
        self._growth_factor = growth_factor
        self._backoff_factor = backoff_factor
        self._growth_interval = growth_interval
        self._dynamic = dynamic
        self._init_growth_tracker = 0
        self._growth_tracker = None
        self._per_optimizer_states = collections.defaultdict(_base._refresh_per_optimizer_state)
        self._has_overflow = False

    def scale(self, outputs: Any) -> Any:
        if not self._enabled:
            return outputs
        if isinstance(outputs, torch.Tensor):
            if self._scale is None:
                self._lazy_init_scale_growth_tracker(outputs.device)
            return outputs * self._scale.to(device=outputs.device, non_blocking=True)
        stash: list[_Replicator] = []

        def apply_scale(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                if not stash:
                    if self._scale is None:
                        self._lazy_init_scale_growth_tracker(value.device)
                    stash.append(_Replicator(self._scale))
                return value * stash[0].get(value.device)
            if isinstance(value, (list, tuple)):
                return type(value)(apply_scale(item) for item in value)
            if isinstance(value, collections.abc.Iterable):
                return map(apply_scale, value)
            raise ValueError("outputs must be a Tensor or an iterable of Tensors")

        return apply_scale(outputs)

    def _unscale_grads_(self, optimizer: Any, inv_scale: Any, found_inf: Any, allow_fp16: bool) -> Any:
        found = _Replicator(found_inf)
        inverse = _Replicator(inv_scale)
        grouped: dict[torch.device, dict[torch.dtype, list[torch.Tensor]]] = collections.defaultdict(
            lambda: collections.defaultdict(list)
        )
        with torch.no_grad():
            for group in optimizer.param_groups:
                for param in group["params"]:
                    if param.grad is None:
                        continue
                    if not allow_fp16 and param.grad.dtype == torch.float16:
                        raise TypeError("Attempting to unscale FP16 gradients.")
                    grad = param.grad
                    if grad.is_sparse:
                        if grad.dtype == torch.float16:
                            param.grad = grad = grad.coalesce()
                        grad = grad._values()
                    grouped[grad.device][grad.dtype].append(grad)
            for device, by_dtype in grouped.items():
                for grads in by_dtype.values():
                    if self._dynamic:
                        torch._amp_foreach_non_finite_check_and_unscale_(grads, found.get(device), inverse.get(device))
                        if found.get(device).item() > 0:
                            self._has_overflow = True
                    else:
                        for grad in grads:
                            grad.mul_(inverse.get(device))
            own = found.get(found_inf.device)  # recorded even when nothing was checked (a static scale)
            if self._has_overflow:
                own.add_(1)
        return found._per_device_tensors

    def unscale_(self, optimizer: Any) -> None:
        if not self._enabled:
            return
        self._check_scale_growth_tracker("unscale_")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is _UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] is _STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = self._scale.float().reciprocal()
        found_inf = torch.full((1,), 0.0, dtype=torch.float32, device=self._scale.device)
        state["found_inf_per_device"] = self._unscale_grads_(optimizer, inv_scale, found_inf, False)
        state["stage"] = _UNSCALED

    def _maybe_opt_step(self, optimizer: Any, optimizer_state: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if not sum(v.item() for v in optimizer_state["found_inf_per_device"].values()) and not self._has_overflow:
            return optimizer.step(*args, **kwargs)
        print("Gradient overflow. Skipping step")
        return None

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check_scale_growth_tracker("step")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is _STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if getattr(optimizer, "_step_supports_amp_scaling", False):
            retval = optimizer.step(*args, **dict(kwargs, grad_scaler=self))
        else:
            if state["stage"] is _READY:
                self.unscale_(optimizer)
            if not state["found_inf_per_device"]:
                raise RuntimeError("No inf checks were recorded for this optimizer.")
            if self._dynamic:
                retval = self._maybe_opt_step(optimizer, state, *args, **kwargs)
            else:
                retval = optimizer.step(*args, **kwargs)
        state["stage"] = _STEPPED
        return retval

    def update(self, new_scale: Any = None) -> None:
        if not self._enabled:
            return
        scale, _ = self._check_scale_growth_tracker("update")
        if new_scale is not None:
            if isinstance(new_scale, float):
                self._scale = torch.full((), new_scale, dtype=torch.float32, device=scale.device)
            else:
                reason = "new_scale should be a float or a 1-element torch.npu.FloatTensor with requires_grad=False."
                if not isinstance(new_scale, torch.Tensor) or new_scale.device.type != "npu":
                    raise TypeError(reason)
                if new_scale.numel() != 1 or new_scale.requires_grad:
                    raise ValueError(reason)
                self._scale = new_scale
        elif self._dynamic:
            self._update_scale()
        self._per_optimizer_states = collections.defaultdict(_base._refresh_per_optimizer_state)
        self._has_overflow = False

    def _update_scale(self) -> None:
        if self._has_overflow:
            self._scale.mul_(self._backoff_factor)
            self._growth_tracker.zero_()
            print(f"Loss scaler reducing loss scale to {self._scale.item()}")
            return
        self._growth_tracker.add_(1)
        if self._growth_tracker.item() == self._growth_interval:
            grown = self._scale * self._growth_factor
            if not torch.isinf(grown):
                self._scale = grown
            self._growth_tracker.zero_()
            print(f"Loss scaler increasing loss scale to {self._scale.item()}")

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self._enabled:
            state["dynamic"] = self._dynamic
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not self._enabled:
            return
        super().load_state_dict(state_dict)
        self._dynamic = state_dict.get("dynamic", True)
