"""A small diffusion policy trained for a few steps: the program the --parity tests run.

PARITY_INJECT picks an npu-only change (what a port can get wrong): `schedule` (the noise schedule in float32 on the
npu), `half` (the action head in float16 on the npu), `mask` (npu_fusion_attention given SDPA's mask polarity),
`torch64` (the noise schedule computed with torch in torch.float64, which the runtime patch Float64To32 turns into
float32 in the port); empty: none. The program has dropout and random augmentation either way.
"""

import math
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

try:
    import torch_npu  # noqa: F401
except ImportError:
    torch_npu = None

INJECT = os.environ.get("PARITY_INJECT", "")


class Episodes(torch.utils.data.Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, index):
        rng = np.random.default_rng(index)
        obs = torch.from_numpy(rng.standard_normal(16).astype(np.float32))
        obs = obs + 0.05 * torch.randn(16)  # random augmentation
        actions = torch.from_numpy(rng.standard_normal((6, 4)).astype(np.float32))
        valid = torch.ones(6, dtype=torch.bool)
        valid[int(rng.integers(3, 6)):] = False
        return {"obs": obs, "actions": actions, "valid": valid}


def ddpm_tables(steps, dtype):
    """sqrt(alpha_bar) and sqrt(1 - alpha_bar) of the linear DDPM schedule, computed in numpy `dtype`."""
    betas = np.linspace(1e-4, 0.02, steps, dtype=dtype)
    alphas_cumprod = np.cumprod(1 - betas)
    return torch.from_numpy(np.sqrt(alphas_cumprod)).float(), torch.from_numpy(np.sqrt(1 - alphas_cumprod)).float()


class NoiseSchedule(nn.Module):
    """q(x_t | x_0) of a DDPM schedule whose tables are computed in float64 on the host."""

    def __init__(self, steps=1000):
        super().__init__()
        on_npu = torch_npu is not None and torch.npu.is_available()
        dtype = np.float32 if INJECT == "schedule" and on_npu else np.float64
        if INJECT == "torch64":
            betas = torch.linspace(1e-4, 0.02, steps, dtype=torch.float64)
            alphas_cumprod = torch.cumprod(1 - betas, 0)
            signal, sigma = alphas_cumprod.sqrt().float(), (1 - alphas_cumprod).sqrt().float()
        else:
            signal, sigma = ddpm_tables(steps, dtype)
        self.register_buffer("signal", signal)
        self.register_buffer("sigma", sigma)

    def forward(self, x0, noise, t):
        shape = (-1,) + (1,) * (x0.dim() - 1)
        return self.signal[t].view(shape) * x0 + self.sigma[t].view(shape) * noise


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, valid):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        if torch_npu is not None and x.device.type == "npu":
            keep = valid[:, None, None, :].expand(b, self.heads, s, s)
            mask = keep if INJECT == "mask" else ~keep  # npu_fusion_attention: True = masked out
            o = torch_npu.npu_fusion_attention(q, k, v, self.heads, "BSND", atten_mask=mask,
                                               scale=1 / math.sqrt(d // self.heads))[0]
        else:
            keep = valid[:, None, None, :]
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               attn_mask=keep.expand(b, self.heads, s, s)).transpose(1, 2)
        return self.out(o.reshape(b, s, d))


class ActionHead(nn.Module):
    def __init__(self, dim, action_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, action_dim))

    def forward(self, h):
        if INJECT == "half" and h.device.type == "npu":
            return self.net.half()(h.half()).float()
        return self.net(h)


class Policy(nn.Module):
    def __init__(self, dim=32, action_dim=4):
        super().__init__()
        self.schedule = NoiseSchedule()
        self.obs_enc = nn.Sequential(nn.Linear(16, dim), nn.GELU(), nn.Dropout(0.1))
        self.act_in = nn.Linear(action_dim, dim)
        self.time = nn.Embedding(1000, dim)
        self.attn = Attention(dim, 4)
        self.drop = nn.Dropout(0.1)
        self.head = ActionHead(dim, action_dim)

    def forward(self, batch):
        x0 = batch["actions"]
        noise = torch.randn_like(x0)
        t = torch.randint(0, 1000, (x0.shape[0],), device=x0.device)
        xt = self.schedule(x0, noise, t)
        h = self.act_in(xt) + self.obs_enc(batch["obs"])[:, None] + self.time(t)[:, None]
        h = h + self.drop(self.attn(h, batch["valid"]))
        pred = self.head(h)
        err = (pred - noise).pow(2).mean(-1)
        return (err * batch["valid"]).sum() / batch["valid"].sum()


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    device = torch.device("npu" if torch_npu is not None and torch.npu.is_available() else "cpu")
    model = Policy().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loader = torch.utils.data.DataLoader(Episodes(), batch_size=16, shuffle=True,
                                         num_workers=int(os.environ.get("PARITY_WORKERS", "0")))
    for _epoch in range(10):
        for batch in loader:
            batch = {k: v.to(device) for k, v in batch.items()}
            loss = model(batch)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            print("loss", float(loss))


if __name__ == "__main__":
    main()
