"""The project files a run executed (assets/harness/npu_verify_harness/executed.py): read from ``sys.modules``
once the program stopped, so a lazily imported module counts and a module never imported does not."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HARNESS = ROOT / "assets" / "harness"
sys.path.insert(0, str(HARNESS))

from npu_verify_harness import executed  # noqa: E402


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")


def test_lazy_imports_count_and_unimported_modules_do_not(tmp_path: Path) -> None:
    write(tmp_path, "pkg/__init__.py", "")
    write(
        tmp_path,
        "pkg/factory.py",
        """
        def make(name):
            if name == "a":
                from pkg import a
                return a
            from pkg import b
            return b
        """,
    )
    write(tmp_path, "pkg/a.py", "A = 1\n")
    write(tmp_path, "pkg/b.py", "B = 1\n")
    write(tmp_path, "migrate_to_cloudrobo/runtime_patches.py", "")
    write(tmp_path, ".venv/lib/site-packages/dep.py", "")
    write(
        tmp_path,
        "train.py",
        """
        import sys
        sys.path[:0] = [sys.argv[1], sys.argv[2] + "/migrate_to_cloudrobo", sys.argv[2] + "/.venv/lib/site-packages"]
        import json, runtime_patches, dep
        from pkg.factory import make
        make("a")
        from npu_verify_harness.executed import executed_files
        launch = {"kind": "script", "path": sys.argv[2] + "/train.py"}
        print(json.dumps(executed_files(sys.argv[2], launch)))
        """,
    )
    out = subprocess.run(
        [sys.executable, str(tmp_path / "train.py"), str(HARNESS), str(tmp_path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    import json

    found = json.loads(out)
    assert found["entry"] == "train.py"
    assert found["files"] == ["pkg/__init__.py", "pkg/a.py", "pkg/factory.py", "train.py"]
    assert found["seconds"] < 1.0


def test_paths_outside_the_root_or_relative_are_not_the_projects(tmp_path: Path) -> None:
    assert executed.relative(str(tmp_path), str(tmp_path.parent / "x.py")) is None
    assert executed.relative(str(tmp_path), str(tmp_path / "a" / "b.py")) == "a/b.py"
    assert executed.relative(str(tmp_path), str(tmp_path / "migrate_to_cloudrobo" / "p.py")) is None
