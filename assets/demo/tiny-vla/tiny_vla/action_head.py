"""Flow-matching action head: learns the velocity that carries Gaussian noise (t=0) to an action chunk (t=1)."""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn


class SinusoidalTimeEmbedding(nn.Module):
    def __init__(self, dim: int, max_period: float = 10000.0) -> None:
        super().__init__()
        self.dim = dim
        self.max_period = max_period

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = self.dim // 2
        freqs = torch.exp(-math.log(self.max_period) * torch.arange(half, device=t.device, dtype=t.dtype) / half)
        angles = 1000.0 * t[:, None] * freqs[None]
        return torch.cat([angles.sin(), angles.cos()], dim=-1)


class FlowMatchingHead(nn.Module):
    def __init__(self, action_dim: int, horizon: int, dim: int, num_inference_steps: int = 10) -> None:
        super().__init__()
        self.action_dim = action_dim
        self.horizon = horizon
        self.num_inference_steps = num_inference_steps
        self.action_in = nn.Linear(action_dim, dim)
        self.time_mlp = nn.Sequential(SinusoidalTimeEmbedding(dim), nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.action_pos = nn.Parameter(torch.randn(1, horizon, dim) * 0.02)
        self.action_out = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, action_dim))

    def embed(self, noisy_actions: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Action tokens (batch, horizon, dim) for the backbone."""
        return self.action_in(noisy_actions) + self.time_mlp(t)[:, None] + self.action_pos

    def decode(self, hidden: torch.Tensor) -> torch.Tensor:
        """Velocity (batch, horizon, action_dim) from the backbone's action-token outputs."""
        return self.action_out(hidden)

    @torch.no_grad()
    def sample(
        self, velocity_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], batch_size: int, device: torch.device
    ) -> torch.Tensor:
        """Euler integration of the learned flow from noise to actions."""
        dt = 1.0 / self.num_inference_steps
        x = torch.randn(batch_size, self.horizon, self.action_dim, device=device)
        t = torch.zeros_like(x[:, 0, 0])
        while t.max().item() < 1.0 - 0.5 * dt:
            x = x + dt * velocity_fn(x, t)
            t = t + dt
        return x
