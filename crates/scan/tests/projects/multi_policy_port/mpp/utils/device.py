"""Device helpers."""

import torch


def validate_device(device):
    if device not in ("cuda", "cpu", "mps"):
        raise ValueError(f"unknown device {device!r}")
    return device


def is_device_available(device):
    if device == "cuda":
        return torch.cuda.is_available()
    elif device == "mps":
        return torch.backends.mps.is_available()
    elif device == "cpu":
        return True
    else:
        raise ValueError(f"unknown device {device!r}")
