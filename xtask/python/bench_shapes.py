"""Benchmark of ``npu-verify --shapes-only`` (run by ``cargo xtask bench shapes``; prints figures, asserts nothing).

For each size of ``vla_shapes_train.py`` (a VLA of OpenVLA-7B's shapes, a 1.1B one, a tiny one) in a fresh project
folder: one training step pre-flighted with ``npu-verify --pipeline --emulate-npu --shapes-only --hbm-gb 64
--steps 1``, its wall time, the peak RSS of the processes it started (``RUSAGE_CHILDREN`` of a fresh process
per run: the largest, the harness), and the memory report (peak per card, phase and module at the peak, the parts
alive at it, per card sharded over 8). The tiny model also runs in full (with data), and its peak is compared with the shapes-only one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
GB = float(1 << 30)


def log(message: str) -> None:
    sys.stderr.write(f"bench shapes: {message}\n")


# Runs the command and prints, last on stderr, the peak RSS in KB of the largest process it started and waited for
# (npu-verify waits for the harness, so the harness counts).
MEASURE = """
import resource, subprocess, sys
code = subprocess.run(sys.argv[1:]).returncode
sys.stderr.write("\\n%d\\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(code)
"""


def run(verify: str, python: str, size: str, shapes: bool, hbm_gb: float) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix=f"bench-shapes-{size}-"))
    try:
        shutil.copy(HERE / "vla_shapes_train.py", folder / "train.py")
        command = [verify, str(folder), "--pipeline", "--emulate-npu", "--steps", "1", "--format", "json",
                   "--python", python, "--hbm-gb", str(hbm_gb), "--nproc-per-node", "8", "--quiet"]  # fmt: skip
        if shapes:
            command.append("--shapes-only")
        command += ["--", "python", "train.py", "--size", size, "--steps", "2"]
        started = time.perf_counter()
        # A fresh process per run, so that its RUSAGE_CHILDREN peak is this run's alone.
        done = subprocess.run([sys.executable, "-c", MEASURE, *command], capture_output=True, text=True, check=False)
        wall = time.perf_counter() - started
        lines = done.stderr.strip().splitlines()
        rss_kb = int(lines[-1]) if lines and lines[-1].isdigit() else 0
        try:
            report = json.loads(done.stdout)
        except ValueError:
            log(f"{size}: no JSON report (exit {done.returncode}):\n{done.stderr[-2000:]}")
            return {"size": size, "shapes_only": shapes, "error": done.returncode}
        checks = {c["name"]: c for c in report["checks"]}
        memory = checks.get("pipeline.memory", {})
        run_check = checks.get("pipeline.run", {})
        return {
            "size": size,
            "shapes_only": shapes,
            "wall_s": round(wall, 1),
            "peak_rss_gb": round(rss_kb / (1 << 20), 2),
            "run": run_check.get("status"),
            "run_detail": run_check.get("detail"),
            "memory_status": memory.get("status"),
            "memory_line": memory.get("detail"),
            "memory": memory.get("data"),
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--verify", required=True, help="the npu-verify binary")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--sizes", default="7b,1b,tiny")
    parser.add_argument("--hbm-gb", type=float, default=64.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    order = {"tiny": 0, "1b": 1, "7b": 2}
    for size in sorted(args.sizes.split(","), key=lambda s: order.get(s, 9)):
        if size == "tiny":
            log("tiny, full run (with data)")
            rows.append(run(args.verify, args.python, size, False, args.hbm_gb))
        log(f"{size}, shapes only")
        rows.append(run(args.verify, args.python, size, True, args.hbm_gb))
    full = next((r for r in rows if r["size"] == "tiny" and not r["shapes_only"] and r.get("memory")), None)
    shapes = next((r for r in rows if r["size"] == "tiny" and r["shapes_only"] and r.get("memory")), None)
    agreement = None
    if full and shapes:
        a, b = full["memory"]["peak_bytes"], shapes["memory"]["peak_bytes"]
        agreement = {"full_peak_bytes": a, "shapes_peak_bytes": b, "difference_pct": round(100 * (b - a) / a, 2)}
    if args.json:
        print(json.dumps({"cpus": os.cpu_count(), "runs": rows, "tiny_agreement": agreement}, indent=2))
        return 0
    print(f"npu-verify --pipeline --emulate-npu --steps 1 --hbm-gb {args.hbm_gb:g} ({os.cpu_count()} CPUs)")
    print(f"{'model':<6} {'mode':<12} {'wall s':>7} {'RSS GB':>7}  memory")
    for row in rows:
        mode = "shapes-only" if row["shapes_only"] else "full"
        rss = "-" if row.get("peak_rss_gb") is None else f"{row['peak_rss_gb']:.2f}"
        print(f"{row['size']:<6} {mode:<12} {row.get('wall_s', '-'):>7} {rss:>7}  {row.get('memory_line')}")
        data = row.get("memory") or {}
        parts = data.get("at_peak") or {}
        if parts:
            listed = ", ".join(f"{k} {v / GB:.2f}" for k, v in parts.items())
            print(f"{'':<28}at the peak (GB): {listed}")
        sharding = data.get("sharding") or {}
        if sharding:
            print(f"{'':<28}per card over {sharding['nproc']}: DDP {sharding['ddp_bytes'] / GB:.1f}, ZeRO-1 "
                  f"{sharding['zero1_bytes'] / GB:.1f}, ZeRO-2 {sharding['zero2_bytes'] / GB:.1f}, FSDP2 "
                  f"{sharding['fsdp_bytes'] / GB:.1f} GB")  # fmt: skip
        if row.get("run") != "pass":
            print(f"{'':<28}run: {row.get('run')}: {row.get('run_detail')}")
    if agreement:
        print(f"tiny: shapes-only peak {agreement['shapes_peak_bytes']} B vs full run {agreement['full_peak_bytes']} B "
              f"({agreement['difference_pct']:+.2f}%)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
