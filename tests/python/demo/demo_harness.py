"""Paths and subprocess helpers for the demo-project tests.

The demo projects run in child interpreters on copies of their trees, so that their imports (torch_npu stand-in,
runtime patches, the emulated device) never leak into the pytest process and nothing is written under assets/.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "assets" / "demo"
ORIGINAL = DEMO / "tiny-vla"
FIXED = DEMO / "tiny-vla-fixed"
KEY = DEMO / "tiny-vla.expected.json"
PATCH = DEMO / "tiny-vla.fix.patch"
EMULATOR = ROOT / "assets" / "emulator"
RUNTIME_PATCHES = ROOT / "assets" / "runtime_patches.py"

TIMEOUT_S = 600
STEP_LINE = re.compile(r"^step\s+(\d+)/(\d+) \| loss (\S+) \|", re.MULTILINE)
DONE_LINE = re.compile(r"^done: (\d+) steps, final loss (\S+), checkpoint (.+)$", re.MULTILINE)

# Runs a script as __main__ after optionally installing the emulated npu device. For a project that does not set up
# the NPU itself, "emulate+transfer" adds what an entry point's setup does first (torch_npu, transfer_to_npu) and
# "emulate+setup" also applies the runtime patcher from ./migrate_to_cloudrobo. Prints the entry's patcher, if any.
LAUNCHER = """
import runpy, sys
mode, script, *args = sys.argv[1:]
if mode.startswith("emulate"):
    sys.path.insert(0, {emulator!r})
    import npu_emulator
    npu_emulator.install()
if mode in ("emulate+transfer", "emulate+setup"):
    import torch_npu
    from torch_npu.contrib import transfer_to_npu
if mode == "emulate+setup":
    sys.path.insert(0, "migrate_to_cloudrobo")
    from runtime_patches import build_vla_patcher
    build_vla_patcher().apply()
sys.argv = [script, *args]
sys.path.insert(0, ".")
result = runpy.run_path(script, run_name="__main__")
patcher = result.get("_NPU_PATCHER")
print("entry patcher:", "none" if patcher is None else type(patcher).__name__, flush=True)
if patcher is not None:
    print("patch fires:", sum(getattr(status, "fires", 0) for status in patcher.report()), flush=True)
"""


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return f"exit code {self.returncode}\n--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-6000:]}"

    def losses(self) -> list[float]:
        return [float(m.group(3)) for m in STEP_LINE.finditer(self.stdout)]

    def done(self) -> tuple[int, float, str]:
        match = DONE_LINE.search(self.stdout)
        assert match, "no 'done:' line\n" + self.describe()
        return int(match.group(1)), float(match.group(2)), match.group(3)


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "outputs", "migrate_to_cloudrobo"))
    return dst


def install_runtime_patches(project: Path) -> None:
    """What `npu-assets init` does for the patcher: migrate_to_cloudrobo/runtime_patches.py in the project."""
    assert RUNTIME_PATCHES.is_file(), f"{RUNTIME_PATCHES} is missing: the emulated-NPU demo run needs the runtime patcher"
    target = project / "migrate_to_cloudrobo"
    target.mkdir(exist_ok=True)
    shutil.copy2(RUNTIME_PATCHES, target / "runtime_patches.py")


def run_entry(project: Path, script: str, *args: str, mode: str = "plain") -> Run:
    """Runs `python <script> <args>` in `project` (mode plain), or through the emulator launcher."""
    env = dict(os.environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PYTHONPATH", None)
    env["HYDRA_FULL_ERROR"] = "1"
    if mode == "plain":
        cmd = [sys.executable, script, *args]
    else:
        cmd = [sys.executable, "-c", LAUNCHER.format(emulator=str(EMULATOR)), mode, script, *args]
    proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def assert_trained(run: Run, steps: int) -> float:
    assert run.returncode == 0, run.describe()
    done_steps, final_loss, checkpoint = run.done()
    assert done_steps == steps, run.describe()
    assert math.isfinite(final_loss), run.describe()
    losses = run.losses()
    assert losses and all(math.isfinite(x) for x in losses), run.describe()
    assert Path(checkpoint).is_file(), f"checkpoint {checkpoint} was not written"
    return final_loss


def load_key() -> dict:
    return json.loads(KEY.read_text(encoding="utf-8"))
