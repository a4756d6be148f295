"""A tiny diffusion policy."""

import torch
from torch import nn


class DiffusionPolicy(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 4)

    def forward(self, x):
        if x.device.type == "cuda":
            x = x.float()
        return self.net(x)
