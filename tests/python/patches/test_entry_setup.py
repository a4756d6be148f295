"""The NPU setup that ``npu-scan --fix`` inserts into entry files (P_ENT) is idempotent in one process.

Two fixed entries that import each other, or a fixed entry that imports a module with its own setup, run the
setup twice; the second ``_NPU_PATCHER.apply()`` keeps the first patcher and does nothing. The setup text
is read from the scanner's P_ENT fix snapshot, so these tests run exactly what ``--fix`` inserts, with the
stand-in ``torch_npu`` importable so that the setup's Ascend branch is taken.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import runtime_patches as rp

ROOT = Path(__file__).resolve().parents[3]
SNAPSHOT = ROOT / "crates" / "scan" / "tests" / "snapshots" / "fixes__fix_P_ENT.snap"
EMULATOR = ROOT / "assets" / "emulator"
RUNTIME_PATCHES = ROOT / "assets" / "runtime_patches.py"


def inserted_setup(depth: int) -> str:
    """The setup block the P_ENT fix inserts into an entry file ``depth`` directories below the project root."""
    text = SNAPSHOT.read_text(encoding="utf-8")
    for header in re.finditer(r"^\+\+\+ b/(\S+)\n", text, re.MULTILINE):
        if header.group(1).count("/") != depth:
            continue
        added: list[str] = []
        for line in text[header.end() :].splitlines():
            if line.startswith(("--- a/", "+++ b/")):
                break
            if line.startswith("+"):
                added.append(line[1:])
            elif added:
                break
        block = "\n".join(added) + "\n"
        if "_NPU_PATCHER.apply()" in block and block.startswith("try:"):
            return block
    raise AssertionError(f"{SNAPSHOT} has no inserted P_ENT setup for a file {depth} directories deep")


def make_project(tmp_path: Path, files: dict[str, str]) -> Path:
    project = tmp_path / "project"
    (project / "migrate_to_cloudrobo").mkdir(parents=True)
    shutil.copy(RUNTIME_PATCHES, project / "migrate_to_cloudrobo" / "runtime_patches.py")
    for name, body in files.items():
        path = project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        depth = name.count("/")
        path.write_text(body.replace("<SETUP>\n", inserted_setup(depth)), encoding="utf-8")
    return project


def run_entry(project: Path, entry: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(EMULATOR)  # the stand-in torch_npu; runtime_patches comes from migrate_to_cloudrobo/
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run(
        [sys.executable, "-W", "always::RuntimeWarning", entry],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


REPORT = """
import runtime_patches as _rp
_active = _rp.active_patcher()
print("active:", _active is not None and _active.applied)
print("applied at:", _active.applied_at if _active is not None else None)
print("float64 patched:", torch.float64 is torch.float32)
"""


def test_two_fixed_entries_importing_each_other_apply_one_patcher(tmp_path: Path) -> None:
    project = make_project(
        tmp_path,
        {
            "train.py": "<SETUP>\nimport torch\n\nimport evaluate\nfrom pkg import model\n\n"
            "if __name__ == '__main__':\n    evaluate.main()\n    model.build()\n" + REPORT.replace("\n", "\n    "),
            "evaluate.py": "<SETUP>\nimport torch\n\n\ndef main():\n    print('evaluated')\n\n\n"
            "if __name__ == '__main__':\n    main()\n",
            "pkg/__init__.py": "",
            "pkg/model.py": "<SETUP>\nimport torch\n\n\ndef build():\n    print('built')\n",
        },
    )
    done = run_entry(project, "train.py")
    assert done.returncode == 0, f"train.py failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    out = done.stdout
    assert "evaluated" in out and "built" in out
    assert "active: True" in out and "float64 patched: True" in out, out
    # The patcher of train.py's own setup (the first to run) is the one in effect.
    assert re.search(r"applied at: .*train\.py:\d+", out), out
    assert "already applied" not in done.stderr, done.stderr  # same options: nothing to say


def test_a_fixed_entry_run_alone_still_sets_up(tmp_path: Path) -> None:
    project = make_project(tmp_path, {"evaluate.py": "<SETUP>\nimport torch\n" + REPORT})
    done = run_entry(project, "evaluate.py")
    assert done.returncode == 0, done.stderr
    assert "active: True" in done.stdout and re.search(r"applied at: .*evaluate\.py:\d+", done.stdout)


def test_conflicting_setups_warn_once_naming_both(tmp_path: Path) -> None:
    conflicting = "<SETUP>\nimport torch\nfrom runtime_patches import build_vla_patcher as _b\n"
    project = make_project(
        tmp_path,
        {
            "train.py": "<SETUP>\nimport torch\nimport second\nimport third\n" + REPORT,
            "second.py": conflicting + "_b(BuiltinMinMaxNPU=False).apply()\n",
            "third.py": conflicting + "_b(BuiltinMinMaxNPU=False).apply()\n",
        },
    )
    done = run_entry(project, "train.py")
    assert done.returncode == 0, done.stderr
    warnings_shown = [line for line in done.stderr.splitlines() if "runtime patcher is already applied" in line]
    assert len(warnings_shown) == 1, done.stderr
    warning = warnings_shown[0]
    assert "train.py" in warning and "second.py" in warning and "BuiltinMinMaxNPU=False" in warning, warning
    assert "BuiltinMinMaxNPU=True" in warning, warning
    assert "active: True" in done.stdout


def test_second_apply_in_process_keeps_the_first(make_patcher) -> None:
    first = make_patcher()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert make_patcher(apply=False).apply() is first  # same options: silent
    second = rp.build_vla_patcher(tensor_index="mode", PowFloatSafe=False)
    with pytest.warns(RuntimeWarning, match=r"PowFloatSafe=False.*PowFloatSafe=True") as caught:
        assert second.apply() is first
    assert len(caught) == 1 and "test_entry_setup.py" in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert second.apply() is first  # the same conflict warns once
    assert not second.applied and rp.active_patcher() is first and torch.float64 is torch.float32
    with second:  # a scoped second setup neither applies nor removes anything
        assert rp.active_patcher() is first
    assert first.applied
    first.remove()
    assert second.apply() is second  # once the first is removed, another one applies
    second.remove()
