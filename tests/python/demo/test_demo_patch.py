"""assets/demo/tiny-vla.fix.patch turns the original project into the fixed one, exactly."""

from __future__ import annotations

import filecmp
import shutil
import subprocess
from pathlib import Path

from demo_harness import FIXED, ORIGINAL, PATCH, copy_tree


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and "outputs" not in p.parts
    }


def _apply(patch: Path, project: Path) -> subprocess.CompletedProcess:
    if shutil.which("patch"):
        cmd = ["patch", "-p1", "--forward", "--no-backup-if-mismatch", "-i", str(patch)]
    else:
        cmd = ["git", "apply", "-p1", str(patch)]
    return subprocess.run(cmd, cwd=project, capture_output=True, text=True, check=False)


def test_patch_turns_the_original_into_the_fixed_tree(tmp_path: Path) -> None:
    project = copy_tree(ORIGINAL, tmp_path / "tiny-vla")
    result = _apply(PATCH, project)
    assert result.returncode == 0, result.stdout + result.stderr
    got, want = _tree(project), _tree(FIXED)
    assert sorted(got) == sorted(want)
    differing = [name for name in want if got[name] != want[name]]
    assert not differing, f"patch result differs from tiny-vla-fixed in {differing}: regenerate the patch (assets/demo/README.md)"


def test_patch_touches_every_changed_file_and_nothing_else() -> None:
    text = PATCH.read_text(encoding="utf-8")
    patched = {line.split()[1].split("/", 1)[1] for line in text.splitlines() if line.startswith("--- ")}
    comparison = filecmp.dircmp(ORIGINAL, FIXED, ignore=["__pycache__", "outputs"])

    def changed(cmp: filecmp.dircmp, prefix: str = "") -> set[str]:
        names = {prefix + n for n in cmp.diff_files + cmp.left_only + cmp.right_only}
        for sub, sub_cmp in cmp.subdirs.items():
            names |= changed(sub_cmp, f"{prefix}{sub}/")
        return names

    assert patched == changed(comparison)
