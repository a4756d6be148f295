"""Flow-matching VLA: a vision-language prefix and an action expert trained with conditional flow matching."""

import math
from typing import Dict, List

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from flow_vla.model.attention import PrefixAttention
from flow_vla.utils.device import get_safe_dtype


def create_sinusoidal_pos_embedding(
    time: torch.Tensor, dimension: int, min_period: float, max_period: float, device: torch.device
) -> torch.Tensor:
    if dimension % 2 != 0:
        raise ValueError(f"dimension ({dimension}) must be divisible by 2")
    dtype = get_safe_dtype(torch.float64, device.type)
    fraction = torch.linspace(0.0, 1.0, dimension // 2, dtype=dtype, device=device)
    period = min_period * (max_period / min_period) ** fraction
    scaling_factor = 1.0 / period * 2 * math.pi
    sin_input = scaling_factor[None, :] * time[:, None]
    return torch.cat([torch.sin(sin_input), torch.cos(sin_input)], dim=1)


def sample_beta(alpha: float, beta: float, bsize: int, device: torch.device) -> torch.Tensor:
    gamma1 = torch.empty((bsize,), device=device).uniform_(0, 1).pow(1 / alpha)
    gamma2 = torch.empty((bsize,), device=device).uniform_(0, 1).pow(1 / beta)
    return gamma1 / (gamma1 + gamma2)


def make_att_2d_masks(pad_masks: torch.Tensor, att_masks: torch.Tensor) -> torch.Tensor:
    cumsum = torch.cumsum(att_masks, dim=1)
    att_2d_masks = cumsum[:, None, :] <= cumsum[:, :, None]
    pad_2d_masks = pad_masks[:, None, :] * pad_masks[:, :, None]
    return att_2d_masks & pad_2d_masks


class FlowVLA(nn.Module):
    def __init__(self, cfg: Dict) -> None:
        super().__init__()
        width = cfg["proj_width"]
        self.chunk_size = cfg["chunk_size"]
        self.action_dim = cfg["action_dim"]
        self.num_steps = cfg["num_steps"]
        self.image_encoder = nn.Conv2d(3, width, kernel_size=14, stride=14)
        self.lang_embed = nn.Embedding(257_152, width)
        self.state_proj = nn.Linear(cfg["state_dim"], width)
        self.action_in_proj = nn.Linear(self.action_dim, width)
        self.action_time_mlp_in = nn.Linear(2 * width, width)
        self.action_time_mlp_out = nn.Linear(width, width)
        self.layers = nn.ModuleList([PrefixAttention(width, 8, 1) for _ in range(6)])
        self.action_out_proj = nn.Linear(width, self.action_dim)
        self.width = width

    def sample_noise(self, shape, device: torch.device) -> torch.Tensor:
        return torch.normal(mean=0.0, std=1.0, size=shape, dtype=torch.float32, device=device)

    def sample_time(self, bsize: int, device: torch.device) -> torch.Tensor:
        time_beta = sample_beta(1.5, 1.0, bsize, device)
        return time_beta * 0.999 + 0.001

    def sample_time_reference(self, bsize: int, device: torch.device) -> torch.Tensor:
        dist = torch.distributions.Beta(torch.tensor([1.5]), torch.tensor([1.0]))
        return (dist.sample((bsize,)).squeeze(-1) * 0.999 + 0.001).to(device)

    def embed_prefix(self, images: List[torch.Tensor], img_masks: List[torch.Tensor], lang_tokens, lang_masks):
        embs = []
        pad_masks = []
        att_masks = []
        for img, img_mask in zip(images, img_masks):
            img_emb = self.image_encoder(img).flatten(2).transpose(1, 2)
            bsize, num_img_embs = img_emb.shape[:2]
            embs.append(img_emb)
            pad_masks.append(img_mask[:, None].expand(bsize, num_img_embs))
            att_masks += [0] * num_img_embs
        lang_emb = self.lang_embed(lang_tokens) * math.sqrt(self.width)
        embs.append(lang_emb)
        pad_masks.append(lang_masks)
        att_masks += [0] * lang_emb.shape[1]
        embs = torch.cat(embs, dim=1)
        pad_masks = torch.cat(pad_masks, dim=1)
        att_masks = torch.tensor(att_masks, dtype=torch.bool, device=pad_masks.device)
        att_masks = att_masks[None, :].expand(pad_masks.shape[0], len(att_masks))
        return embs, pad_masks, att_masks

    def embed_suffix(self, state: torch.Tensor, noisy_actions: torch.Tensor, timestep: torch.Tensor):
        state_emb = self.state_proj(state)[:, None]
        time_emb = create_sinusoidal_pos_embedding(timestep, self.width, 4e-3, 4.0, device=state.device)
        time_emb = time_emb.type(dtype=state_emb.dtype)
        action_emb = self.action_in_proj(noisy_actions)
        time_emb = time_emb[:, None, :].expand_as(action_emb)
        action_time_emb = torch.cat([action_emb, time_emb], dim=2)
        action_time_emb = self.action_time_mlp_out(F.silu(self.action_time_mlp_in(action_time_emb)))
        embs = torch.cat([state_emb, action_time_emb], dim=1)
        bsize = embs.shape[0]
        pad_masks = torch.ones(bsize, embs.shape[1], dtype=torch.bool, device=embs.device)
        att_masks = torch.ones(embs.shape[1], dtype=embs.dtype)
        att_masks = att_masks[None, :].expand(bsize, len(att_masks))
        return embs, pad_masks, att_masks

    def run_layers(self, embs: torch.Tensor, pad_masks: torch.Tensor) -> torch.Tensor:
        positions = torch.cumsum(pad_masks.int(), dim=1) - 1
        x = embs
        for layer in self.layers:
            x = layer(x, positions, pad_masks)
        return x

    def forward(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        actions = batch["action"]
        noise = torch.randn(actions.shape, dtype=actions.dtype)
        time = self.sample_time(actions.shape[0], actions.device)
        time_expanded = time[:, None, None]
        x_t = time_expanded * noise + (1 - time_expanded) * actions
        u_t = noise - actions
        prefix_embs, prefix_pad, prefix_att = self.embed_prefix(
            batch["images"], batch["image_masks"], batch["lang_tokens"], batch["lang_masks"]
        )
        suffix_embs, suffix_pad, suffix_att = self.embed_suffix(batch["state"], x_t, time)
        embs = torch.cat([prefix_embs, suffix_embs], dim=1)
        pad_masks = torch.cat([prefix_pad, suffix_pad], dim=1)
        hidden = self.run_layers(embs, pad_masks)
        v_t = self.action_out_proj(hidden[:, -self.chunk_size :])
        losses = F.mse_loss(u_t, v_t, reduction="none")
        lengths = batch["action_len"].tolist()
        pad = np.array([[t >= n for t in range(self.chunk_size)] for n in lengths])
        action_is_pad = torch.from_numpy(pad).to(actions.device)
        losses = losses * (~action_is_pad)[..., None]
        return losses.mean()

    @torch.no_grad()
    def sample_actions(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        state = batch["state"]
        bsize = state.shape[0]
        device = state.device
        noise = self.sample_noise((bsize, self.chunk_size, self.action_dim), device)
        prefix_embs, prefix_pad, _ = self.embed_prefix(
            batch["images"], batch["image_masks"], batch["lang_tokens"], batch["lang_masks"]
        )
        dt = -1.0 / self.num_steps
        dt = torch.tensor(dt, dtype=torch.float32, device=device)
        x_t = noise
        time = torch.tensor(1.0, dtype=torch.float32, device=device)
        while time >= -dt / 2:
            expanded_time = time.expand(bsize)
            suffix_embs, suffix_pad, _ = self.embed_suffix(state, x_t, expanded_time)
            hidden = self.run_layers(torch.cat([prefix_embs, suffix_embs], 1), torch.cat([prefix_pad, suffix_pad], 1))
            v_t = self.action_out_proj(hidden[:, -self.chunk_size :])
            x_t = x_t + dt * v_t
            time = time + dt
        return x_t
