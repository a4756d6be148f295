"""``torch_npu.optim`` of the stand-in package."""

from __future__ import annotations

from torch_npu.optim.npu_fused_adamw import NpuFusedAdamW

__all__ = ["NpuFusedAdamW"]
