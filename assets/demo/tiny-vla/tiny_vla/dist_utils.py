"""Process-group setup, device selection and seeding for single- and multi-GPU runs (torchrun)."""

from __future__ import annotations

import os
import random

import numpy as np
import torch
import torch.distributed as dist


def get_device() -> torch.device:
    """The best device this machine has."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def init_distributed(backend: str = "nccl") -> tuple[int, int, int]:
    """(rank, local_rank, world_size); joins the process group when launched by torchrun."""
    if "RANK" not in os.environ:
        return 0, 0, 1
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group(backend=backend)
    if dist.get_backend() == "nccl":
        torch.cuda.set_device(local_rank)
    return rank, local_rank, world_size


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def batch_to_device(batch, device: torch.device):
    """Moves every tensor of a (nested) batch to `device`."""
    if isinstance(batch, dict):
        return {key: batch_to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=device.type != "cpu")
    return batch


def cuda_memory_gb() -> float:
    return torch.cuda.max_memory_allocated() / 2**30
