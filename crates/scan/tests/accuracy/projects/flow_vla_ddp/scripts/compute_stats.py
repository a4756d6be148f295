"""Compute normalization statistics of states and actions over all episodes (numpy only)."""

import argparse
import json
import pathlib

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    args = parser.parse_args()
    root = pathlib.Path(args.root)
    with open(root / "meta" / "episodes.json") as f:
        episodes = json.load(f)
    states, actions = [], []
    for e in range(len(episodes)):
        data = np.load(root / "data" / f"episode_{e:06d}.npz")
        states.append(data["state"])
        actions.append(data["action"])
    state = np.concatenate(states).astype(np.float64)
    action = np.concatenate(actions).astype(np.float64)
    np.savez(
        root / "meta" / "stats.npz",
        state_mean=state.mean(0), state_std=state.std(0) + 1e-6,
        action_mean=action.mean(0), action_std=action.std(0) + 1e-6,
    )


if __name__ == "__main__":
    main()
