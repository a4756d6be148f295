"""Train the TinyVLA policy.

Examples:
    python train.py --config configs/train.yaml
    python train.py --config configs/train.yaml --max-steps 100 --log-every 10
    python train.py --config configs/train.yaml --max-steps 3 --device cpu
    torchrun --nproc_per_node 8 train.py --config configs/train.yaml
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

import torch  # noqa: E402
import yaml  # noqa: E402

from tiny_vla.trainer import train  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="YAML config, e.g. configs/train.yaml")
    parser.add_argument("--max-steps", type=int, help="optimizer steps (overrides train.max_steps)")
    parser.add_argument("--batch-size", type=int, help="per-device batch size (overrides train.batch_size)")
    parser.add_argument("--log-every", type=int, help="steps between log lines (overrides train.log_every)")
    parser.add_argument("--output-dir", help="where checkpoints go (overrides output_dir)")
    parser.add_argument("--device", help="npu, npu:1, cpu, ... (overrides device; auto: the NPU if present, else the CPU)")
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
    if args.device is not None:
        cfg["device"] = args.device
    return cfg


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_float32_matmul_precision("high")
    train(load_config(args))


if __name__ == "__main__":
    main()
