"""Measure the cost of the emulated npu device against plain CPU torch.

Usage:
    python emulator/bench_emulator.py            # table on stdout
    python emulator/bench_emulator.py --json     # one JSON object on stdout
    python emulator/bench_emulator.py --ops 5000 --steps 30

Prints the median time per call of a few small ops (the per-op dispatch overhead dominates at these sizes) and of
one training step of a small transformer policy, on CPU and on the emulated device, with the ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from torch import nn

import npu_emulator


def _median_seconds(function: Callable[[], object], calls: int, rounds: int = 5) -> float:
    """The median over ``rounds`` of the mean time per call of ``calls`` calls."""
    function()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            function()
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


class _Policy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(64, 64)
        layer = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(64, 7)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)).mean(dim=1))


def _step_function(device: torch.device) -> Callable[[], object]:
    torch.manual_seed(0)
    model = _Policy().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 64, (8, 32)).to(device)
    target = torch.randn(8, 7).to(device)

    def step() -> float:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(tokens), target)
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def _ops(device: torch.device) -> dict[str, Callable[[], object]]:
    a = torch.randn(16, 16).to(device)
    b = torch.randn(16, 16).to(device)
    host = torch.randn(16, 16)
    return {
        "add (16x16)": lambda: a + b,
        "mm (16x16)": lambda: a @ b,
        "sum + item": lambda: a.sum().item(),
        "in-place mul_": lambda: a.mul_(1.0),
        "view + index": lambda: a.view(256)[3:9],
        "host -> device copy": lambda: host.to(device),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=2000, help="calls per timing round of each op (default 2000)")
    parser.add_argument("--steps", type=int, default=10, help="training steps per timing round (default 10)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1: stable figures)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    cpu = torch.device("cpu")
    cpu_ops = {name: _median_seconds(fn, args.ops) for name, fn in _ops(cpu).items()}
    cpu_step = _median_seconds(_step_function(cpu), args.steps, rounds=3)

    npu_emulator.install()
    npu = torch.device("npu:0")
    npu_ops = {name: _median_seconds(fn, args.ops) for name, fn in _ops(npu).items()}
    npu_step = _median_seconds(_step_function(npu), args.steps, rounds=3)
    # Plain CPU code after install: it should cost the same as before.
    cpu_after = _median_seconds(_ops(cpu)["add (16x16)"], args.ops)

    rows = [
        {
            "case": name,
            "cpu_us": cpu_ops[name] * 1e6,
            "npu_us": npu_ops[name] * 1e6,
            "overhead_us": (npu_ops[name] - cpu_ops[name]) * 1e6,
        }
        for name in cpu_ops
    ]
    report = {
        "torch": torch.__version__,
        "threads": args.threads,
        "ops": rows,
        "train_step": {
            "cpu_ms": cpu_step * 1e3,
            "npu_ms": npu_step * 1e3,
            "ratio": npu_step / cpu_step,
        },
        "cpu_add_after_install_us": cpu_after * 1e6,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"torch {torch.__version__}, {args.threads} thread(s); median of 5 rounds x {args.ops} calls per op")
    print(f"{'case':<22}{'cpu us':>10}{'npu us':>10}{'extra us':>10}")
    for row in rows:
        print(f"{row['case']:<22}{row['cpu_us']:>10.2f}{row['npu_us']:>10.2f}{row['overhead_us']:>10.2f}")
    step = report["train_step"]
    print(
        f"small transformer train step (2 layers, d=64, batch 8x32): cpu {step['cpu_ms']:.2f} ms, "
        f"npu {step['npu_ms']:.2f} ms, x{step['ratio']:.2f}"
    )
    print(f"CPU add after install: {cpu_after * 1e6:.2f} us (before: {cpu_ops['add (16x16)'] * 1e6:.2f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
