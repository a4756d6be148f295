"""Diffusion policy over low-dimensional observations (DDPM training, DDIM-style sampling)."""

from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from diffusers.schedulers.scheduling_ddpm import DDPMScheduler

from dp.model.normalizer import LinearNormalizer
from dp.model.obs_encoder import LowdimObsEncoder
from dp.model.unet1d import ConditionalUnet1D


class DiffusionUnetLowdimPolicy(nn.Module):
    def __init__(
        self,
        model: ConditionalUnet1D,
        noise_scheduler: DDPMScheduler,
        obs_encoder: LowdimObsEncoder,
        horizon: int,
        obs_dim: int,
        action_dim: int,
        n_action_steps: int,
        n_obs_steps: int,
        num_inference_steps: Optional[int] = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.noise_scheduler = noise_scheduler
        self.obs_encoder = obs_encoder
        self.normalizer = LinearNormalizer()
        self.horizon = horizon
        self.obs_dim = obs_dim
        self.action_dim = action_dim
        self.n_action_steps = n_action_steps
        self.n_obs_steps = n_obs_steps
        self.num_inference_steps = num_inference_steps or noise_scheduler.config.num_train_timesteps

    @classmethod
    def from_config(cls, cfg: dict) -> "DiffusionUnetLowdimPolicy":
        model = ConditionalUnet1D(**cfg["model"])
        scheduler = DDPMScheduler(**cfg["noise_scheduler"])
        encoder = LowdimObsEncoder(cfg["obs_dim"], cfg["n_obs_steps"])
        return cls(model, scheduler, encoder, cfg["horizon"], cfg["obs_dim"], cfg["action_dim"],
                   cfg["n_action_steps"], cfg["n_obs_steps"], cfg.get("num_inference_steps"))

    def conditional_sample(
        self, condition_data: torch.Tensor, condition_mask: torch.Tensor, global_cond: torch.Tensor,
        generator: Optional[torch.Generator] = None,
    ) -> torch.Tensor:
        trajectory = torch.randn(
            size=condition_data.shape, dtype=condition_data.dtype, device=condition_data.device, generator=generator
        )
        self.noise_scheduler.set_timesteps(self.num_inference_steps)
        for t in self.noise_scheduler.timesteps:
            trajectory[condition_mask] = condition_data[condition_mask]
            model_output = self.model(trajectory, t, global_cond=global_cond)
            trajectory = self.noise_scheduler.step(model_output, t, trajectory, generator=generator).prev_sample
        trajectory[condition_mask] = condition_data[condition_mask]
        return trajectory

    def predict_action(self, obs_dict: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        nobs = self.normalizer["obs"].normalize(obs_dict["obs"])
        batch_size, _, _ = nobs.shape
        global_cond = self.obs_encoder(nobs)
        shape = (batch_size, self.horizon, self.action_dim)
        cond_data = torch.zeros(size=shape, device=nobs.device, dtype=nobs.dtype)
        cond_mask = torch.zeros_like(cond_data, dtype=torch.bool)
        nsample = self.conditional_sample(cond_data, cond_mask, global_cond)
        action_pred = self.normalizer["action"].unnormalize(nsample)
        start = self.n_obs_steps - 1
        action = action_pred[:, start : start + self.n_action_steps]
        return {"action": action, "action_pred": action_pred}

    def compute_loss(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        nbatch = self.normalizer.normalize(batch)
        obs = nbatch["obs"]
        action = nbatch["action"]
        bsz = action.shape[0]
        global_cond = self.obs_encoder(obs)
        trajectory = action
        condition_mask = torch.zeros(trajectory.shape, dtype=torch.bool)
        noise = torch.randn(trajectory.shape, device=trajectory.device)
        timesteps = torch.randint(
            0, self.noise_scheduler.config.num_train_timesteps, (bsz,), device=trajectory.device
        ).long()
        noisy_trajectory = self.noise_scheduler.add_noise(trajectory, noise, timesteps)
        loss_mask = ~condition_mask
        noisy_trajectory[condition_mask] = trajectory[condition_mask]
        pred = self.model(noisy_trajectory, timesteps, global_cond=global_cond)
        target = noise if self.noise_scheduler.config.prediction_type == "epsilon" else trajectory
        loss = F.mse_loss(pred, target, reduction="none")
        loss = loss * loss_mask.type(loss.dtype)
        per_sample = []
        for i in range(bsz):
            valid = batch["valid_len"][i]
            per_sample.append(loss[i, :valid].mean())
        return torch.stack(per_sample).mean()
