"""The per-card arithmetic of ``memory.per_card`` against real sharded runs of the same model on two emulated
cards: one process measures a step and predicts DDP's and FSDP2's per-card peak; torchrun then runs the step under
DDP and under FSDP2 and each rank measures its own card (the emulator's ledger)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch.utils.backend_registration

ROOT = Path(__file__).resolve().parents[3]
EMULATOR = ROOT / "assets" / "emulator"
HARNESS = ROOT / "assets" / "harness"

needs_fsdp2_on_npu = pytest.mark.skipif(
    not hasattr(torch.utils.backend_registration, "_setup_privateuseone_for_python_backend"),
    reason="torch < 2.10's FSDP2 registers its copy-in kernel (all_gather_copy_in) for CUDA and CPU only, not npu",
)

PRELUDE = textwrap.dedent(
    """
    import json, os, sys
    sys.path[:0] = [{emulator!r}, {harness!r}]
    import torch
    from torch import nn
    import npu_emulator
    npu_emulator.install()
    import torch.distributed as dist
    from npu_emulator import _ledger
    from npu_verify_harness.memory import MemoryWatch, per_card

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(512, 512), nn.GELU()) for _ in range(6))
            self.head = nn.Linear(512, 8)

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    def step(model, optimizer, rank=0):
        torch.manual_seed(rank)
        for _ in range(2):
            x = torch.randn(8, 512).to("npu")
            optimizer.zero_grad(set_to_none=True)
            model(x).pow(2).mean().backward()
            optimizer.step()
    """
).format(emulator=str(EMULATOR), harness=str(HARNESS))

SINGLE = """
torch.manual_seed(0)
model = Model().to("npu")
watch = MemoryWatch(torch)
watch.install()
step(model, torch.optim.AdamW(model.parameters()))
watch.uninstall()
print(json.dumps(per_card(_ledger.summary(), 2, watch.unit_bytes())))
"""

RANKS = """
rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("hccl")
torch.npu.set_device(rank)
torch.manual_seed(0)
model = Model().to("npu")
if os.environ["STRATEGY"] == "ddp":
    wrapped = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
else:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("npu", (2,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    wrapped = fully_shard(model, mesh=mesh)
_ledger.reset()
step(wrapped, torch.optim.AdamW(wrapped.parameters()), rank)
with open(f"rank{rank}.json", "w") as out:
    out.write(json.dumps(_ledger.summary()))
dist.barrier()
dist.destroy_process_group()
"""


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", TORCH_DEVICE_BACKEND_AUTOLOAD="0", CUDA_VISIBLE_DEVICES="",
               GLOO_SOCKET_IFNAME="lo", NPU_EMULATOR_DEVICE_COUNT="2")  # fmt: skip
    env.pop("NPU_EMULATOR_SHAPES_ONLY", None)
    env.update(extra)
    return env


def _measured(tmp_path: Path, strategy: str) -> list[dict[str, Any]]:
    script = tmp_path / "rank.py"
    script.write_text(PRELUDE + textwrap.dedent(RANKS))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc_per_node",
               "2", str(script)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path,
                          env=_env(STRATEGY=strategy))  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]


@needs_fsdp2_on_npu
def test_the_per_card_arithmetic_agrees_with_ddp_and_fsdp2_on_two_cards(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(SINGLE)], capture_output=True, text=True,
                          timeout=300, check=False, env=_env())  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    predicted = json.loads(done.stdout.strip().splitlines()[-1])
    measured = {}
    for strategy in ("ddp", "fsdp"):
        (tmp_path / strategy).mkdir()
        measured[strategy] = max(rank["peak_bytes"] for rank in _measured(tmp_path / strategy, strategy))
    ddp, fsdp = measured["ddp"], measured["fsdp"]
    report = f"predicted {predicted}, measured DDP {ddp}, FSDP2 {fsdp}"
    print(report)
    assert abs(predicted["ddp_bytes"] - ddp) <= 0.10 * ddp, report
    assert abs(predicted["fsdp_bytes"] - fsdp) <= 0.10 * fsdp, report
    assert fsdp < ddp, report
