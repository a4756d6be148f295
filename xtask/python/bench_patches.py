"""Benchmark of the runtime patches (run by ``cargo xtask bench patches``; prints figures, asserts nothing).

1. Patcher overhead on a plain CPU training step of a small transformer policy: median step time with the
   patcher applied vs. not, alternating in one process (target: <= 3%).
2. Builtin ``min``/``max`` on ints and short lists with BuiltinMinMaxNPU applied (target: <= 0.3 us extra).
3. The emulated npu device: per-op overhead and the policy's step time vs. CPU.
"""

from __future__ import annotations

import argparse
import builtins
import gc
import json
import platform
import statistics
import sys
import time
import timeit
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT / "assets", ROOT / "assets" / "emulator", ROOT / "tests" / "python" / "patches"):
    sys.path.insert(0, str(path))

import torch  # noqa: E402

import patch_policy  # noqa: E402
import runtime_patches as rp  # noqa: E402


# CPU time of this process: other load on the machine delays it less than wall time. Torch runs with one
# thread here, so CPU time is the step's cost.
CLOCK = time.process_time


def log(message: str) -> None:
    sys.stderr.write(f"bench patches: {message}\n")


class Stepper:
    """One training step of the policy on a fixed batch (the batch moves to ``device`` every step)."""

    def __init__(self, device: str, depth: int, batch: int) -> None:
        data = patch_policy.make_data(samples=batch, seed=1)
        self.batch = {name: torch.from_numpy(array) for name, array in data.items()}
        self.batch["obs"] = self.batch["obs"].float()
        self.batch["target"] = self.batch["target"].float()
        self.device = device
        self.model = patch_policy.make_policy(depth=depth).to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)

    def step(self) -> None:
        batch = {name: value.to(self.device) for name, value in self.batch.items()}
        pred = self.model(batch["obs"], batch["tokens"], batch["keep"])
        loss = ((pred - batch["target"]) ** 2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()

    def time_steps(self, steps: int) -> float:
        # Collect first: apply()'s scan of sys.modules leaves garbage whose collection would land in whichever
        # half runs next.
        gc.collect()
        start = CLOCK()
        for _ in range(steps):
            self.step()
        return (CLOCK() - start) / steps


def step_overhead(rounds: int, steps: int, depth: int, batch: int, strategy: str) -> dict[str, Any]:
    stepper = Stepper("cpu", depth, batch)
    patcher = rp.build_vla_patcher(tensor_index=strategy)
    stepper.time_steps(steps)  # warm up both paths
    with patcher:
        stepper.time_steps(steps)
    plain, patched = [], []
    for index in range(rounds):
        # ABBA order, so that drift of the machine (other load, thermal state) hits both sides alike.
        if index % 2 == 0:
            plain.append(stepper.time_steps(steps))
        with patcher:
            patched.append(stepper.time_steps(steps))
        if index % 2 == 1:
            plain.append(stepper.time_steps(steps))
    plain_ms, patched_ms = statistics.median(plain) * 1e3, statistics.median(patched) * 1e3
    # Each round's two halves run back to back: their ratio cancels slow drift of the machine's load.
    paired = statistics.median(b / a for a, b in zip(plain, patched, strict=True))
    with patcher:
        hook_calls = count_hook_calls(stepper)
    return {
        "paired_overhead_pct": round((paired - 1.0) * 100.0, 2),
        "hook_calls_per_step": hook_calls,
        "tensor_index": strategy,
        "rounds": rounds,
        "steps_per_round": steps,
        "unpatched_ms": round(plain_ms, 4),
        "patched_ms": round(patched_ms, 4),
        "overhead_pct": round((patched_ms / plain_ms - 1.0) * 100.0, 2),
        "target_pct": 3.0,
    }


def count_hook_calls(stepper: Stepper) -> int:
    """How many patch wrappers one step enters (the work the patcher adds, whatever the timer's noise)."""
    calls = 0
    patches_file = rp.__file__

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        del arg
        if event == "call" and frame.f_code.co_filename == patches_file and frame.f_back is not None:
            if frame.f_back.f_code.co_filename != patches_file:
                calls += 1

    sys.setprofile(profile)
    try:
        stepper.step()
    finally:
        sys.setprofile(None)
    return calls


MINMAX_CASES = [
    ("max(1, 2)", "max(1, 2)"),
    ("min(3, 4)", "min(3, 4)"),
    ("max(2.5, x)", "max(2.5, x)"),
    ("max([1, 5, 3])", "max(short)"),
    ("min((4, 2))", "min(pair)"),
    ("max(a, b, key=abs)", "max(1, -7, key=abs)"),
    ("max([], default=0)", "max(empty, default=0)"),
]


def minmax_cost(number: int, repeat: int) -> list[dict[str, Any]]:
    namespace = {"x": 1.5, "short": [1, 5, 3], "pair": (4, 2), "empty": []}
    patcher = rp.build_vla_patcher(
        **{name: name == "BuiltinMinMaxNPU" for name in rp.PATCH_NAMES if name != "AdamWFused"}
    )

    def per_call(statement: str) -> float:
        # Look the builtin up at run time (as user code does), so the patched one is what runs.
        times = timeit.repeat(
            statement, globals=dict(namespace, __builtins__=builtins), number=number, repeat=repeat, timer=CLOCK
        )
        return min(times) / number * 1e9

    rows = []
    for label, statement in MINMAX_CASES:
        plain = per_call(statement)
        with patcher:
            patched = per_call(statement)
        rows.append(
            {
                "call": label,
                "builtin_ns": round(plain, 1),
                "patched_ns": round(patched, 1),
                "extra_ns": round(patched - plain, 1),
                "target_extra_ns": 300.0,
            }
        )
    return rows


def emulated_device(steps: int, depth: int, batch: int, repeat: int) -> dict[str, Any]:
    import npu_emulator

    npu_emulator.install()
    result: dict[str, Any] = {}
    for label, shape in (("add 8x8", (8, 8)), ("add 256x256", (256, 256))):
        times = {}
        for device in ("cpu", "npu"):
            a = torch.ones(shape, device=device)
            b = torch.ones(shape, device=device)
            number = 2000
            runs = timeit.repeat(lambda a=a, b=b: a + b, number=number, repeat=repeat, timer=CLOCK)
            times[device] = min(runs) / number * 1e6
        result[label] = {
            "cpu_us": round(times["cpu"], 2),
            "npu_us": round(times["npu"], 2),
            "overhead_us": round(times["npu"] - times["cpu"], 2),
        }
    with rp.build_vla_patcher():
        cpu = Stepper("cpu", depth, batch)
        npu = Stepper("npu", depth, batch)
        cpu.time_steps(2)
        npu.time_steps(2)
        cpu_ms = statistics.median(cpu.time_steps(1) for _ in range(steps)) * 1e3
        npu_ms = statistics.median(npu.time_steps(1) for _ in range(steps)) * 1e3
    result["policy_step"] = {
        "cpu_ms": round(cpu_ms, 3),
        "npu_ms": round(npu_ms, 3),
        "slowdown_x": round(npu_ms / cpu_ms, 2),
    }
    return result


def render(report: dict[str, Any]) -> str:
    lines = [
        f"runtime patch benchmark (torch {report['torch']}, Python {report['python']}, {report['machine']}; "
        "process CPU time, torch on 1 thread)",
        "",
    ]
    lines.append("1. patcher overhead on a CPU training step (median; target <= 3%)")
    for row in report["step_overhead"]:
        lines.append(
            f"   tensor_index={row['tensor_index']:<4}  unpatched {row['unpatched_ms']:8.3f} ms  "
            f"patched {row['patched_ms']:8.3f} ms  overhead {row['overhead_pct']:+6.2f}% "
            f"(paired rounds {row['paired_overhead_pct']:+6.2f}%)"
        )
    row = report["step_overhead"][0]
    lines.append(
        f"   {row['rounds']} rounds x {row['steps_per_round']} steps each; a step enters "
        f"{row['hook_calls_per_step']} patch wrappers"
    )
    lines += ["", "2. builtin min/max with BuiltinMinMaxNPU (best of repeats; target <= 300 ns extra)"]
    for row in report["minmax"]:
        lines.append(
            f"   {row['call']:<22} builtin {row['builtin_ns']:7.1f} ns  patched {row['patched_ns']:7.1f} ns  "
            f"extra {row['extra_ns']:+7.1f} ns"
        )
    emulated = report.get("emulated")
    if emulated:
        lines += ["", "3. emulated npu device"]
        for label in ("add 8x8", "add 256x256"):
            row = emulated[label]
            lines.append(
                f"   {label:<12} cpu {row['cpu_us']:7.2f} us  npu {row['npu_us']:7.2f} us  "
                f"per-op overhead {row['overhead_us']:+7.2f} us"
            )
        step = emulated["policy_step"]
        lines.append(
            f"   policy step  cpu {step['cpu_ms']:7.3f} ms  npu {step['npu_ms']:7.3f} ms  ({step['slowdown_x']}x CPU)"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run, noisier figures)")
    parser.add_argument("--no-emulator", action="store_true", help="skip the emulated-device figures")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rounds, steps, number, repeat = (6, 3, 20_000, 3) if args.quick else (60, 5, 200_000, 9)
    depth, batch = 2, 16
    report: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "policy": {"depth": depth, "batch": batch, "width": patch_policy.WIDTH, "tokens": patch_policy.TOKENS + 1},
    }
    log("builtin min/max")
    report["minmax"] = minmax_cost(number, repeat)
    log("CPU training step, mode strategy")
    report["step_overhead"] = [step_overhead(rounds, steps, depth, batch, "mode")]
    log("CPU training step, slot strategy")
    report["step_overhead"].insert(0, step_overhead(rounds, steps, depth, batch, "slot"))
    if not args.no_emulator:
        log("emulated npu device")
        report["emulated"] = emulated_device(rounds, depth, batch, repeat)
    sys.stdout.write((json.dumps(report, indent=2) if args.json else render(report)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
