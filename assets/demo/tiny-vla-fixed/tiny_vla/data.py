"""Synthetic robot episodes, generated on the fly and reproducible from a seed.

Each episode shows a coloured block on a table seen by two cameras and an instruction such as
"push the red block left quickly". The expert moves the gripper in the named direction at the
named speed and closes it for "pick" instructions. A sample is one step of an episode: both
camera images, the instruction tokens, the proprioceptive state and the next `horizon` actions.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from .tokenizer import InstructionTokenizer

COLORS = {
    "red": (1.0, 0.1, 0.1),
    "green": (0.1, 0.9, 0.2),
    "blue": (0.1, 0.2, 1.0),
    "yellow": (0.9, 0.9, 0.1),
}
DIRECTIONS = {
    "left": (-1.0, 0.0),
    "right": (1.0, 0.0),
    "up": (0.0, 1.0),
    "down": (0.0, -1.0),
}
SPEEDS = {"slowly": 0.02, "quickly": 0.06}
VERBS = ("push", "pick", "move")


def render_camera(rng: np.random.Generator, center: np.ndarray, rgb, size: int) -> np.ndarray:
    """A square of colour `rgb` at `center` (in [-1, 1]^2) over a noisy grey table, CHW float32."""
    image = rng.normal(0.4, 0.05, size=(3, size, size)).astype(np.float32)
    px = int(round((center[0] + 1.0) * 0.5 * (size - 1)))
    py = int(round((1.0 - (center[1] + 1.0) * 0.5) * (size - 1)))
    half = max(size // 10, 1)
    y0, y1 = max(py - half, 0), min(py + half + 1, size)
    x0, x1 = max(px - half, 0), min(px + half + 1, size)
    image[:, y0:y1, x0:x1] = np.asarray(rgb, dtype=np.float32)[:, None, None]
    return image


class SyntheticEpisodeDataset(Dataset):
    """`num_episodes` episodes of `episode_length` steps; item i is step i % episode_length of episode i // episode_length."""

    def __init__(
        self,
        num_episodes: int,
        episode_length: int,
        horizon: int,
        image_size: int,
        camera_names: list[str],
        tokenizer: InstructionTokenizer,
        seed: int = 0,
    ) -> None:
        self.num_episodes = num_episodes
        self.episode_length = episode_length
        self.horizon = horizon
        self.image_size = image_size
        self.camera_names = list(camera_names)
        self.tokenizer = tokenizer
        self.seed = seed
        self.action_dim = 4
        self.state_dim = 6

    def __len__(self) -> int:
        return self.num_episodes * self.episode_length

    def episode(self, index: int) -> dict:
        rng = np.random.default_rng([self.seed, index])
        color = list(COLORS)[rng.integers(len(COLORS))]
        direction = list(DIRECTIONS)[rng.integers(len(DIRECTIONS))]
        speed = list(SPEEDS)[rng.integers(len(SPEEDS))]
        verb = VERBS[rng.integers(len(VERBS))]
        start = rng.uniform(-0.5, 0.5, size=2)
        velocity = np.asarray(DIRECTIONS[direction]) * SPEEDS[speed]
        # Positions along the whole episode, computed once in float64 on the host and never sent to a device.
        times = np.arange(self.episode_length + self.horizon, dtype=np.float64)
        path = start[None, :] + np.outer(times, velocity)
        return {
            "instruction": f"{verb} the {color} block {direction} {speed}",
            "rgb": COLORS[color],
            "path": path,
            "velocity": velocity,
            "grip": 1.0 if verb == "pick" else -1.0,
        }

    def __getitem__(self, index: int) -> dict:
        episode_index, step = divmod(index, self.episode_length)
        ep = self.episode(episode_index)
        rng = np.random.default_rng([self.seed, episode_index, step, 1])
        position = ep["path"][step]

        images = {}
        for name in self.camera_names:
            # The wrist camera looks at the block from the gripper: the block appears at the origin offset.
            center = position if name == "front" else position - ep["path"][0]
            images[name] = torch.from_numpy(render_camera(rng, center, ep["rgb"], self.image_size))

        ids, lang_len = self.tokenizer.encode(ep["instruction"])
        proprio = np.concatenate([position, ep["velocity"], [ep["grip"], step / self.episode_length]]).astype(np.float32)

        valid = min(self.horizon, self.episode_length - step)
        actions = np.zeros((self.horizon, self.action_dim), dtype=np.float32)
        actions[:valid, :2] = ep["velocity"] * 10.0 + rng.normal(0.0, 0.02, size=(valid, 2))
        actions[:valid, 2] = np.linspace(0.0, 0.1, valid)
        actions[:valid, 3] = ep["grip"]

        return {
            "images": images,
            "input_ids": torch.tensor(ids, dtype=torch.long),
            "lang_len": torch.tensor(lang_len, dtype=torch.long),
            "state": torch.from_numpy(proprio),
            "actions": torch.from_numpy(actions),
            "action_len": torch.tensor(valid, dtype=torch.long),
        }


def compute_state_stats(dataset: SyntheticEpisodeDataset, num_samples: int = 256) -> dict:
    """Mean and std of the proprioceptive state over a sample of steps (accumulated in float64 on the host, returned as float32)."""
    rng = np.random.default_rng(dataset.seed)
    picks = rng.choice(len(dataset), size=min(num_samples, len(dataset)), replace=False)
    states = np.stack([dataset[int(i)]["state"].numpy() for i in picks])
    mean = states.mean(axis=0, dtype=np.float64)
    std = states.std(axis=0, dtype=np.float64) + 1e-6
    return {"mean": mean.astype(np.float32), "std": std.astype(np.float32)}


def build_dataloader(cfg: dict, tokenizer: InstructionTokenizer, train: bool = True) -> DataLoader:
    data_cfg = cfg["data"]
    dataset = SyntheticEpisodeDataset(
        num_episodes=data_cfg["num_episodes"] if train else data_cfg["num_eval_episodes"],
        episode_length=data_cfg["episode_length"],
        horizon=cfg["model"]["horizon"],
        image_size=data_cfg["image_size"],
        camera_names=data_cfg["camera_names"],
        tokenizer=tokenizer,
        seed=cfg["seed"] if train else cfg["seed"] + 1,
    )
    sampler = DistributedSampler(dataset, shuffle=train) if dist.is_available() and dist.is_initialized() else None
    return DataLoader(
        dataset,
        batch_size=cfg["train"]["batch_size"],
        shuffle=train and sampler is None,
        sampler=sampler,
        num_workers=data_cfg["num_workers"],
        pin_memory=data_cfg["pin_memory"],
        drop_last=train,
        persistent_workers=data_cfg["num_workers"] > 0,
    )
