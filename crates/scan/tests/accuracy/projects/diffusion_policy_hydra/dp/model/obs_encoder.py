"""Observation encoder: a small transformer over the low-dim history, with an optional fused kernel."""

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from flash_attn import flash_attn_func

    FLASH_AVAILABLE = True
except ImportError:
    flash_attn_func = None
    FLASH_AVAILABLE = False

try:
    from apex.normalization import FusedLayerNorm as LayerNorm
except ImportError:
    from torch.nn import LayerNorm

import xformers.ops as xops


class HistoryAttention(nn.Module):
    def __init__(self, dim: int, heads: int = 4, dropout: float = 0.0) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.proj = nn.Linear(dim, dim)
        self.dropout = dropout
        self.norm = LayerNorm(dim)

    def forward(self, x: torch.Tensor, causal: bool = True) -> torch.Tensor:
        b, s, d = x.shape
        qkv = self.qkv(self.norm(x)).view(b, s, 3, self.heads, self.head_dim)
        q, k, v = qkv.unbind(dim=2)
        if FLASH_AVAILABLE and x.is_cuda:
            out = flash_attn_func(q, k, v, dropout_p=self.dropout if self.training else 0.0, causal=causal)
        elif self.training:
            out = xops.memory_efficient_attention(q, k, v, attn_bias=xops.LowerTriangularMask() if causal else None)
        else:
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
            ).transpose(1, 2)
        return x + self.proj(out.reshape(b, s, d))


class LowdimObsEncoder(nn.Module):
    def __init__(self, obs_dim: int, n_obs_steps: int, dim: int = 128, depth: int = 2) -> None:
        super().__init__()
        self.n_obs_steps = n_obs_steps
        self.inp = nn.Linear(obs_dim, dim)
        self.pos = nn.Parameter(torch.zeros(1, n_obs_steps, dim))
        self.blocks = nn.ModuleList([HistoryAttention(dim) for _ in range(depth)])
        self.out_dim = dim * n_obs_steps

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.inp(obs[:, : self.n_obs_steps]) + self.pos
        for block in self.blocks:
            x = block(x)
        return x.flatten(1)
