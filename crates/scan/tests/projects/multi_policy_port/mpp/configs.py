"""Training configuration."""

import enum
from dataclasses import dataclass
from typing import Literal

from mpp.utils.device import is_device_available, validate_device


class Accelerator(str, enum.Enum):
    CUDA = "cuda"
    CPU = "cpu"
    MPS = "mps"


@dataclass
class TrainConfig:
    policy: str = "act"
    device: Literal["cuda", "cpu", "mps"] = "cuda"

    def __post_init__(self):
        validate_device(self.device)
        if not is_device_available(self.device):
            raise RuntimeError(f"device {self.device} is not available")
        self.accelerator = Accelerator(self.device)
