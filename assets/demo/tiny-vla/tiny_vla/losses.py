"""Flow-matching targets and the masked regression loss."""

from __future__ import annotations

import numpy as np
import torch


def flow_matching_targets(actions: torch.Tensor, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rectified-flow training pairs: x_t = t * actions + (1 - t) * noise, target velocity = actions - noise.

    Follows the reference implementation, which builds the pairs with numpy.
    """
    actions_np = actions.detach().cpu().numpy()
    noise = rng.standard_normal(actions_np.shape).astype(np.float32)
    t = rng.uniform(0.0, 1.0, size=(actions_np.shape[0], 1, 1)).astype(np.float32)
    x_t = t * actions_np + (1.0 - t) * noise
    velocity = actions_np - noise
    device = actions.device
    return (
        torch.from_numpy(x_t).to(device),
        torch.from_numpy(t.reshape(-1)).to(device),
        torch.from_numpy(velocity).to(device),
    )


def masked_mse(pred: torch.Tensor, target: torch.Tensor, valid_len: torch.Tensor) -> torch.Tensor:
    """Mean squared error over the valid (not padded) steps of each action chunk, averaged over the batch."""
    per_sample = []
    for i in range(pred.shape[0]):
        n = valid_len[i]
        per_sample.append(((pred[i, :n] - target[i, :n]) ** 2).mean())
    return torch.stack(per_sample).mean()
