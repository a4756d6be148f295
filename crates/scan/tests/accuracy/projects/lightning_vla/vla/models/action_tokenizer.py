"""Discretizes continuous actions into the least-used tokens of the language model's vocabulary."""

from typing import List, Union

import numpy as np


class ActionTokenizer:
    def __init__(self, vocab_size: int, bins: int = 256, min_action: float = -1.0, max_action: float = 1.0) -> None:
        self.vocab_size = vocab_size
        self.n_bins = bins
        self.min_action = min_action
        self.max_action = max_action
        self.bins = np.linspace(min_action, max_action, self.n_bins)
        self.bin_centers = (self.bins[:-1] + self.bins[1:]) / 2.0
        self.action_token_begin_idx = int(self.vocab_size - (self.n_bins + 1))

    def __call__(self, action: np.ndarray) -> np.ndarray:
        action = np.clip(action, a_min=float(self.min_action), a_max=float(self.max_action))
        discretized = np.digitize(action, self.bins)
        return self.vocab_size - discretized

    def decode_token_ids_to_actions(self, action_token_ids: Union[np.ndarray, List[int]]) -> np.ndarray:
        discretized = self.vocab_size - np.asarray(action_token_ids)
        discretized = np.clip(discretized - 1, a_min=0, a_max=self.bin_centers.shape[0] - 1)
        return self.bin_centers[discretized]
