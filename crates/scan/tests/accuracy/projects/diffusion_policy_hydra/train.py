"""Train a diffusion policy on PushT-style demonstrations.

Usage:
    python train.py policy=diffusion training.num_epochs=300
"""

import os
import pathlib

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from dp.workspace.train_workspace import TrainDiffusionWorkspace

OmegaConf.register_new_resolver("eval", eval, replace=True)


@hydra.main(version_base=None, config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    OmegaConf.resolve(cfg)
    torch.backends.cudnn.benchmark = cfg.training.cudnn_benchmark
    torch.backends.cuda.matmul.allow_tf32 = True
    output_dir = pathlib.Path(cfg.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    workspace = TrainDiffusionWorkspace(cfg, output_dir=str(output_dir))
    if cfg.training.resume and (output_dir / "latest.ckpt").exists():
        workspace.load_checkpoint(output_dir / "latest.ckpt")
    workspace.run()


if __name__ == "__main__":
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    main()
