"""Beta-distributed gripper head: opening in (0, 1) with a closed-form log-density and entropy."""

import torch
import torch.nn as nn
import torch.nn.functional as F


def log_beta(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.lgamma(a) + torch.lgamma(b) - torch.lgamma(a + b)


def beta_entropy(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    total = a + b
    return (
        log_beta(a, b)
        - (a - 1) * a.digamma()
        - (b - 1) * torch.special.digamma(b)
        + (total - 2) * total.digamma()
    )


class GripperHead(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, 2)

    def forward(self, h: torch.Tensor, opening: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = (F.softplus(self.proj(h)) + 1.0).unbind(-1)
        x = opening.clamp(1e-4, 1 - 1e-4)
        log_prob = (a - 1) * torch.log(x) + (b - 1) * torch.log1p(-x) - log_beta(a, b)
        return -log_prob.mean(), beta_entropy(a, b).mean()
