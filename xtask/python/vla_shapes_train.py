"""A VLA training program of OpenVLA-7B's shapes, built in code from configs (no download, no weights).

Two vision encoders (a ViT-L/14-sized and a SigLIP-so400m-sized one, 224 px), an MLP projector into a
Llama-2-7B-sized decoder (32 layers, d=4096, 32 heads, MLP 11008, vocabulary 32000, RMSNorm, rotary positions,
causal SDPA), the language-model loss on the action tokens and a small action head. ``--size 1b`` swaps in a
1.1B-parameter decoder (22 layers, d=2048, MLP 5632) and one encoder. The program is what a team would run on a
card: bf16 weights, AdamW, one optimizer step per batch on ``npu``.
"""

import argparse
import math

import torch
import torch.nn.functional as F
import torch_npu  # noqa: F401 - the npu device
from torch import nn

SIZES = {
    "7b": {"layers": 32, "dim": 4096, "heads": 32, "mlp": 11008, "vocab": 32000,
           "encoders": [(24, 1024, 16, 4096), (27, 1152, 16, 4304)]},
    "1b": {"layers": 22, "dim": 2048, "heads": 32, "mlp": 5632, "vocab": 32000,
           "encoders": [(24, 1024, 16, 4096)]},
    "tiny": {"layers": 2, "dim": 128, "heads": 4, "mlp": 256, "vocab": 512, "encoders": [(2, 64, 4, 128, 28)]},
}  # fmt: skip


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype) * self.weight


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class Attention(nn.Module):
    def __init__(self, dim, heads, bias=False):
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(dim, dim, bias=bias)
        self.k_proj = nn.Linear(dim, dim, bias=bias)
        self.v_proj = nn.Linear(dim, dim, bias=bias)
        self.o_proj = nn.Linear(dim, dim, bias=bias)

    def forward(self, x, rotary=None, causal=False):
        b, s, d = x.shape
        shape = (b, s, self.heads, d // self.heads)
        q, k, v = (proj(x).view(shape).transpose(1, 2) for proj in (self.q_proj, self.k_proj, self.v_proj))
        if rotary is not None:
            cos, sin = rotary
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, d))


class DecoderLayer(nn.Module):
    def __init__(self, dim, heads, mlp):
        super().__init__()
        self.input_layernorm = RMSNorm(dim)
        self.self_attn = Attention(dim, heads)
        self.post_attention_layernorm = RMSNorm(dim)
        self.gate_proj = nn.Linear(dim, mlp, bias=False)
        self.up_proj = nn.Linear(dim, mlp, bias=False)
        self.down_proj = nn.Linear(mlp, dim, bias=False)

    def forward(self, x, rotary):
        x = x + self.self_attn(self.input_layernorm(x), rotary, causal=True)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class EncoderLayer(nn.Module):
    def __init__(self, dim, heads, mlp):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, bias=True)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp)
        self.fc2 = nn.Linear(mlp, dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class VisionEncoder(nn.Module):
    def __init__(self, layers, dim, heads, mlp, image=224, patch=14):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.pos_embed = nn.Parameter(torch.zeros(1, (image // patch) ** 2, dim))
        self.blocks = nn.ModuleList(EncoderLayer(dim, heads, mlp) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)

    def forward(self, pixels):
        x = self.patch_embed(pixels).flatten(2).transpose(1, 2) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


class LanguageModel(nn.Module):
    def __init__(self, layers, dim, heads, mlp, vocab):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(DecoderLayer(dim, heads, mlp) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.head_dim = dim // heads

    def rotary(self, length, device, dtype):
        inv = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2, device=device).float() / self.head_dim))
        angles = torch.outer(torch.arange(length, device=device).float(), inv)
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def forward(self, embeds):
        rotary = self.rotary(embeds.shape[1], embeds.device, embeds.dtype)
        x = embeds
        for layer in self.layers:
            x = layer(x, rotary)
        x = self.norm(x)
        return x, self.lm_head(x)


class VLA(nn.Module):
    def __init__(self, cfg, action_dim=7):
        super().__init__()
        self.encoders = nn.ModuleList(VisionEncoder(*spec) for spec in cfg["encoders"])
        vision = sum(spec[1] for spec in cfg["encoders"])
        self.projector = nn.Sequential(nn.Linear(vision, cfg["dim"]), nn.GELU(), nn.Linear(cfg["dim"], cfg["dim"]))
        self.language_model = LanguageModel(cfg["layers"], cfg["dim"], cfg["heads"], cfg["mlp"], cfg["vocab"])
        self.action_head = nn.Sequential(nn.Linear(cfg["dim"], 1024), nn.GELU(), nn.Linear(1024, action_dim))

    def forward(self, pixels, tokens):
        vision = torch.cat([encoder(pixels) for encoder in self.encoders], dim=-1)
        embeds = torch.cat([self.projector(vision), self.language_model.embed_tokens(tokens)], dim=1)
        hidden, logits = self.language_model(embeds)
        return logits[:, vision.shape[1]:], self.action_head(hidden[:, -1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", choices=sorted(SIZES), default="7b")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--text", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    args = parser.parse_args()
    cfg = SIZES[args.size]
    torch.manual_seed(0)
    model = VLA(cfg).to(device="npu", dtype=getattr(torch, args.dtype))
    params = sum(p.numel() for p in model.parameters())
    print("parameters: {:.2f}B".format(params / 1e9), flush=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.0)
    image = 28 if args.size == "tiny" else 224
    for step in range(args.steps):
        # The batch is made on the host, as a data loader makes it, and moved to the card.
        pixels = torch.randn(args.batch, 3, image, image).to("npu", dtype=getattr(torch, args.dtype))
        tokens = torch.randint(0, cfg["vocab"], (args.batch, args.text)).to("npu")
        actions = torch.randn(args.batch, 7).to("npu", dtype=getattr(torch, args.dtype))
        logits, predicted = model(pixels, tokens)
        lm_loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))
        loss = lm_loss + F.mse_loss(predicted.float(), actions.float())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if not math.isfinite(loss.item()):
            raise RuntimeError("the loss is not finite")
        print("step {} loss {:.4f}".format(step, loss.item()), flush=True)


if __name__ == "__main__":
    main()
