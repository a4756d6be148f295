"""What runs on this interpreter's torch: the runtime patches and the emulated npu device (one JSON object).

Run by `cargo xtask test` for every torch of the matrix, in a fresh interpreter, after that torch's test suites:
``python tests/torch-matrix/probe.py``. It installs the emulator, applies and removes the patcher (checking that
every original object is back), runs each patch's self-test on the emulated npu, and triggers each emulator
restriction group once. Timings go under "timing" (not committed: they vary between runs).
"""

from __future__ import annotations

import builtins
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.dont_write_bytecode = True
sys.path[:0] = [str(ROOT / "assets" / "emulator"), str(ROOT / "assets")]

import numpy  # noqa: E402
import torch  # noqa: E402


def tracked() -> dict[str, Any]:
    state: dict[str, Any] = {"builtins.min": builtins.min, "builtins.max": builtins.max}
    for name in ("tensor", "as_tensor", "from_numpy", "pow", "nan_to_num", "float64", "double"):
        state[f"torch.{name}"] = getattr(torch, name)
    state["F.scaled_dot_product_attention"] = torch.nn.functional.scaled_dot_product_attention
    state["torch.optim.AdamW"] = torch.optim.AdamW
    for key, value in torch.Tensor.__dict__.items():
        if key != "__slotnames__":
            state[f"torch.Tensor.{key}"] = value
    return state


def restriction_triggers(npu: torch.device) -> dict[str, Any]:
    f = torch.nn.functional
    x = torch.ones(3, 4, device=npu)
    q = torch.randn(2, 3, 4, 8, device=npu)
    return {
        "device_mismatch": lambda: x + torch.ones(3, 4),
        "index_device": lambda: x[torch.tensor([0, 1])],
        "numpy": lambda: x.numpy(),
        "float64": lambda: torch.ones(3, dtype=torch.float64, device=npu) @ torch.ones(3, dtype=torch.float64, device=npu),
        "sdpa_mask": lambda: f.scaled_dot_product_attention(q, q, q, torch.ones(2, 1, 1, 4, dtype=torch.bool, device=npu)),
        "nan_to_num_half": lambda: torch.nan_to_num(x.half()),
        "pow_fractional": lambda: torch.pow(torch.arange(3, device=npu), 0.5),
    }


def per_op_us(device: torch.device, repeat: int = 2000) -> float:
    a = torch.ones(8, 8, device=device)
    b = torch.ones(8, 8, device=device)
    for _ in range(100):
        a + b
    start = time.perf_counter()
    for _ in range(repeat):
        a + b
    return (time.perf_counter() - start) / repeat * 1e6


def round_trip(out: dict[str, Any]) -> Any:
    """Apply and remove every patch; record each one's state and any object not restored."""
    import runtime_patches as rp

    before = tracked()
    patcher = rp.build_vla_patcher(fused_adamw=True, tensor_index="mode")
    patcher.apply()
    out["patches"] = {s.name: {"state": s.state, "reason": s.reason} for s in patcher.report()}
    patcher.remove()
    after = tracked()
    out["not_restored"] = sorted(k for k in before.keys() | after.keys() if before.get(k) is not after.get(k))
    return rp


def main() -> int:
    out: dict[str, Any] = {
        "torch": torch.__version__.split("+")[0],
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "timing": {},
    }
    import npu_emulator

    cpu_us = per_op_us(torch.device("cpu"))
    start = time.perf_counter()
    try:
        npu_emulator.install()
    except npu_emulator.EmulatedNPUError as error:
        out["emulator"] = {"installed": False, "reason": str(error)}
        round_trip(out)
        print(json.dumps(out, indent=1))
        return 0
    out["timing"]["emulator_install_s"] = round(time.perf_counter() - start, 2)
    # After install(): the stand-in torch_npu that AdamWFused imports installs the device itself.
    rp = round_trip(out)

    npu = torch.device("npu:0")
    out["emulator"] = {"installed": True, "backend": npu_emulator._install.backend(), "restrictions": {}}
    for group, trigger in restriction_triggers(npu).items():
        try:
            trigger()
        except npu_emulator.EmulatedNPUError as error:
            held = error.group == group
            out["emulator"]["restrictions"][group] = "holds" if held else f"raised group {error.group}"
        except Exception as error:  # noqa: BLE001 - recorded: a restriction that fails differently
            out["emulator"]["restrictions"][group] = f"{type(error).__name__}: {error}"[:200]
        else:
            out["emulator"]["restrictions"][group] = "does not fail"
    self_tests = rp.self_test(npu, fused_adamw=True, tensor_index="mode")
    out["self_test"] = {name: ("passes" if ok else f"fails: {detail}") for name, ok, detail in self_tests}
    npu_us = per_op_us(npu)
    out["timing"]["cpu_op_us"] = round(cpu_us, 1)
    out["timing"]["npu_op_us"] = round(npu_us, 1)
    out["timing"]["emulator_extra_us_per_op"] = round(npu_us - cpu_us, 1)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
