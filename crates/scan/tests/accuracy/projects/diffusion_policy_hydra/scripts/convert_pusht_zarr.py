"""Convert raw PushT episodes (one .npz per episode) into a single zarr-like npz store."""

import argparse
import pathlib

import numpy as np


def load_episode(path: pathlib.Path) -> dict:
    data = np.load(path)
    return {"obs": data["obs"].astype(np.float32), "action": data["action"].astype(np.float32)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("src")
    parser.add_argument("dst")
    args = parser.parse_args()
    episodes = [load_episode(p) for p in sorted(pathlib.Path(args.src).glob("*.npz"))]
    episode_ends = np.cumsum([len(e["action"]) for e in episodes])
    np.savez(
        args.dst,
        obs=np.concatenate([e["obs"] for e in episodes]),
        action=np.concatenate([e["action"] for e in episodes]),
        episode_ends=episode_ends,
    )


if __name__ == "__main__":
    main()
