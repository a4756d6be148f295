"""A small VLA-style transformer policy and a CUDA-era training loop, written the way ported code looks.

The loop leans on what the runtime patches fix: float64 numpy targets moved to the device, a host index tensor
into a device tensor, a broadcast [B,1,1,S] bool padding mask for ``F.scaled_dot_product_attention``, a
fractional power of an integer position tensor, ``nan_to_num`` on float16 observations, ``.numpy()`` for
logging and builtin ``max`` on tensors. Shared by the training test and ``cargo xtask bench patches``.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

OBS_DIM, VOCAB, ACTION_DIM, WIDTH, HEADS, TOKENS = 12, 32, 4, 32, 4, 6


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.norm2 = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(), nn.Linear(2 * WIDTH, WIDTH))

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, s, 3, HEADS, WIDTH // HEADS).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, WIDTH))
        return x + self.mlp(self.norm2(x))


class Policy(nn.Module):
    def __init__(self, depth: int = 2) -> None:
        super().__init__()
        self.obs = nn.Linear(OBS_DIM, WIDTH)
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(depth))
        self.head = nn.Linear(WIDTH, ACTION_DIM)

    def forward(self, obs: torch.Tensor, tokens: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        obs = torch.nan_to_num(obs.half()).float()
        positions = torch.arange(tokens.shape[1] + 1, device=tokens.device)
        decay = 1.0 / (1.0 + positions**0.5)
        x = torch.cat([self.obs(obs)[:, None, :], self.tok(tokens)], dim=1) * decay[None, :, None]
        keep = torch.cat([torch.ones_like(keep[:, :1]), keep], dim=1)
        for block in self.blocks:
            x = block(x, keep)
        return self.head(x[:, 0])


def make_data(samples: int = 64, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, TOKENS + 1, size=samples)
    keep = np.arange(TOKENS)[None, :] < lengths[:, None]
    obs = rng.normal(size=(samples, OBS_DIM))  # float64, as numpy makes it
    return {
        "obs": obs,
        "tokens": rng.integers(0, VOCAB, size=(samples, TOKENS)),
        "keep": keep,
        "target": np.tanh(obs[:, :ACTION_DIM] * 0.5),  # float64 targets
    }


def make_policy(seed: int = 0, depth: int = 2) -> Policy:
    torch.manual_seed(seed)
    return Policy(depth)


def train(
    model: nn.Module, data: dict[str, np.ndarray], device: Any, steps: int = 5, batch: int = 16, seed: int = 0
) -> dict[str, Any]:
    """CUDA-style loop: ``.to(device)`` of numpy batches, host index sampling, ``.numpy()`` logging."""
    model = copy.deepcopy(model).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    on_device = {name: torch.from_numpy(array).to(device) for name, array in data.items()}
    generator = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        idx = torch.randperm(len(data["obs"]), generator=generator)[:batch]  # host index tensor
        pred = model(on_device["obs"][idx], on_device["tokens"][idx], on_device["keep"][idx])
        loss = ((pred - on_device["target"][idx]) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.detach().numpy()))
        peak = max(norm, torch.tensor(0.0))
        assert float(peak) >= 0.0
    params = [p.detach().cpu().float() for p in model.parameters()]
    return {"losses": losses, "params": params, "optimizer": type(optimizer).__name__}
