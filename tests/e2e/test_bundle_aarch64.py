"""The bundle's aarch64 binaries run, under qemu user emulation on another machine (or natively on an aarch64 one),
and give the same answers as the bundle's binaries for this machine.

Uses the staged bundle NPU_PATCHER_BUNDLE names (`cargo xtask test` sets it). Skipped, with the reason, when the bundle
has no `bin/aarch64/` (`cargo xtask dist` printed why: `rustup target add aarch64-unknown-linux-musl` and a C compiler
such as `aarch64-linux-gnu-gcc` build it) or when this machine can run neither aarch64 code nor `qemu-aarch64`
(Debian or Ubuntu: `apt-get install qemu-user-static`).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BINARIES = ("npu-scan", "npu-progress", "npu-verify", "npu-train", "npu-assets")
TIMEOUT_S = 600
EM_AARCH64 = 183


def _bundle() -> Path:
    value = os.environ.get("NPU_PATCHER_BUNDLE", "")
    if not value:
        pytest.fail("NPU_PATCHER_BUNDLE is not set: run the end-to-end tests through `cargo xtask test`")
    bundle = Path(value)
    if not (bundle / "SKILL.md").is_file():
        pytest.fail(f"{bundle} is not a built bundle: run `cargo xtask dist --debug`")
    return bundle


def _native() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def _runner() -> list[str]:
    """The command prefix that runs an aarch64 binary here."""
    if _native() == "aarch64":
        return []
    for name in ("qemu-aarch64", "qemu-aarch64-static"):
        found = shutil.which(name)
        if found:
            return [found]
    pytest.skip("no qemu-aarch64 or qemu-aarch64-static on PATH to run the aarch64 binaries "
                "(Debian or Ubuntu: apt-get install qemu-user-static)")


@pytest.fixture(scope="module")
def arm() -> Path:
    folder = _bundle() / "bin" / "aarch64"
    if not folder.is_dir():
        pytest.skip("the bundle has no bin/aarch64/: `cargo xtask dist` left it out and printed why "
                    "(it needs `rustup target add aarch64-unknown-linux-musl` and a C compiler such as "
                    "aarch64-linux-gnu-gcc; `--targets all` makes that an error)")
    return folder


@pytest.fixture(scope="module")
def native() -> Path:
    folder = _bundle() / "bin" / _native()
    if not folder.is_dir():
        pytest.fail(f"the bundle has no bin/{_native()}/ for this machine")
    return folder


def _run(argv: list[str | Path], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S,
                            stdin=subprocess.DEVNULL)
    print(f"$ {' '.join(str(a) for a in argv)}\n[exit {result.returncode}]\n{result.stdout[-2000:]}\n"
          f"{result.stderr[-2000:]}")
    return result


def test_the_aarch64_binaries_are_static_aarch64_elf(arm: Path) -> None:
    """Static: no dynamic loader, so no C library of the server is needed (any glibc, or musl)."""
    sys.path.insert(0, str(_bundle() / "scripts"))
    try:
        import bundle_check
    finally:
        sys.path.pop(0)
    assert (arm / "TARGET.txt").read_text().strip() == "aarch64-unknown-linux-musl"
    for name in BINARIES:
        elf = bundle_check.Elf((arm / name).read_bytes())
        assert elf.machine_id == EM_AARCH64, f"{name}: e_machine {elf.machine_id}"
        assert elf.interpreter() is None, f"{name} names the loader {elf.interpreter()}"
        assert elf.glibc_needed() is None, f"{name} needs glibc {elf.glibc_needed()}"


@pytest.mark.parametrize("name", BINARIES)
def test_version_and_help_match_this_machines_binary(arm: Path, native: Path, name: str) -> None:
    for flag in ("--version", "--help"):
        ours = _run([native / name, flag])
        theirs = _run([*_runner(), arm / name, flag])
        assert ours.returncode == 0, ours.stderr
        assert (theirs.returncode, theirs.stdout, theirs.stderr) == (0, ours.stdout, ours.stderr), (
            f"{name} {flag} differs on aarch64")


def _scan(binary: list[str | Path], demo: Path, work: Path) -> tuple[int, str, dict]:
    work.mkdir()
    result = _run([*binary, demo, "--output", "out"], cwd=work)
    report = json.loads((work / "out" / "issues.json").read_text())
    report.pop("scanned_at", None)
    # Each issue's history says when it was found: the two scans ran seconds apart.
    for issue in report.get("issues", []):
        for event in issue.get("history", []):
            event.pop("at", None)
    # The summary line says how long the scan took ("... config files in 0.10s; ...").
    stdout = re.sub(r" in \d+(\.\d+)?s;", " in <time>s;", result.stdout)
    return result.returncode, stdout, report


def test_npu_scan_finds_the_same_issues_in_the_demo(arm: Path, native: Path, tmp_path: Path) -> None:
    demo = _bundle() / "source" / "assets" / "demo" / "tiny-vla"
    assert demo.is_dir(), "the bundle's source/ has no demo project"
    code, stdout, report = _scan([native / "npu-scan"], demo, tmp_path / "native")
    arm_code, arm_stdout, arm_report = _scan([*_runner(), arm / "npu-scan"], demo, tmp_path / "aarch64")
    assert code == 1 and report["summary"]["total"] > 0, stdout
    assert (arm_code, arm_stdout) == (code, stdout)
    assert arm_report == report
