"""Device selection helpers."""

import logging

import torch


def get_safe_torch_device(try_device: str, log: bool = False) -> torch.device:
    try_device = str(try_device)
    if try_device == "cuda":
        assert torch.cuda.is_available()
        device = torch.device("cuda")
    elif try_device == "mps":
        assert torch.backends.mps.is_available()
        device = torch.device("mps")
    elif try_device == "cpu":
        device = torch.device("cpu")
        if log:
            logging.warning("Using CPU, this will be slow.")
    else:
        device = torch.device(try_device)
        if log:
            logging.warning(f"Using custom {try_device} device.")
    return device


def get_safe_dtype(dtype: torch.dtype, device) -> torch.dtype:
    if isinstance(device, torch.device):
        device = device.type
    if device == "mps" and dtype == torch.float64:
        return torch.float32
    return dtype


def is_amp_available(device: str) -> bool:
    if device in ["cuda", "cpu"]:
        return True
    elif device == "mps":
        return False
    else:
        raise ValueError(f"Unknown device '{device}.")
