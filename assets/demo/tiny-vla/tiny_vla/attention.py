"""Multi-head self-attention with a choice of kernel."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """q, k, v: (batch, seq, heads, head_dim) in fp16/bf16; returns the same layout."""
    from flash_attn import flash_attn_func  # imported here: importing flash_attn costs ~1 s at start-up

    return flash_attn_func(q, k, v, dropout_p=0.0, causal=causal)


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Same contract as `flash_attention`, with PyTorch's scaled_dot_product_attention."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return out.transpose(1, 2)


ATTENTION_KERNELS = {
    "flash_attention_2": flash_attention,
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
