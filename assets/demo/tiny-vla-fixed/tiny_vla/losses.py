"""Flow-matching targets and the masked regression loss."""

from __future__ import annotations

import torch


def flow_matching_targets(actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rectified-flow training pairs: x_t = t * actions + (1 - t) * noise, target velocity = actions - noise.

    Built on the actions' device, for the whole batch at once.
    """
    noise = torch.randn_like(actions)
    t = torch.rand(actions.shape[0], device=actions.device, dtype=actions.dtype)
    t_b = t[:, None, None]
    x_t = t_b * actions + (1.0 - t_b) * noise
    velocity = actions - noise
    return x_t, t, velocity


def masked_mse(pred: torch.Tensor, target: torch.Tensor, valid_len: torch.Tensor) -> torch.Tensor:
    """Mean squared error over the valid (not padded) steps of each action chunk, averaged over the batch."""
    steps = torch.arange(pred.shape[1], device=pred.device)
    valid = (steps[None] < valid_len[:, None]).to(pred.dtype)
    per_step = ((pred - target) ** 2).mean(dim=-1)
    per_sample = (per_step * valid).sum(dim=1) / valid.sum(dim=1).clamp(min=1.0)
    return per_sample.mean()
