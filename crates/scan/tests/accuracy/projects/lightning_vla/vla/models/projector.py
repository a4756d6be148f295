"""MLP projector from fused vision features to the language model's embedding space."""

import torch
import torch.nn as nn

try:
    from apex.normalization import FusedRMSNorm as RMSNorm
except ImportError:

    class RMSNorm(nn.Module):
        def __init__(self, dim: int, eps: float = 1e-6) -> None:
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            variance = x.float().pow(2).mean(-1, keepdim=True)
            return (x * torch.rsqrt(variance + self.eps)).type_as(x) * self.weight


class FusedMLPProjector(nn.Module):
    def __init__(self, vision_dim: int, llm_dim: int) -> None:
        super().__init__()
        self.norm = RMSNorm(vision_dim)
        self.fc1 = nn.Linear(vision_dim, vision_dim * 4)
        self.fc2 = nn.Linear(vision_dim * 4, llm_dim)
        self.fc3 = nn.Linear(llm_dim, llm_dim)
        self.act = nn.GELU()

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        x = self.act(self.fc1(self.norm(patches)))
        x = self.act(self.fc2(x))
        return self.fc3(x)
