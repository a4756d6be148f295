"""Multi-head self-attention with a choice of kernel."""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

try:
    import torch_npu
except ImportError:  # plain CPU torch: npu_fusion_attention falls back to SDPA
    torch_npu = None


@functools.cache
def _compressed_causal_mask(device: torch.device) -> torch.Tensor:
    """The 2048x2048 upper-triangular mask that npu_fusion_attention's sparse_mode=3 expects (True = masked out)."""
    return torch.ones(2048, 2048, dtype=torch.bool, device=device).triu(diagonal=1)


def npu_fusion_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """q, k, v: (batch, seq, heads, head_dim); returns the same layout. torch_npu's fused kernel on an NPU, else SDPA."""
    if torch_npu is None or q.device.type != "npu":
        return sdpa_attention(q, k, v, causal=causal)
    scale = 1.0 / math.sqrt(q.shape[-1])
    if not causal:
        return torch_npu.npu_fusion_attention(q, k, v, q.shape[2], "BSND", scale=scale)[0]
    mask = _compressed_causal_mask(q.device)
    return torch_npu.npu_fusion_attention(q, k, v, q.shape[2], "BSND", atten_mask=mask, scale=scale, sparse_mode=3)[0]


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Same contract as `npu_fusion_attention`, with PyTorch's scaled_dot_product_attention."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return out.transpose(1, 2)


ATTENTION_KERNELS = {
    "npu_fusion_attention": npu_fusion_attention,
    "sdpa": sdpa_attention,
}


class SelfAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int, attn_implementation: str = "sdpa", causal: bool = False) -> None:
        super().__init__()
        if attn_implementation not in ATTENTION_KERNELS:
            raise ValueError(f"unknown attn_implementation {attn_implementation!r}; choose from {sorted(ATTENTION_KERNELS)}")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.causal = causal
        self.kernel = ATTENTION_KERNELS[attn_implementation]
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.num_heads, self.head_dim).unbind(dim=2)
        out = self.kernel(q, k, v, causal=self.causal)
        return self.proj(out.reshape(batch, seq, dim))
