"""Stand-in ``torch_npu.optim.NpuFusedAdamW`` with the documented restrictions (NPU-FACTS.md, "Optimizers").

- Params must be float32 or float16: bfloat16 raises ``TypeError``.
- ``zero_grad(set_to_none=True)`` raises ``ValueError``.
- The first ``step()`` fuses the params that have a gradient into contiguous buffers: params without a gradient at
  that point are left out for good, and params must not be re-allocated afterwards (re-allocation is detected and
  raised here; a real device would silently update stale buffers).
- No ``maximize`` / ``foreach`` / ``fused`` / ``capturable`` arguments.
The update itself is AdamW with decoupled weight decay, as ``torch.optim.AdamW``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from npu_emulator._errors import EmulatedNPUError, emulated_message

_SOURCE = "NPU-FACTS.md, 'Optimizers'"
_ALLOWED = (torch.float32, torch.float16)


class NpuFusedAdamW(torch.optim.Optimizer):
    """AdamW as ``torch_npu.optim.NpuFusedAdamW`` behaves on a device (see the module doc)."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
    ) -> None:
        if lr < 0.0:
            msg = f"Invalid learning rate: {lr}"
            raise ValueError(msg)
        if eps < 0.0:
            msg = f"Invalid epsilon value: {eps}"
            raise ValueError(msg)
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            msg = f"Invalid beta parameters: {betas}"
            raise ValueError(msg)
        if weight_decay < 0.0:
            msg = f"Invalid weight_decay value: {weight_decay}"
            raise ValueError(msg)
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "amsgrad": amsgrad}
        super().__init__(params, defaults)
        for group in self.param_groups:
            for param in group["params"]:
                _check_dtype(param)
        self._fused: list[list[tuple[torch.Tensor, int]]] | None = None

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zero the gradients in place; ``set_to_none=True`` raises ``ValueError`` as on the device."""
        if set_to_none:
            detail = "NpuFusedAdamW.zero_grad(set_to_none=True): fused gradient buffers cannot be set to None"
            msg = emulated_message("set_to_none is not supported by fused optimizers", detail, _SOURCE)
            raise ValueError(msg)
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    param.grad.detach_()
                    param.grad.zero_()

    def _fuse(self) -> list[list[tuple[torch.Tensor, int]]]:
        fused = []
        for group in self.param_groups:
            members = []
            for param in group["params"]:
                _check_dtype(param)
                if param.grad is not None:
                    members.append((param, param.data_ptr()))
            fused.append(members)
        return fused

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._fused is None:
            self._fused = self._fuse()
        for group, members in zip(self.param_groups, self._fused, strict=True):
            lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
            for param, address in members:
                if param.data_ptr() != address:
                    detail = "a parameter was re-allocated after the first step (e.g. .cpu(), reassignment)"
                    msg = emulated_message("NpuFusedAdamW buffers are stale", detail, _SOURCE)
                    raise EmulatedNPUError(msg)
                if param.grad is None:
                    continue
                self._update(param, group, lr, beta1, beta2, eps)
        return loss

    def _update(
        self, param: torch.Tensor, group: dict[str, Any], lr: float, beta1: float, beta2: float, eps: float
    ) -> None:
        grad = param.grad.float()
        state = self.state[param]
        if not state:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(param, dtype=torch.float32)
            state["exp_avg_sq"] = torch.zeros_like(param, dtype=torch.float32)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = torch.zeros_like(param, dtype=torch.float32)
        state["step"] += 1
        step = state["step"]
        value = param.float()
        value.mul_(1.0 - lr * group["weight_decay"])
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.lerp_(grad, 1.0 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        if group["amsgrad"]:
            torch.maximum(state["max_exp_avg_sq"], exp_avg_sq, out=state["max_exp_avg_sq"])
            second = state["max_exp_avg_sq"]
        else:
            second = exp_avg_sq
        bias1 = 1.0 - beta1**step
        bias2 = 1.0 - beta2**step
        denom = (second.sqrt() / math.sqrt(bias2)).add_(eps)
        value.addcdiv_(exp_avg, denom, value=-lr / bias1)
        param.copy_(value)


def _check_dtype(param: torch.Tensor) -> None:
    if param.dtype not in _ALLOWED:
        detail = f"NpuFusedAdamW got a {param.dtype} parameter; params must be float32 or float16"
        raise TypeError(emulated_message(f"{param.dtype} is not supported by NpuFusedAdamW", detail, _SOURCE))
