import torch
from torch.utils.data import DataLoader

from robolearn.policies.diffusion import DiffusionPolicy


def test_policy_runs_on_a_loader_batch():
    device = torch.device("cpu")
    loader = DataLoader(torch.randn(4, 3), batch_size=2, pin_memory=device.type == "cuda")
    assert DiffusionPolicy()(next(iter(loader))).shape == (2, 2)
