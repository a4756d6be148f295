"""Evaluate a TinyVLA checkpoint: sample action chunks on held-out episodes and report the MSE.

Examples:
    python eval.py --config configs/train.yaml --checkpoint outputs/tiny-vla/policy.pt
    python eval.py --config configs/train.yaml --checkpoint outputs/tiny-vla/policy.pt --device npu:1 --num-batches 8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

try:
    import torch_npu  # noqa: F401  registers the "npu" device
    from torch_npu.contrib import transfer_to_npu  # noqa: F401  remaps leftover cuda calls to npu
except ImportError:  # plain CPU torch: no NPU here, the CPU is used
    torch_npu = None

_NPU_PATCHER = None
if torch_npu is not None:
    sys.path.insert(0, str(Path(__file__).resolve().parent / "migrate_to_cloudrobo"))
    from runtime_patches import build_vla_patcher

    _NPU_PATCHER = build_vla_patcher()
    _NPU_PATCHER.apply()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from tiny_vla.data import build_dataloader  # noqa: E402
from tiny_vla.dist_utils import batch_to_device, resolve_device, seed_everything  # noqa: E402
from tiny_vla.policy import build_policy  # noqa: E402
from tiny_vla.tokenizer import InstructionTokenizer  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--device", default="auto", help="npu, npu:1, cpu, ... (auto: the NPU if present, else the CPU)")
    parser.add_argument("--num-batches", type=int, default=4)
    parser.add_argument("--save-predictions", help="write the sampled actions to this .npy file")
    return parser.parse_args(argv)


@torch.no_grad()
def evaluate(cfg: dict, checkpoint: str, device: torch.device, num_batches: int) -> tuple[float, np.ndarray]:
    tokenizer = InstructionTokenizer(cfg["data"]["max_instruction_len"])
    loader = build_dataloader(cfg, tokenizer, train=False)
    policy = build_policy(cfg, tokenizer.vocab_size, tokenizer.pad_id)
    state = torch.load(checkpoint, map_location="cpu")
    policy.load_state_dict(state["model"])
    policy.to(device).eval()

    squared_error = torch.zeros((), device=device)
    num_valid = torch.zeros((), device=device)
    predictions = []
    for batch_index, batch in enumerate(loader):
        if batch_index == num_batches:
            break
        batch = batch_to_device(batch, device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type != "cpu"):
            pred = policy.sample_actions(batch)
        valid = torch.arange(pred.shape[1], device=device)[None] < batch["action_len"][:, None]
        squared_error += ((pred - batch["actions"]) ** 2)[valid].sum()
        num_valid += valid.sum() * pred.shape[-1]
        predictions.append(pred.cpu())
    mse = squared_error / num_valid.clamp(min=1)
    return mse.item(), torch.cat(predictions).numpy()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with open(args.config, encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    seed_everything(cfg["seed"])
    device = resolve_device(args.device)
    mse, predictions = evaluate(cfg, args.checkpoint, device, args.num_batches)
    print(f"eval: {len(predictions)} samples | action MSE {mse:.4f}")
    if args.save_predictions:
        np.save(Path(args.save_predictions), predictions)


if __name__ == "__main__":
    main()
