import torch

from mpp.policies.act import ACTPolicy


def test_forward(device):
    policy = ACTPolicy().to(device)
    out = policy(torch.ones(2, 4, device=device))
    if out.device.type == "cuda":
        torch.cuda.synchronize()
    assert out.device.type in ("cuda", "cpu")
    assert out.shape == (2, 4)
