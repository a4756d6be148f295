"""Roll out a trained policy in the simulator and report the success rate."""

import argparse
import json

import numpy as np
import torch

from dp.common.pytorch_util import dict_apply
from dp.policy.diffusion_policy import DiffusionUnetLowdimPolicy


def rollout(policy: DiffusionUnetLowdimPolicy, env, n_episodes: int, device: torch.device) -> float:
    successes = []
    for _ in range(n_episodes):
        obs = env.reset()
        done = False
        while not done:
            obs_dict = {"obs": torch.from_numpy(obs[None]).to(device=device, dtype=torch.float32)}
            with torch.no_grad():
                action = policy.predict_action(obs_dict)["action"]
            action_np = action.detach().cpu().numpy()[0]
            obs, reward, done, info = env.step(action_np)
        successes.append(float(info.get("success", reward > 0.95)))
    return float(np.mean(successes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args()
    device = torch.device(args.device)
    payload = torch.load(args.checkpoint, map_location="cpu")
    policy = DiffusionUnetLowdimPolicy.from_config(payload["cfg"]["policy"])
    policy.load_state_dict(payload["state_dicts"]["ema_model"])
    policy.to(device).eval()
    env = payload["env_fn"]()
    score = rollout(policy, env, args.episodes, device)
    batch = dict_apply({"score": torch.tensor([score])}, lambda x: x.to(device))
    print(json.dumps({"success_rate": batch["score"].item()}))


if __name__ == "__main__":
    main()
