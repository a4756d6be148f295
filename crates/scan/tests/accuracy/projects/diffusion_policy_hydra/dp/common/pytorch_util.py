"""Small torch helpers shared by the workspace and the evaluation script."""

from typing import Callable, Dict

import torch


def dict_apply(x: Dict, func: Callable[[torch.Tensor], torch.Tensor]) -> Dict:
    result = {}
    for key, value in x.items():
        if isinstance(value, dict):
            result[key] = dict_apply(value, func)
        else:
            result[key] = func(value)
    return result


def optimizer_to(optimizer: torch.optim.Optimizer, device: torch.device) -> torch.optim.Optimizer:
    for state in optimizer.state.values():
        for k, v in state.items():
            if isinstance(v, torch.Tensor):
                state[k] = v.to(device=device)
    return optimizer


def autocast_dtype(device: torch.device) -> torch.dtype:
    if device.type == "cuda":
        major, _ = torch.cuda.get_device_capability(device)
        return torch.bfloat16 if major >= 8 else torch.float16
    return torch.float32


def pin_memory_enabled(device: torch.device) -> bool:
    return device.type != "cpu"
