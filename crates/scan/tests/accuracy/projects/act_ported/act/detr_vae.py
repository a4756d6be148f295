"""DETR-style conditional VAE: a CVAE encoder over the action chunk, a transformer decoder over images and joints."""

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

try:
    from flash_attn import flash_attn_func
except ImportError:
    flash_attn_func = None


def reparametrize(mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    std = logvar.div(2).exp()
    eps = torch.randn_like(std)
    return mu + std * eps


def get_sinusoid_encoding_table(n_position: int, d_hid: int) -> torch.Tensor:
    def get_position_angle_vec(position):
        return [position / np.power(10000, 2 * (hid_j // 2) / d_hid) for hid_j in range(d_hid)]

    sinusoid_table = np.array([get_position_angle_vec(pos_i) for pos_i in range(n_position)])
    sinusoid_table[:, 0::2] = np.sin(sinusoid_table[:, 0::2])
    sinusoid_table[:, 1::2] = np.cos(sinusoid_table[:, 1::2])
    return torch.FloatTensor(sinusoid_table).unsqueeze(0)


class SelfAttentionLayer(nn.Module):
    def __init__(self, d_model: int, nhead: int, dim_feedforward: int) -> None:
        super().__init__()
        self.nhead = nhead
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, dim_feedforward), nn.ReLU(), nn.Linear(dim_feedforward, d_model))
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor = None) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.nhead, d // self.nhead).permute(2, 0, 3, 1, 4)
        attn_mask = None
        if key_padding_mask is not None:
            attn_mask = (~key_padding_mask)[:, None, None, :].expand(b, self.nhead, s, s)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        x = x + self.out(out.transpose(1, 2).reshape(b, s, d))
        return x + self.ff(self.norm2(x))


class DETRVAE(nn.Module):
    def __init__(self, backbones: nn.ModuleList, state_dim: int, num_queries: int, camera_names: list,
                 hidden_dim: int = 512, nheads: int = 8, enc_layers: int = 4, dec_layers: int = 7,
                 dim_feedforward: int = 3200) -> None:
        super().__init__()
        self.num_queries = num_queries
        self.camera_names = camera_names
        self.backbones = backbones
        self.hidden_dim = hidden_dim
        self.latent_dim = 32
        self.action_head = nn.Linear(hidden_dim, state_dim)
        self.is_pad_head = nn.Linear(hidden_dim, 1)
        self.query_embed = nn.Embedding(num_queries, hidden_dim)
        self.input_proj = nn.Conv2d(512, hidden_dim, kernel_size=1)
        self.input_proj_robot_state = nn.Linear(state_dim, hidden_dim)
        self.cls_embed = nn.Embedding(1, hidden_dim)
        self.encoder_action_proj = nn.Linear(state_dim, hidden_dim)
        self.encoder_joint_proj = nn.Linear(state_dim, hidden_dim)
        self.latent_proj = nn.Linear(hidden_dim, self.latent_dim * 2)
        self.register_buffer("pos_table", get_sinusoid_encoding_table(1 + 1 + num_queries, hidden_dim))
        self.latent_out_proj = nn.Linear(self.latent_dim, hidden_dim)
        self.encoder = nn.ModuleList(SelfAttentionLayer(hidden_dim, nheads, dim_feedforward) for _ in range(enc_layers))
        self.decoder = nn.ModuleList(SelfAttentionLayer(hidden_dim, nheads, dim_feedforward) for _ in range(dec_layers))

    def encode_latent(self, qpos: torch.Tensor, actions: torch.Tensor, is_pad: torch.Tensor):
        bs = qpos.shape[0]
        action_embed = self.encoder_action_proj(actions)
        qpos_embed = self.encoder_joint_proj(qpos)[:, None]
        cls_embed = self.cls_embed.weight[None].repeat(bs, 1, 1)
        encoder_input = torch.cat([cls_embed, qpos_embed, action_embed], dim=1) + self.pos_table
        cls_joint_is_pad = torch.full((bs, 2), False, device=qpos.device)
        is_pad = torch.cat([cls_joint_is_pad, is_pad], dim=1)
        x = encoder_input
        for layer in self.encoder:
            x = layer(x, key_padding_mask=is_pad)
        latent_info = self.latent_proj(x[:, 0])
        mu = latent_info[:, : self.latent_dim]
        logvar = latent_info[:, self.latent_dim :]
        return mu, logvar

    def forward(self, qpos: torch.Tensor, image: torch.Tensor, actions=None, is_pad=None):
        bs = qpos.shape[0]
        if actions is not None:
            mu, logvar = self.encode_latent(qpos, actions, is_pad)
            latent_sample = reparametrize(mu, logvar)
        else:
            mu = logvar = None
            latent_sample = torch.zeros([bs, self.latent_dim], dtype=torch.float32).to(qpos.device)
        latent_input = self.latent_out_proj(latent_sample)
        all_cam_features = []
        for cam_id, cam_name in enumerate(self.camera_names):
            features = self.backbones[cam_id](image[:, cam_id])
            all_cam_features.append(self.input_proj(features).flatten(2).transpose(1, 2))
        src = torch.cat(all_cam_features, dim=1)
        proprio = self.input_proj_robot_state(qpos)[:, None]
        x = torch.cat([latent_input[:, None], proprio, src, self.query_embed.weight[None].expand(bs, -1, -1)], dim=1)
        for layer in self.decoder:
            x = layer(x)
        hs = x[:, -self.num_queries :]
        return self.action_head(hs), self.is_pad_head(hs), [mu, logvar]
