"""The training loop: data, optimizer, EMA, checkpoints and logging."""

import pathlib
import random

import hydra
import numpy as np
import torch
import tqdm
import wandb
from diffusers.optimization import get_scheduler
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader

from dp.common.pytorch_util import autocast_dtype, dict_apply, optimizer_to
from dp.dataset.pusht_dataset import PushTLowdimDataset
from dp.model.ema import EMAModel
from dp.policy.diffusion_policy import DiffusionUnetLowdimPolicy


class TrainDiffusionWorkspace:
    def __init__(self, cfg: DictConfig, output_dir: str) -> None:
        self.cfg = cfg
        self.output_dir = pathlib.Path(output_dir)
        seed = cfg.training.seed
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)
        policy_cfg = OmegaConf.to_container(cfg.policy, resolve=True)
        policy_cfg.update(obs_dim=cfg.obs_dim, action_dim=cfg.action_dim)
        self.model = DiffusionUnetLowdimPolicy.from_config(policy_cfg)
        self.ema = EMAModel(self.model) if cfg.training.use_ema else None
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=cfg.training.lr, weight_decay=cfg.training.weight_decay
        )
        self.global_step = 0
        self.epoch = 0

    def save_checkpoint(self, path: pathlib.Path) -> None:
        payload = {
            "cfg": OmegaConf.to_container(self.cfg),
            "state_dicts": {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()},
            "global_step": self.global_step,
        }
        if self.ema is not None:
            payload["state_dicts"]["ema_model"] = self.ema.averaged_model.state_dict()
        torch.save(payload, path)

    def load_checkpoint(self, path: pathlib.Path) -> None:
        payload = torch.load(path, map_location="cpu")
        self.model.load_state_dict(payload["state_dicts"]["model"])
        self.optimizer.load_state_dict(payload["state_dicts"]["optimizer"])
        self.global_step = payload["global_step"]

    def run(self) -> None:
        cfg = self.cfg
        dataset = PushTLowdimDataset(**cfg.dataset)
        loader = DataLoader(dataset, **cfg.dataloader)
        self.model.normalizer.fit(dataset.get_normalizer_data())
        lr_scheduler = get_scheduler(
            "cosine", optimizer=self.optimizer, num_warmup_steps=cfg.training.lr_warmup_steps,
            num_training_steps=len(loader) * cfg.training.num_epochs,
        )
        device = torch.device(cfg.training.device)
        self.model.to(device)
        if self.ema is not None:
            self.ema.averaged_model.to(device)
        optimizer_to(self.optimizer, device)
        scaler = torch.cuda.amp.GradScaler(enabled=cfg.training.use_amp)
        run = wandb.init(dir=str(self.output_dir), config=OmegaConf.to_container(cfg), **cfg.logging)
        for _ in range(cfg.training.num_epochs):
            train_losses = []
            with tqdm.tqdm(loader, desc=f"epoch {self.epoch}", leave=False) as tepoch:
                for batch in tepoch:
                    batch = dict_apply(batch, lambda x: x.to(device, non_blocking=True))
                    with torch.autocast("cuda", dtype=autocast_dtype(device), enabled=cfg.training.use_amp):
                        loss = self.model.compute_loss(batch)
                    scaler.scale(loss / cfg.training.gradient_accumulate_every).backward()
                    if self.global_step % cfg.training.gradient_accumulate_every == 0:
                        scaler.step(self.optimizer)
                        scaler.update()
                        self.optimizer.zero_grad()
                        lr_scheduler.step()
                    if self.ema is not None:
                        self.ema.step(self.model)
                    loss_cpu = loss.item()
                    tepoch.set_postfix(loss=loss_cpu, refresh=False)
                    train_losses.append(loss_cpu)
                    run.log({"train_loss": loss_cpu, "lr": lr_scheduler.get_last_lr()[0]}, step=self.global_step)
                    self.global_step += 1
            run.log({"epoch_loss": float(np.mean(train_losses))}, step=self.global_step)
            if self.epoch % cfg.training.checkpoint_every == 0:
                self.save_checkpoint(self.output_dir / "latest.ckpt")
            self.epoch += 1
        torch.cuda.empty_cache()


@hydra.main(version_base=None, config_path="../../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    TrainDiffusionWorkspace(cfg, output_dir=cfg.output_dir).run()
