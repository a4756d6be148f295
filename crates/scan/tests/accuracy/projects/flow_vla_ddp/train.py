"""Distributed training of the flow-matching VLA.

    torchrun --nproc_per_node 8 train.py --config configs/pi0_libero.json
"""

import argparse
import json
import logging
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from flow_vla.data.dataset import LiberoDataset, collate_fn
from flow_vla.model.pi0 import FlowVLA
from flow_vla.utils.device import get_safe_torch_device, is_amp_available

logger = logging.getLogger(__name__)


def init_distributed() -> int:
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl")
    if dist.get_backend() != "nccl":
        raise RuntimeError("this trainer needs NCCL for all-reduce of bf16 gradients")
    return local_rank


def train(cfg: dict) -> None:
    local_rank = init_distributed()
    device = get_safe_torch_device(cfg["device"])
    model = FlowVLA(cfg["model"]).to(device)
    model = DDP(model, device_ids=[local_rank], find_unused_parameters=False)
    dataset = LiberoDataset(cfg["data"]["root"], cfg["model"]["chunk_size"])
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=cfg["batch_size"], sampler=sampler, num_workers=8,
                        collate_fn=collate_fn, pin_memory=True, drop_last=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=(0.9, 0.95), weight_decay=1e-10)
    use_amp = cfg.get("use_amp", True) and is_amp_available(device.type)
    step = 0
    for epoch in range(cfg["epochs"]):
        sampler.set_epoch(epoch)
        for batch in loader:
            t0 = time.perf_counter()
            batch = {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_amp):
                loss = model(batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if step % cfg["log_every"] == 0 and dist.get_rank() == 0:
                logger.info("step %d loss %.4f (%.3fs)", step, loss.item(), time.perf_counter() - t0)
            step += 1
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    args = parser.parse_args()
    with open(args.config) as f:
        train(json.load(f))
