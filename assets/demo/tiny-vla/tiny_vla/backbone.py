"""The multimodal transformer: image patches, instruction tokens, state and noisy actions in one sequence."""

from __future__ import annotations

import math

import torch
from torch import nn

from .attention import SelfAttention


class TransformerBlock(nn.Module):
    def __init__(self, dim: int, num_heads: int, attn_implementation: str, mlp_ratio: float = 4.0, dropout: float = 0.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, num_heads, attn_implementation=attn_implementation)
        self.norm2 = nn.LayerNorm(dim)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(approximate="tanh"), nn.Dropout(dropout), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def sinusoidal_table(num_positions: int, dim: int) -> torch.Tensor:
    position = torch.arange(num_positions, dtype=torch.float32)[:, None]
    freqs = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(num_positions, dim)
    table[:, 0::2] = torch.sin(position * freqs)
    table[:, 1::2] = torch.cos(position * freqs)
    return table


class TransformerBackbone(nn.Module):
    def __init__(
        self,
        dim: int,
        depth: int,
        num_heads: int,
        max_seq_len: int = 256,
        attn_implementation: str = "sdpa",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.register_buffer("pos_table", sinusoidal_table(max_seq_len, dim), persistent=False)
        self.layers = nn.ModuleList(
            TransformerBlock(dim, num_heads, attn_implementation, dropout=dropout) for _ in range(depth)
        )
        self.norm = nn.LayerNorm(dim)

    def forward(self, tokens: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        if position_ids is None:
            position_ids = torch.arange(tokens.shape[1])
        x = tokens + self.pos_table[position_ids]
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)
