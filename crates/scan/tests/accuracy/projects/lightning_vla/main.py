"""Fine-tune a vision-language-action model with PyTorch Lightning.

    python main.py --config configs/finetune.yaml --gpus 8
"""

import argparse
import os

import pytorch_lightning as pl
import torch
import yaml
from pytorch_lightning.callbacks import LearningRateMonitor, ModelCheckpoint
from pytorch_lightning.loggers import WandbLogger

from vla.data.rlds_dataset import build_dataloaders
from vla.lit_module import VLALitModule
from vla.utils.torch_utils import check_bf16_support, set_global_seed


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", default="configs/finetune.yaml")
    parser.add_argument("--gpus", type=int, default=torch.cuda.device_count())
    parser.add_argument("--resume", default=None)
    parser.add_argument("--seed", type=int, default=7)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    with open(args.config) as f:
        cfg = yaml.safe_load(f)
    set_global_seed(args.seed)
    precision = "bf16" if check_bf16_support() else 16
    module = VLALitModule(cfg["model"], cfg["optim"])
    train_loader, val_loader = build_dataloaders(cfg["data"], module.action_tokenizer)
    trainer = pl.Trainer(
        gpus=args.gpus,
        accelerator="gpu",
        strategy="ddp",
        precision=precision,
        amp_backend="apex",
        max_steps=cfg["optim"]["max_steps"],
        resume_from_checkpoint=args.resume,
        logger=WandbLogger(project=cfg.get("project", "vla-finetune")),
        callbacks=[ModelCheckpoint(every_n_train_steps=5000), LearningRateMonitor()],
    )
    trainer.fit(module, train_loader, val_loader)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
