"""The training loop shared by the argparse and hydra entry points."""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from .data import build_dataloader, compute_state_stats
from .dist_utils import batch_to_device, cuda_memory_gb, init_distributed, seed_everything
from .policy import build_policy
from .tokenizer import InstructionTokenizer


def warmup_cosine(warmup_steps: int, total_steps: int):
    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(total_steps - warmup_steps, 1)
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    return factor


def save_checkpoint(policy: torch.nn.Module, cfg: dict, step: int) -> Path:
    out_dir = Path(cfg["output_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "policy.pt"
    model = policy.module if isinstance(policy, DDP) else policy
    torch.save({"model": model.state_dict(), "config": cfg, "step": step}, path)
    return path


def train(cfg: dict) -> float:
    rank, local_rank, world_size = init_distributed(cfg["distributed"]["backend"])
    seed_everything(cfg["seed"] + rank)
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    device = torch.device(cfg["device"], local_rank)
    train_cfg = cfg["train"]

    tokenizer = InstructionTokenizer(cfg["data"]["max_instruction_len"])
    loader = build_dataloader(cfg, tokenizer, train=True)
    policy = build_policy(cfg, tokenizer.vocab_size, tokenizer.pad_id)
    policy.set_state_stats(compute_state_stats(loader.dataset))
    policy = policy.cuda()
    if world_size > 1:
        policy = DDP(policy, device_ids=[local_rank])

    optimizer = torch.optim.AdamW(policy.parameters(), lr=train_cfg["lr"], weight_decay=train_cfg["weight_decay"], betas=(0.9, 0.95))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(train_cfg["warmup_steps"], train_cfg["max_steps"]))
    use_amp = train_cfg["amp"] and device.type == "cuda"
    if rank == 0:
        num_params = sum(p.numel() for p in policy.parameters())
        print(f"device {device} | world size {world_size} | {num_params / 1e6:.2f}M parameters | {len(loader.dataset)} samples")

    step, epoch, loss = 0, 0, torch.zeros((), device=device)
    tic = time.perf_counter()
    policy.train()
    while step < train_cfg["max_steps"]:
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        for batch in loader:
            batch = batch_to_device(batch, device)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
                loss = policy(batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), train_cfg["grad_clip"])
            optimizer.step()
            scheduler.step()
            step += 1
            if rank == 0 and (step % train_cfg["log_every"] == 0 or step == 1):
                torch.cuda.synchronize()
                ms = (time.perf_counter() - tic) * 1000 / step
                print(
                    f"step {step:>6d}/{train_cfg['max_steps']} | loss {loss.item():.4f} | lr {scheduler.get_last_lr()[0]:.2e}"
                    f" | {ms:.0f} ms/step | mem {cuda_memory_gb():.2f} GiB",
                    flush=True,
                )
            if rank == 0 and step % train_cfg["save_every"] == 0:
                save_checkpoint(policy, cfg, step)
            if step >= train_cfg["max_steps"]:
                break
        epoch += 1

    final_loss = loss.item()
    if rank == 0:
        path = save_checkpoint(policy, cfg, step)
        print(f"done: {step} steps, final loss {final_loss:.4f}, checkpoint {path}", flush=True)
    return final_loss
