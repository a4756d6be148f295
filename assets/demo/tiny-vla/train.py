"""Train the TinyVLA policy.

Examples:
    python train.py --config configs/train.yaml
    python train.py --config configs/train.yaml --max-steps 100 --log-every 10
    torchrun --nproc_per_node 8 train.py --config configs/train.yaml
"""

from __future__ import annotations

import argparse

import torch
import yaml

from tiny_vla.trainer import train


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="YAML config, e.g. configs/train.yaml")
    parser.add_argument("--max-steps", type=int, help="optimizer steps (overrides train.max_steps)")
    parser.add_argument("--batch-size", type=int, help="per-GPU batch size (overrides train.batch_size)")
    parser.add_argument("--log-every", type=int, help="steps between log lines (overrides train.log_every)")
    parser.add_argument("--output-dir", help="where checkpoints go (overrides output_dir)")
    return parser.parse_args(argv)


def load_config(args: argparse.Namespace) -> dict:
    with open(args.config, encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    if args.max_steps is not None:
        cfg["train"]["max_steps"] = args.max_steps
    if args.batch_size is not None:
        cfg["train"]["batch_size"] = args.batch_size
    if args.log_every is not None:
        cfg["train"]["log_every"] = args.log_every
    if args.output_dir is not None:
        cfg["output_dir"] = args.output_dir
    return cfg


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_float32_matmul_precision("high")
    train(load_config(args))


if __name__ == "__main__":
    main()
