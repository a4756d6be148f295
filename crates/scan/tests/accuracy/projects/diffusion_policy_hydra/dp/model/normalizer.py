"""Per-key affine normalizer fitted on the dataset, stored as module buffers."""

from typing import Dict

import numpy as np
import torch
import torch.nn as nn


class SingleFieldNormalizer(nn.Module):
    def __init__(self, scale: torch.Tensor, offset: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("scale", scale)
        self.register_buffer("offset", offset)

    @classmethod
    def fit(cls, data, output_max: float = 1.0, output_min: float = -1.0, eps: float = 1e-7):
        if isinstance(data, np.ndarray):
            data = torch.from_numpy(data)
        data = data.reshape(-1, data.shape[-1]).to(torch.float64)
        input_min = data.min(dim=0).values
        input_max = data.max(dim=0).values
        input_range = input_max - input_min
        ignore_dim = input_range < eps
        input_range[ignore_dim] = output_max - output_min
        scale = (output_max - output_min) / input_range
        offset = output_min - scale * input_min
        offset[ignore_dim] = (output_max + output_min) / 2 - input_min[ignore_dim]
        return cls(scale.float(), offset.float())

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.offset

    def unnormalize(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.offset) / self.scale


class LinearNormalizer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.params = nn.ModuleDict()

    def fit(self, data: Dict[str, np.ndarray]) -> None:
        for key, value in data.items():
            self.params[key] = SingleFieldNormalizer.fit(value)

    def normalize(self, batch: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        return {key: self.params[key].normalize(value) for key, value in batch.items()}

    def __getitem__(self, key: str) -> SingleFieldNormalizer:
        return self.params[key]
