"""Process-group setup, device selection and seeding for single- and multi-NPU runs (torchrun)."""

from __future__ import annotations

import os
import random
import sys

import numpy as np
import torch
import torch.distributed as dist


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """`auto` is the NPU when torch_npu is loaded and sees one, else the CPU; accelerators get the local rank's index."""
    if name == "auto":
        npu = getattr(torch, "npu", None)
        name = "npu" if npu is not None and npu.is_available() else "cpu"
        if name == "cpu":
            print("device auto: no NPU visible (torch_npu not importable, or no device); using the CPU", file=sys.stderr)
    device = torch.device(name)
    if device.type != "cpu" and device.index is None:
        device = torch.device(device.type, local_rank)
    return device


def init_distributed(backend: str = "hccl") -> tuple[int, int, int]:
    """(rank, local_rank, world_size); joins the process group when launched by torchrun."""
    if "RANK" not in os.environ:
        return 0, 0, 1
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group(backend=backend)
    if dist.get_backend() == "hccl":
        torch.npu.set_device(local_rank)
    return rank, local_rank, world_size


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def batch_to_device(batch, device: torch.device):
    """Moves every tensor of a (nested) batch to `device`."""
    if isinstance(batch, dict):
        return {key: batch_to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=device.type != "cpu")
    return batch

