"""TinyVLA: camera images + instruction + proprioception -> a chunk of future actions."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .action_head import FlowMatchingHead
from .backbone import TransformerBackbone
from .losses import flow_matching_targets, masked_mse
from .vision import VisionEncoder

IMAGE, LANGUAGE, STATE, ACTION = range(4)


class TinyVLAPolicy(nn.Module):
    def __init__(
        self,
        vocab_size: int,
        pad_id: int,
        camera_names: list[str],
        image_size: int,
        state_dim: int,
        action_dim: int,
        horizon: int,
        dim: int = 128,
        depth: int = 4,
        num_heads: int = 4,
        vision_depth: int = 1,
        patch_size: int = 8,
        patch_dropout: float = 0.0,
        num_inference_steps: int = 10,
        attn_implementation: str = "sdpa",
        lang_dropout: float = 0.1,
        state_noise: float = 0.01,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.pad_id = pad_id
        self.lang_dropout = lang_dropout
        self.state_noise = state_noise
        self.vision = VisionEncoder(camera_names, image_size, patch_size, dim, vision_depth, num_heads, patch_dropout)
        self.token_embed = nn.Embedding(vocab_size, dim, padding_idx=pad_id)
        self.state_proj = nn.Sequential(nn.Linear(state_dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.type_embed = nn.Embedding(4, dim)
        self.backbone = TransformerBackbone(dim, depth, num_heads, attn_implementation=attn_implementation)
        self.action_head = FlowMatchingHead(action_dim, horizon, dim, num_inference_steps)
        self.register_buffer("state_mean", torch.zeros(state_dim, dtype=torch.float64))
        self.register_buffer("state_std", torch.ones(state_dim, dtype=torch.float64))
        self.target_rng = np.random.default_rng(seed)

    def set_state_stats(self, stats: dict) -> None:
        self.state_mean.copy_(torch.from_numpy(stats["mean"]))
        self.state_std.copy_(torch.from_numpy(stats["std"]))

    def encode(self, batch: dict) -> torch.Tensor:
        """The prefix tokens: image patches, instruction, state."""
        image_tokens = self.vision(batch["images"])
        input_ids = batch["input_ids"]
        if self.training and self.lang_dropout > 0:
            drop = torch.rand(input_ids.shape[0], device=input_ids.device) < self.lang_dropout
            input_ids = torch.where(drop[:, None], torch.full_like(input_ids, self.pad_id), input_ids)
        lang_mask = torch.arange(input_ids.shape[1], device=input_ids.device)[None] < batch["lang_len"][:, None]
        lang_tokens = self.token_embed(input_ids) * lang_mask[..., None]
        state = ((batch["state"] - self.state_mean) / self.state_std).float()
        if self.training and self.state_noise > 0:
            state = state + torch.randn_like(state) * self.state_noise
        state_token = self.state_proj(state)[:, None]
        prefix = torch.cat([image_tokens, lang_tokens, state_token], dim=1)
        modality = torch.full((prefix.shape[1],), IMAGE, dtype=torch.long).to(prefix.device)
        modality[image_tokens.shape[1] :] = LANGUAGE
        modality[-1] = STATE
        return prefix + self.type_embed(modality)[None]

    def velocity(self, prefix: torch.Tensor, noisy_actions: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        action_tokens = self.action_head.embed(noisy_actions, t) + self.type_embed.weight[ACTION]
        hidden = self.backbone(torch.cat([prefix, action_tokens], dim=1))
        return self.action_head.decode(hidden[:, -noisy_actions.shape[1] :])

    def forward(self, batch: dict) -> torch.Tensor:
        return self.compute_loss(batch)

    def compute_loss(self, batch: dict) -> torch.Tensor:
        prefix = self.encode(batch)
        x_t, t, target_velocity = flow_matching_targets(batch["actions"], self.target_rng)
        pred = self.velocity(prefix, x_t, t)
        return masked_mse(pred, target_velocity, batch["action_len"])

    @torch.no_grad()
    def sample_actions(self, batch: dict) -> torch.Tensor:
        prefix = self.encode(batch)
        return self.action_head.sample(lambda x, t: self.velocity(prefix, x, t), batch_size=prefix.shape[0], device=prefix.device)


def build_policy(cfg: dict, vocab_size: int, pad_id: int, **overrides) -> TinyVLAPolicy:
    model_cfg = cfg["model"]
    kwargs = dict(
        vocab_size=vocab_size,
        pad_id=pad_id,
        camera_names=cfg["data"]["camera_names"],
        image_size=cfg["data"]["image_size"],
        state_dim=model_cfg["state_dim"],
        action_dim=model_cfg["action_dim"],
        horizon=model_cfg["horizon"],
        dim=model_cfg["dim"],
        depth=model_cfg["depth"],
        num_heads=model_cfg["num_heads"],
        vision_depth=model_cfg["vision_depth"],
        patch_size=model_cfg["patch_size"],
        patch_dropout=model_cfg["patch_dropout"],
        num_inference_steps=model_cfg["num_inference_steps"],
        attn_implementation=model_cfg["attn_implementation"],
        seed=cfg["seed"],
    )
    kwargs.update(overrides)
    return TinyVLAPolicy(**kwargs)
