"""Train TinyVLA with hydra overrides.

Examples:
    python train_hydra.py
    python train_hydra.py train.max_steps=100 train.batch_size=64
    python train_hydra.py --config-name debug
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig, OmegaConf

from tiny_vla.trainer import train


@hydra.main(config_path="configs", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float:
    print(OmegaConf.to_yaml(cfg))
    return train(OmegaConf.to_container(cfg, resolve=True))


if __name__ == "__main__":
    main()
