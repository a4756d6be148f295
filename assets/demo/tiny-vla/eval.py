"""Evaluate a TinyVLA checkpoint: sample action chunks on held-out episodes and report the MSE.

Examples:
    python eval.py --config configs/train.yaml --checkpoint outputs/tiny-vla/policy.pt
    python eval.py --config configs/train.yaml --checkpoint outputs/tiny-vla/policy.pt --gpu 1 --num-batches 8
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
import yaml
from pytorch_lightning.metrics import MeanSquaredError

from tiny_vla.data import build_dataloader
from tiny_vla.dist_utils import batch_to_device, get_device, seed_everything
from tiny_vla.policy import build_policy
from tiny_vla.tokenizer import InstructionTokenizer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--gpu", type=int, help="GPU index (default: the best device available)")
    parser.add_argument("--num-batches", type=int, default=4)
    parser.add_argument("--save-predictions", help="write the sampled actions to this .npy file")
    return parser.parse_args(argv)


@torch.no_grad()
def evaluate(cfg: dict, checkpoint: str, device: torch.device, num_batches: int) -> tuple[float, np.ndarray]:
    tokenizer = InstructionTokenizer(cfg["data"]["max_instruction_len"])
    loader = build_dataloader(cfg, tokenizer, train=False)
    # Evaluation always runs the fast kernel, whatever the training config says.
    policy = build_policy(cfg, tokenizer.vocab_size, tokenizer.pad_id, attn_implementation="flash_attention_2")
    state = torch.load(checkpoint, map_location="cpu")
    policy.load_state_dict(state["model"])
    policy.to(device).eval()

    metric = MeanSquaredError().to(device)
    predictions = []
    for batch_index, batch in enumerate(loader):
        if batch_index == num_batches:
            break
        batch = batch_to_device(batch, device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            pred = policy.sample_actions(batch)
        valid = torch.arange(pred.shape[1], device=device)[None] < batch["action_len"][:, None]
        metric.update(pred[valid].double(), batch["actions"][valid].double())
        predictions.append(pred.cpu())
    return metric.compute().item(), torch.cat(predictions).numpy()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with open(args.config, encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    seed_everything(cfg["seed"])
    device = torch.device(args.gpu) if args.gpu is not None else get_device()
    mse, predictions = evaluate(cfg, args.checkpoint, device, args.num_batches)
    print(f"eval: {len(predictions)} samples | action MSE {mse:.4f}")
    if args.save_predictions:
        np.save(Path(args.save_predictions), predictions)


if __name__ == "__main__":
    main()
