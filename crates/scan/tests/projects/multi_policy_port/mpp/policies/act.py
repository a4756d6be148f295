"""A tiny action-chunking policy."""

import torch
from torch import nn


class ACTPolicy(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 4)

    def forward(self, x):
        return self.net(x)
