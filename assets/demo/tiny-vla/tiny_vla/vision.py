"""A small ViT over the camera images: conv patch embedding plus a few pre-norm blocks."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

try:
    from flash_attn import flash_attn_qkvpacked_func
except ImportError:  # no flash-attn wheel for this machine: every block falls back to SDPA
    flash_attn_qkvpacked_func = None


class ViTBlock(nn.Module):
    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 2.0) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, int(dim * mlp_ratio)), nn.GELU(), nn.Linear(int(dim * mlp_ratio), dim))

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        qkv = self.qkv(x).view(batch, seq, 3, self.num_heads, dim // self.num_heads)
        if flash_attn_qkvpacked_func is not None and qkv.is_cuda and qkv.dtype in (torch.float16, torch.bfloat16):
            out = flash_attn_qkvpacked_func(qkv)
        else:
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2)
        return self.proj(out.reshape(batch, seq, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attend(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionEncoder(nn.Module):
    """Encodes each camera separately (shared weights) and returns all patch tokens, cameras concatenated."""

    def __init__(
        self,
        camera_names: list[str],
        image_size: int,
        patch_size: int,
        dim: int,
        depth: int,
        num_heads: int,
        patch_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.camera_names = list(camera_names)
        self.patch_dropout = patch_dropout
        num_patches = (image_size // patch_size) ** 2
        self.patch_embed = nn.Conv2d(3, dim, kernel_size=patch_size, stride=patch_size)
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches, dim) * 0.02)
        self.camera_embed = nn.Parameter(torch.zeros(len(self.camera_names), 1, dim))
        self.blocks = nn.ModuleList(ViTBlock(dim, num_heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)

    def forward(self, images: dict[str, torch.Tensor]) -> torch.Tensor:
        tokens = []
        for cam_index, name in enumerate(self.camera_names):
            x = self.patch_embed(images[name]).flatten(2).transpose(1, 2)
            x = x + self.pos_embed + self.camera_embed[cam_index]
            if self.training and self.patch_dropout > 0:
                # Patch dropout: each step sees a random subset of the patches of each camera.
                num_keep = max(1, int(x.shape[1] * (1.0 - self.patch_dropout)))
                keep = torch.randperm(x.shape[1])[:num_keep]
                x = x[:, keep]
            for block in self.blocks:
                x = block(x)
            tokens.append(self.norm(x))
        return torch.cat(tokens, dim=1)
