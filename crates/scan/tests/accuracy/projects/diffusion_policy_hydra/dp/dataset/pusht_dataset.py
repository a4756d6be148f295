"""PushT low-dim dataset: windows of (obs, action) sampled from a replay buffer."""

from typing import Dict

import numpy as np
import torch
from torch.utils.data import Dataset


def create_indices(episode_ends: np.ndarray, sequence_length: int, pad_before: int = 0, pad_after: int = 0):
    indices = []
    for i in range(len(episode_ends)):
        start_idx = 0 if i == 0 else episode_ends[i - 1]
        end_idx = episode_ends[i]
        episode_length = end_idx - start_idx
        min_start = -pad_before
        max_start = episode_length - sequence_length + pad_after
        for idx in range(min_start, max_start + 1):
            buffer_start_idx = max(idx, 0) + start_idx
            buffer_end_idx = min(idx + sequence_length, episode_length) + start_idx
            start_offset = buffer_start_idx - (idx + start_idx)
            end_offset = (idx + sequence_length + start_idx) - buffer_end_idx
            sample_start_idx = 0 + start_offset
            sample_end_idx = sequence_length - end_offset
            indices.append([buffer_start_idx, buffer_end_idx, sample_start_idx, sample_end_idx])
    return np.array(indices)


class PushTLowdimDataset(Dataset):
    def __init__(self, path: str, horizon: int = 16, pad_before: int = 1, pad_after: int = 7, val_ratio: float = 0.0):
        data = np.load(path)
        self.obs = data["obs"]
        self.action = data["action"]
        self.episode_ends = data["episode_ends"]
        self.horizon = horizon
        self.indices = create_indices(self.episode_ends, horizon, pad_before, pad_after)
        self.val_ratio = val_ratio

    def get_normalizer_data(self) -> Dict[str, np.ndarray]:
        return {"obs": self.obs, "action": self.action}

    def __len__(self) -> int:
        return len(self.indices)

    def _sample(self, array: np.ndarray, idx: int) -> np.ndarray:
        buffer_start, buffer_end, sample_start, sample_end = self.indices[idx]
        sample = array[buffer_start:buffer_end]
        data = np.zeros((self.horizon,) + array.shape[1:], dtype=array.dtype)
        if sample_start > 0:
            data[:sample_start] = sample[0]
        if sample_end < self.horizon:
            data[sample_end:] = sample[-1]
        data[sample_start:sample_end] = sample
        return data

    def __getitem__(self, idx: int) -> Dict[str, torch.Tensor]:
        obs = self._sample(self.obs, idx)
        action = self._sample(self.action, idx)
        valid_len = np.full((), self.horizon - self.indices[idx][2], dtype=np.int64)
        weights = np.ones(self.horizon)
        return {
            "obs": torch.from_numpy(obs).float(),
            "action": torch.from_numpy(action).float(),
            "valid_len": torch.from_numpy(valid_len),
            "weights": torch.from_numpy(weights),
        }
