"""Train TinyVLA with hydra overrides.

Examples:
    python train_hydra.py
    python train_hydra.py train.max_steps=100 train.batch_size=64
    python train_hydra.py --config-name debug
    python train_hydra.py device=cpu train.max_steps=3
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import torch_npu  # noqa: F401  registers the "npu" device
    from torch_npu.contrib import transfer_to_npu  # noqa: F401  remaps leftover cuda calls to npu
except ImportError:  # plain CPU torch: no NPU here, the CPU is used
    torch_npu = None

_NPU_PATCHER = None
if torch_npu is not None:
    sys.path.insert(0, str(Path(__file__).resolve().parent / "migrate_to_cloudrobo"))
    from runtime_patches import build_vla_patcher

    _NPU_PATCHER = build_vla_patcher()
    _NPU_PATCHER.apply()

import hydra  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from tiny_vla.trainer import train  # noqa: E402


@hydra.main(config_path="configs", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float:
    print(OmegaConf.to_yaml(cfg))
    return train(OmegaConf.to_container(cfg, resolve=True))


if __name__ == "__main__":
    main()
