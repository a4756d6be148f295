"""Train one policy; the config file names which one (`policy: type: act`)."""

import argparse

import torch

from robolearn.config import load_config
from robolearn.factory import make_policy


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/act.yaml")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    cfg = load_config(args.config)
    device = torch.device(args.device)
    policy = make_policy(cfg["policy.type"]).to(device)
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)
    for _ in range(args.steps):
        batch = torch.randn(4, 3, device=device)
        loss = policy(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"trained {cfg['policy.type']}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
