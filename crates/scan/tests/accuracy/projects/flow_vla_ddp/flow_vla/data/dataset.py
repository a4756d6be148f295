"""LIBERO episodes as (images, language, state, action chunk) samples."""

import json
import pathlib
from typing import Dict, List

import numpy as np
import torch
from torch.utils.data import Dataset


class LiberoDataset(Dataset):
    def __init__(self, root: str, chunk_size: int) -> None:
        self.root = pathlib.Path(root)
        self.chunk_size = chunk_size
        with open(self.root / "meta" / "episodes.json") as f:
            self.episodes = json.load(f)
        stats = np.load(self.root / "meta" / "stats.npz")
        self.state_mean = torch.tensor(stats["state_mean"], dtype=torch.float32)
        self.state_std = torch.tensor(stats["state_std"], dtype=torch.float32)
        self.action_mean = torch.from_numpy(np.asarray(stats["action_mean"], dtype=np.float64))
        self.action_std = torch.from_numpy(stats["action_std"].astype(np.float32))
        self.index = [(e, t) for e, ep in enumerate(self.episodes) for t in range(ep["length"])]

    def __len__(self) -> int:
        return len(self.index)

    def _load(self, episode: int) -> Dict[str, np.ndarray]:
        return dict(np.load(self.root / "data" / f"episode_{episode:06d}.npz"))

    def __getitem__(self, idx: int) -> Dict[str, torch.Tensor]:
        episode, t = self.index[idx]
        data = self._load(episode)
        end = min(t + self.chunk_size, len(data["action"]))
        chunk = np.zeros((self.chunk_size, data["action"].shape[-1]), dtype=np.float32)
        chunk[: end - t] = data["action"][t:end]
        state = (torch.from_numpy(data["state"][t]).float() - self.state_mean) / self.state_std
        images = [torch.from_numpy(data[key][t]).permute(2, 0, 1).float() / 255.0 for key in ("agentview", "wrist")]
        return {
            "images": images,
            "image_masks": [torch.ones((), dtype=torch.bool) for _ in images],
            "state": state,
            "action": (torch.from_numpy(chunk) - self.action_mean.float()) / self.action_std,
            "action_len": torch.tensor(end - t),
            "lang_tokens": torch.from_numpy(data["lang_tokens"]).long(),
            "lang_masks": torch.from_numpy(data["lang_mask"]).bool(),
        }


def collate_fn(samples: List[Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
    batch = {}
    for key in samples[0]:
        if key in ("images", "image_masks"):
            batch[key] = [torch.stack([s[key][i] for s in samples]) for i in range(len(samples[0][key]))]
        else:
            batch[key] = torch.stack([s[key] for s in samples])
    return batch
