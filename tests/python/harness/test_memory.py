"""Device memory of a training step (assets/harness/npu_verify_harness/memory.py over the emulator's ledger) and
the shapes-only mode (assets/emulator/npu_emulator/_shapes.py).

Shapes-only mode changes the whole process (modules register meta parameters), so every run that needs it is a
subprocess with ``NPU_EMULATOR_SHAPES_ONLY=1``; each subprocess prints one JSON line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[3]
HARNESS = ROOT / "assets" / "harness"
EMULATOR = ROOT / "assets" / "emulator"
sys.path.insert(0, str(HARNESS))

from npu_verify_harness import memory  # noqa: E402

PRELUDE = textwrap.dedent(
    """
    import json, sys
    sys.path[:0] = [{emulator!r}, {harness!r}]
    import torch
    from torch import nn
    import npu_emulator
    npu_emulator.install()
    from npu_emulator import _ledger
    from npu_verify_harness.memory import MemoryWatch

    class Policy(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Linear(48, 96)
            self.blocks = nn.ModuleList(
                nn.TransformerEncoderLayer(96, 4, dim_feedforward=384, dropout=0.0, batch_first=True)
                for _ in range(3)
            )
            self.head = nn.Linear(96, 7)

        def forward(self, x):
            x = self.embed(x)
            for block in self.blocks:
                x = block(x)
            return self.head(x.mean(dim=1))

    def train(steps=2, batch=16):
        torch.manual_seed(0)
        model = Policy().to("npu")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        watch = MemoryWatch(torch)
        assert watch.install()
        for _ in range(steps):
            x = torch.randn(batch, 24, 48).to("npu")
            y = torch.randn(batch, 7).to("npu")
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        watch.uninstall()
        return model, watch
    """
).format(emulator=str(EMULATOR), harness=str(HARNESS))



def _shapes_only_supported() -> bool:
    parts = torch.__version__.split("+")[0].split(".")
    return (int(parts[0]), int(parts[1])) >= (2, 6)


needs_shapes_only = pytest.mark.skipif(
    not _shapes_only_supported(), reason="shapes-only mode needs torch >= 2.6 (npu_emulator._shapes.MIN_TORCH)"
)

def run(body: str, shapes: bool) -> dict[str, Any]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    env.pop("NPU_EMULATOR_SHAPES_ONLY", None)
    if shapes:
        env["NPU_EMULATOR_SHAPES_ONLY"] = "1"
    code = PRELUDE + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


STEP = """
model, watch = train()
summary = _ledger.summary()
summary["unit"] = watch.unit_bytes()
summary["weight_device"] = str(model.head.weight.elem.device)
print(json.dumps(summary))
"""


def test_blocks_are_rounded_as_torch_npus_caching_allocator_rounds_them() -> None:
    from npu_emulator._ledger import round_size

    # round_size: 32 bytes added, then up to a multiple of 512, at least 512; no block for nothing.
    assert [round_size(n) for n in (0, 1, 480, 481, 992, 993, 4096, 1 << 20)] == [
        0, 512, 512, 1024, 1024, 1536, 4608, (1 << 20) + 512,
    ]  # fmt: skip


def test_the_ledger_counts_each_device_storage_once_until_it_is_freed(npu: torch.device) -> None:
    from npu_emulator import _ledger

    before = _ledger.allocated(0)
    x = torch.empty(1000, device=npu)  # 4000 bytes -> a 4096-byte block
    assert _ledger.allocated(0) - before == 4096
    view = x[10:20].view(2, 5)  # a view: the same storage
    y = x * 2
    assert _ledger.allocated(0) - before == 2 * 4096
    if not _ledger._STORAGE_WEAKREFS:  # torch < 2.6 follows storages through host tensors: no in-place resize
        del x, view, y
        assert _ledger.allocated(0) == before
        return
    x.resize_(5000)  # grows its storage in place
    assert _ledger.allocated(0) - before == 4096 + _ledger.round_size(20000)
    del x, view, y
    assert _ledger.allocated(0) == before
    assert _ledger.max_allocated(0) >= before + 4096 + _ledger.round_size(20000)


@needs_shapes_only
def test_the_shapes_only_peak_agrees_with_the_live_bytes_of_the_full_run() -> None:
    full = run(STEP, shapes=False)
    shapes = run(STEP, shapes=True)
    assert full["weight_device"] == "cpu" and shapes["weight_device"] == "meta"
    assert full["peak_bytes"] > 1_000_000
    assert abs(shapes["peak_bytes"] - full["peak_bytes"]) <= 0.05 * full["peak_bytes"], (full, shapes)
    assert shapes["phase"] == full["phase"] and shapes["module"] == full["module"]
    # What was alive at the peak: AdamW's two moments are twice the parameters; the gradients as large as them.
    parts = full["at_peak"]
    assert parts["parameters"] > 0 and parts["optimizer_states"] == 2 * parts["parameters"], parts
    assert set(full["by_phase"]) >= {"forward", "backward", "optimizer"}, full["by_phase"]
    assert full["unit"] > 0


def test_sharding_divides_what_each_strategy_shards() -> None:
    backward = {"parameters": 200, "gradients": 100, "optimizer_states": 400, "activations": 300}
    optimizer = {"parameters": 200, "gradients": 200, "optimizer_states": 400, "optimizer_temporaries": 200}
    summary = {"peak_bytes": 1000, "at_phase_peak": {"backward": backward, "optimizer": optimizer}}
    cards = memory.per_card(summary, 4, unit=20)
    assert cards["ddp_bytes"] == 1000 + 200  # plus DDP's gradient buckets
    # ZeRO-1: the optimizer's peak keeps params and grads whole, states and the step's temporaries / 4.
    assert cards["zero1_bytes"] == max(300 + 200 + 100 + 100, 200 + 200 + 150)
    assert cards["zero2_bytes"] == max(300 + 200 + (100 + 400) // 4, 200 + (200 + 400 + 200) // 4)
    assert cards["fsdp_bytes"] == max(300 + 700 // 4, 1000 // 4) + memory.FSDP_UNITS * 20
    single = memory.per_card(summary, 1, unit=20)
    assert single["zero2_bytes"] == single["fsdp_bytes"] == 1000


SHAPES_CHECKS = """
import torch.nn.functional as F
found = {}
x = torch.randn(4, 8).to("npu")
found["elem"] = str(x.elem.device)
for name, action in [
    ("float64", lambda: (lambda a: a.mm(a))(torch.ones(3, 3, device="npu", dtype=torch.float64))),
    ("mismatch", lambda: x + torch.ones(4, 8)),
    ("sdpa_mask", lambda: F.scaled_dot_product_attention(
        torch.randn(2, 4, 5, 8).to("npu"), torch.randn(2, 4, 5, 8).to("npu"), torch.randn(2, 4, 5, 8).to("npu"),
        attn_mask=torch.ones(2, 5, 5, dtype=torch.bool).to("npu"))),
    ("unique", lambda: torch.unique(x)),
]:
    try:
        action()
        found[name] = None
    except Exception as error:
        found[name] = [type(error).__name__, getattr(error, "group", None)]
loss = (x * 2).sum()
found["item"] = loss.item()
found["finite"] = bool(torch.isfinite(loss))
found["nan"] = bool(torch.isnan(loss).any())
found["nonzero"] = list(x.nonzero().shape)
found["masked"] = list(x[x > 0].shape)
found["cpu"] = x.cpu().tolist()[0][:2]
model = nn.Linear(4096, 4096)
found["param"] = str(model.weight.device)
found["unchecked"] = npu_emulator.shapes_unchecked()
print(json.dumps(found))
"""


@needs_shapes_only
def test_shapes_only_keeps_the_device_checks_and_says_what_it_could_not_check() -> None:
    found = run(SHAPES_CHECKS, shapes=True)
    assert found["elem"] == "meta"
    assert found["float64"] == ["EmulatedNPUError", "float64"], found
    assert found["mismatch"][1] == "device_mismatch", found
    assert found["sdpa_mask"] == ["EmulatedNPUError", "sdpa_mask"], found
    assert found["unique"][0] == "EmulatorLimitation", found
    assert found["item"] == 0.0 and found["finite"] is True and found["nan"] is False
    assert found["nonzero"] == [32, 2]  # every element assumed nonzero
    assert found["masked"] == [32]  # every mask element assumed true
    assert found["cpu"] == [0.0, 0.0]
    assert found["param"] == "meta"  # built on the host without its bytes
    ops = {entry["op"] for entry in found["unchecked"]}
    assert "aten._local_scalar_dense.default" in ops and "aten.nonzero.default" in ops, ops
    assert any("unique" in op for op in ops), ops


LOADERS = """
import os, struct, tempfile
folder = tempfile.mkdtemp()
found = {}
state = {"weight": torch.randn(64, 32), "bias": torch.zeros(64)}
path = os.path.join(folder, "checkpoint.pt")
npu_emulator.install()
torch.save(state, path)
loaded = torch.load(path, map_location="cpu")
with open("/proc/self/maps") as maps:
    found["mmap"] = path in maps.read()
header = {"weight": {"dtype": "BF16", "shape": [64, 32], "data_offsets": [0, 4096]},
          "bias": {"dtype": "F32", "shape": [64], "data_offsets": [4096, 4352]},
          "__metadata__": {"format": "pt"}}
text = json.dumps(header).encode()
path = os.path.join(folder, "model.safetensors")
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + bytes(4352))
tensors = npu_emulator.load_safetensors(path)
found["safetensors"] = {k: [list(v.shape), str(v.dtype), str(v.device)] for k, v in sorted(tensors.items())}
model = nn.Linear(32, 64).to(torch.bfloat16)
model.load_state_dict({k: v.to(torch.bfloat16) for k, v in tensors.items()})
model.to("npu")
found["model"] = [str(model.weight.device), str(model.weight.dtype)]
print(json.dumps(found))
"""


@needs_shapes_only
def test_weights_load_without_their_bytes() -> None:
    found = run(LOADERS, shapes=True)
    assert found["mmap"] is True  # torch.load maps the checkpoint instead of reading it
    assert found["safetensors"] == {
        "bias": [[64], "torch.float32", "meta"],
        "weight": [[64, 32], "torch.bfloat16", "meta"],
    }
    assert found["model"] == ["npu:0", "torch.bfloat16"]


@pytest.mark.parametrize("hbm_gb, status", [(64, "pass"), (0.001, "fail")])
def test_the_memory_check_says_whether_the_step_fits(hbm_gb: float, status: str) -> None:
    class Ledger:
        @staticmethod
        def summary() -> dict[str, Any]:
            return {"peak_bytes": 3 << 20, "phase": "backward", "module": "Policy.blocks.2", "by_phase": {},
                    "at_peak": {"parameters": 1 << 20, "gradients": 1 << 20, "optimizer_states": 0}}  # fmt: skip

        @staticmethod
        def round_size(n: int) -> int:
            return n

    class Watch:
        ledger = Ledger()

        @staticmethod
        def unit_bytes() -> int:
            return 1 << 18

    class Results:
        checks: dict[str, Any] = {}

        def check(self, name: str, status: str, detail: str, remedy: Any = None, data: Any = None) -> None:
            self.checks[name] = {"status": status, "detail": detail, "data": data}

    results = Results()
    memory.report(results, Watch(), {"hbm_gb": hbm_gb, "shard_over": 4})
    check = results.checks["pipeline.memory"]
    assert check["status"] == status, check
    assert check["data"]["fits"] is (status == "pass")
    assert check["data"]["hbm_bytes"] == int(hbm_gb * (1 << 30))
    assert "peak in backward at Policy.blocks.2" in check["detail"]
    assert check["data"]["sharding"]["nproc"] == 4
    if status == "fail":
        assert check["detail"].startswith("does not fit: 3.0 MB of 0.001 GB") and "FSDP over 4 cards" in check["detail"]


TRANSFORMERS = """
from transformers import LlamaConfig, LlamaForCausalLM
config = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4,
                     vocab_size=1000)
model = LlamaForCausalLM(config)
built_on = str(model.model.embed_tokens.weight.device)
model.to("npu")
optimizer = torch.optim.AdamW(model.parameters())
ids = torch.randint(0, 1000, (2, 64)).to("npu")
model(input_ids=ids, labels=ids).loss.backward()
optimizer.step()
print(json.dumps({"built_on": built_on, "peak": _ledger.summary()["peak_bytes"]}))
"""


def _has_transformers() -> bool:
    import importlib.util

    return importlib.util.find_spec("transformers") is not None


@pytest.mark.skipif(not _has_transformers(), reason="transformers is not installed in this interpreter")
def test_a_transformers_model_built_from_its_config_has_no_bytes_and_the_same_peak() -> None:
    full = run(TRANSFORMERS, shapes=False)
    shapes = run(TRANSFORMERS, shapes=True)
    assert full["built_on"] == "cpu" and shapes["built_on"] == "meta"
    assert abs(shapes["peak"] - full["peak"]) <= 0.05 * full["peak"], (full, shapes)
