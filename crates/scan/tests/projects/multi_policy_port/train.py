"""Train one policy of the project: python train.py --policy act --device cuda."""

import argparse

import torch

from mpp.configs import TrainConfig
from mpp.policies import make_policy


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--policy", default="act", choices=["act", "diffusion"])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu", "mps"])
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    cfg = TrainConfig(policy=args.policy, device=args.device)
    device = torch.device(cfg.device)
    policy = make_policy(cfg.policy).to(device)
    opt = torch.optim.SGD(policy.parameters(), lr=0.1)
    for _ in range(args.steps):
        x = torch.randn(8, 4, device=device)
        loss = policy(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
