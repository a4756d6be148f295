"""Run the diffusion policy once."""

import torch

from mpp.policies.diffusion import DiffusionPolicy

if __name__ == "__main__":
    policy = DiffusionPolicy().cuda()
    print(policy(torch.ones(1, 4).cuda()).shape)
