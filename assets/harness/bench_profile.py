"""Measure what the step profile of ``npu-verify --pipeline`` costs, against the same run with ``--no-profile``.

Usage:
    python harness/bench_profile.py --verify bin/npu-verify --python PY --project PATH [--steps 4] [--rounds 2]
        [--config configs/train.yaml] [--json]

Runs ``npu-verify PROJECT --pipeline --emulate-npu`` on a copy of the project ``--rounds`` times with the profile and
as often without it (alternating), and prints the median time of the steps after the warm-up step (the profiled
steps; the profile is on during them) and of the whole program, with the ratio. The emulated device's own cost is in
both columns; on an NPU the profile's cost per op is the same Python work, next to much cheaper device ops.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def one_run(verify: str, python: str, project: Path, steps: int, config: str | None, profile: bool) -> dict:
    args = [verify, str(project), "--pipeline", "--emulate-npu", "--format", "json", "--quiet", "--python", python,
            "--steps", str(steps)]
    if config:
        args += ["--config", config]
    if not profile:
        args.append("--no-profile")
    out = subprocess.run(args, capture_output=True, text=True, check=False)
    if out.returncode == 2:
        sys.exit("npu-verify could not run:\n" + out.stderr)
    report = json.loads(out.stdout)
    run = next(c for c in report["checks"] if c["name"] == "pipeline.run")
    times = (run.get("data") or {}).get("step_times_s") or []
    if len(times) < 2:
        sys.exit("the run made fewer than 2 steps: {}".format(run["detail"]))
    return {"steps_s": times[1:], "program_s": sum(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verify", required=True, help="the npu-verify binary")
    parser.add_argument("--python", required=True, help="the interpreter with CPU torch")
    parser.add_argument("--project", required=True, type=Path, help="the project to train (copied first)")
    parser.add_argument("--config", help="the config the entry takes")
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per run (the first is the warm-up)")
    parser.add_argument("--rounds", type=int, default=2, help="runs with and without the profile")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / args.project.name
        shutil.copytree(args.project, project, ignore=shutil.ignore_patterns("__pycache__", "outputs"))
        runs: dict[str, list[dict]] = {"profile": [], "no_profile": []}
        for _ in range(args.rounds):
            for mode in ("no_profile", "profile"):
                runs[mode].append(one_run(args.verify, args.python, project, args.steps, args.config,
                                          mode == "profile"))
    figures = {}
    for mode, found in runs.items():
        step = statistics.median(t for r in found for t in r["steps_s"])
        program = statistics.median(r["program_s"] for r in found)
        figures[mode] = {"median_step_s": round(step, 4), "median_steps_total_s": round(program, 3)}
    figures["ratio_step"] = round(figures["profile"]["median_step_s"] / figures["no_profile"]["median_step_s"], 2)
    figures["ratio_total"] = round(
        figures["profile"]["median_steps_total_s"] / figures["no_profile"]["median_steps_total_s"], 2)
    if args.json:
        print(json.dumps(figures, sort_keys=True))
        return
    print("{:<12} {:>16} {:>22}".format("", "step after warm-up", "all steps"))
    for mode in ("no_profile", "profile"):
        f = figures[mode]
        print("{:<12} {:>15.3f}s {:>21.3f}s".format(mode, f["median_step_s"], f["median_steps_total_s"]))
    print("{:<12} {:>15.2f}x {:>21.2f}x".format("ratio", figures["ratio_step"], figures["ratio_total"]))


if __name__ == "__main__":
    main()
