"""Prefix-LM attention over [image, language, state, action] tokens with packed sequences."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from flash_attn import flash_attn_varlen_func
from flash_attn.bert_padding import pad_input, unpad_input

from flow_vla.model.kernels import rms_norm


def apply_rope(x: torch.Tensor, positions: torch.Tensor, max_wavelength: int = 10_000) -> torch.Tensor:
    d_half = x.shape[-1] // 2
    device = x.device
    dtype = x.dtype
    x = x.to(torch.float32)
    freq_exponents = (2.0 / x.shape[-1]) * torch.arange(d_half, dtype=torch.float32, device=device)
    timescale = max_wavelength**freq_exponents
    radians = positions[..., None].to(torch.float32) / timescale[None, None, :].to(torch.float32)
    radians = radians[..., None, :]
    sin = torch.sin(radians)
    cos = torch.cos(radians)
    x1, x2 = x.split(d_half, dim=-1)
    res = torch.empty_like(x)
    res[..., :d_half] = x1 * cos - x2 * sin
    res[..., d_half:] = x2 * cos + x1 * sin
    return res.to(dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


class PrefixAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int, num_kv_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = dim // num_heads
        self.q_proj = nn.Linear(dim, num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(dim, num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(dim, num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * self.head_dim, dim, bias=False)
        self.norm = RMSNorm(dim)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, pad_mask: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = self.norm(x)
        q = self.q_proj(h).view(b, s, self.num_heads, self.head_dim)
        k = self.k_proj(h).view(b, s, self.num_kv_heads, self.head_dim)
        v = self.v_proj(h).view(b, s, self.num_kv_heads, self.head_dim)
        q = apply_rope(q, positions)
        k = apply_rope(k, positions)
        q_unpad, indices, cu_seqlens, max_len, _ = unpad_input(q, pad_mask)
        k_unpad = unpad_input(k, pad_mask)[0]
        v_unpad = unpad_input(v, pad_mask)[0]
        out = flash_attn_varlen_func(
            q_unpad, k_unpad, v_unpad, cu_seqlens, cu_seqlens, max_len, max_len,
            softmax_scale=1.0 / math.sqrt(self.head_dim), causal=False,
        )
        out = pad_input(out, indices, b, s)
        return x + self.o_proj(out.reshape(b, s, -1))

    def forward_sdpa(self, x: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = self.norm(x)
        q = self.q_proj(h).view(b, s, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, s, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, s, self.num_kv_heads, self.head_dim).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask[:, None, None, :], enable_gqa=True)
        return x + self.o_proj(out.transpose(1, 2).reshape(b, s, -1))
