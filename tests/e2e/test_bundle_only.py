"""The port on a machine without an NPU, from nothing but the unpacked release tarball and a CPU-torch Python.

No checkout is used: the tarball NPU_PATCHER_BUNDLE_ARCHIVE names is unpacked into a temporary folder, the demo project is
taken from the bundle's own `bin/npu-assets extract`, and every command runs with a clean environment (the Python's
bin/ and the system folders on PATH, no PYTHONPATH, no cargo variables, cwd outside the checkout). The steps follow
SKILL.md with its "Pre-flight Without an NPU" section: init --emulator -> scan -> fixes -> check-complete -> verify
runtime/pipeline and data on the emulated npu -> `NPU_PATCHER_EMULATE=1 bash migrate_to_cloudrobo/train.sh python
train.py ...` -> summary, asserting on what each step prints.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]
CONFIG = "configs/train.yaml"
TIMEOUT_S = 900
SKIP_REASON = "the launcher passes the device on the command line"


def _archive() -> Path:
    value = os.environ.get("NPU_PATCHER_BUNDLE_ARCHIVE", "")
    if not value:
        pytest.fail("NPU_PATCHER_BUNDLE_ARCHIVE is not set: run the end-to-end tests through `cargo xtask test`")
    archive = Path(value)
    if not archive.is_file():
        pytest.fail(f"{archive} is missing: build the bundle with its tarball (`cargo xtask dist --debug`)")
    return archive


class Machine:
    """A clean machine: the unpacked skill, a project from the bundle's demo, a clean environment."""

    def __init__(self, base: Path) -> None:
        with tarfile.open(_archive()) as tar:
            tar.extractall(base / "skill", filter="data")
        (self.skill,) = (base / "skill").iterdir()
        python_bin = Path(sys.executable).parent
        self.env = {
            "PATH": os.pathsep.join([str(python_bin), "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": str(base / "home"),
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e",
        }
        (base / "home").mkdir()
        assert str(CHECKOUT) not in self.env["PATH"], "the checkout must not be on PATH"
        extracted = base / "extracted"
        self.run(self.skill / "bin" / "npu-assets", "extract", extracted, cwd=base, expect=0)
        self.fixed = extracted / "demo" / "tiny-vla-fixed"
        self.project = base / "tiny-vla"
        shutil.copytree(extracted / "demo" / "tiny-vla", self.project)
        self.work = base / "work"
        self.work.mkdir()
        self.run("git", "init", "-q", cwd=self.project, expect=0)
        self.run("git", "add", "-A", cwd=self.project, expect=0)
        self.run("git", "commit", "-q", "-m", "original CUDA project", cwd=self.project, expect=0)

    def run(self, *argv: str | Path, cwd: Path | None = None, expect: int | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(a) for a in argv], cwd=cwd or self.work, capture_output=True, text=True,
                                timeout=TIMEOUT_S, stdin=subprocess.DEVNULL, env={**self.env, **(env or {})})
        print(f"$ {' '.join(str(a) for a in argv)}\n[exit {result.returncode}]\n{result.stdout}\n{result.stderr}")
        if expect is not None:
            assert result.returncode == expect, f"expected exit {expect}\n{describe(result)}"
        return result

    def script(self, name: str, *args: str | Path, expect: int | None = None) -> subprocess.CompletedProcess[str]:
        """`python <skill dir>/scripts/<name> ...`, as SKILL.md writes it."""
        return self.run("python", self.skill / "scripts" / name, *args, expect=expect)

    def issues(self) -> list[dict]:
        return json.loads((self.work / "issues.json").read_text())["issues"]


def describe(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout ---\n{result.stdout[-4000:]}\n--- stderr ---\n{result.stderr[-4000:]}"


@pytest.fixture(scope="module")
def m(tmp_path_factory: pytest.TempPathFactory) -> Machine:
    return Machine(tmp_path_factory.mktemp("bundle-only"))


def test_1_the_bundle_ships_the_emulator_and_the_cited_facts(m: Machine) -> None:
    for rel in ("emulator/npu_emulator/__init__.py", "emulator/torch_npu/__init__.py", "emulator/README.md",
                "references/NPU-FACTS.md"):
        assert (m.skill / rel).is_file(), f"the bundle lacks {rel}"
    skill = (m.skill / "SKILL.md").read_text()
    assert "Pre-flight Without an NPU" in skill and "NPU_PATCHER_EMULATE=1" in skill


def test_1b_the_bundle_can_rebuild_its_binaries_offline(m: Machine) -> None:
    """build.sh, the workspace sources and every vendored crate are in the tarball; tests are not."""
    machines = sorted(d.name for d in (m.skill / "bin").iterdir() if d.is_dir())
    assert machines, "the bundle has no bin/<machine>/ folder"
    for machine in machines:
        triple = (m.skill / "bin" / machine / "TARGET.txt").read_text().strip()
        assert triple.startswith(f"{machine}-"), f"bin/{machine}/TARGET.txt names {triple}"
    prefix = f"{m.skill.name}-linux-"
    assert _archive().name.startswith(prefix) and _archive().name.endswith(".tar.gz"), _archive().name
    assert sorted(_archive().name[len(prefix):-len(".tar.gz")].split("-")) == machines
    for rel in ("build.sh", "scripts/build.py", "scripts/bundle_check.py", "source/Cargo.lock",
                "source/.cargo/config.toml", "source/crates/scan/src/main.rs", "source/assets/SKILL.md"):
        assert (m.skill / rel).is_file(), f"the bundle lacks {rel}"
    assert 'directory = "vendor"' in (m.skill / "source/.cargo/config.toml").read_text()
    vendored = {p.name for p in (m.skill / "source" / "vendor").iterdir()}
    assert any(name.startswith("rustpython-parser-") for name in vendored), vendored
    assert not list((m.skill / "source" / "crates").glob("*/tests")), "crate tests are shipped"
    assert not (m.skill / "source" / "corpus").exists()


def test_1c_the_bundle_ships_every_workspace_file_the_build_read(m: Machine) -> None:
    """Every workspace input that cargo's dep-info records for the bundle's binaries (sources and
    `include_str!` inputs anywhere in the tree) is in the tarball's source/, so `bash build.sh` finds it offline."""
    target = Path(os.environ.get("NPU_PATCHER_TARGET", CHECKOUT / "target"))
    triples = [p.read_text().strip() for p in (m.skill / "bin").glob("*/TARGET.txt")]
    folders = [target / "debug", target / "release"] + [target / t / p for t in triples for p in ("debug", "release")]
    dep_infos = [d / f"{binary}.d" for d in folders
                 for binary in ("npu-scan", "npu-progress", "npu-verify", "npu-train", "npu-assets")]
    dep_infos = [d for d in dep_infos if d.is_file()]
    assert dep_infos, f"no dep-info of the binaries under {target}"
    inputs = set()
    for dep_info in dep_infos:
        for line in dep_info.read_text().splitlines():
            if ": " not in line:
                continue
            for word in line.split(": ", 1)[1].replace("\\ ", "\0").split(" "):
                path = Path(os.path.normpath(word.replace("\0", " ")))
                if word and path.is_relative_to(CHECKOUT) and not path.is_relative_to(CHECKOUT / "target"):
                    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
                    for file in files:
                        if "__pycache__" not in file.parts:
                            inputs.add(file.relative_to(CHECKOUT).as_posix())
    assert "torch-npu/wheels.json" in inputs, "the release build reads torch-npu/wheels.json (npu-assets)"
    missing = sorted(rel for rel in inputs if not (m.skill / "source" / rel).is_file())
    assert not missing, f"source/ lacks files the build reads: {missing}"


def test_2_init_with_the_emulator(m: Machine) -> None:
    result = m.run(m.skill / "bin" / "npu-assets", "init", m.project, "--emulator", expect=0)
    assert "created" in result.stdout and "migrate_to_cloudrobo/train.sh" in result.stdout
    assert "migrate_to_cloudrobo/emulator/torch_npu/__init__.py" in result.stdout
    # The emulator copy is git-ignored: the port's own files are what git sees.
    status = m.run("git", "status", "--porcelain", "--untracked-files=all", cwd=m.project, expect=0).stdout
    assert "migrate_to_cloudrobo/train.sh" in status and "emulator" not in status, status
    m.run("git", "add", "-A", cwd=m.project, expect=0)
    m.run("git", "commit", "-q", "-m", "add migrate_to_cloudrobo", cwd=m.project, expect=0)


def test_3_scan(m: Machine) -> None:
    result = m.script("scan.py", m.project, "--output", ".", expect=1)
    assert "P_ENT" in result.stdout and "total" in result.stdout
    assert "issues.json:" in result.stdout + result.stderr
    assert all(i["status"] == "pending" for i in m.issues()) and m.issues()


def test_4_fix_every_issue_then_check_complete(m: Machine) -> None:
    cfg = next(i for i in m.issues() if i["pattern"] == "P_CFG")
    m.script("progress.py", "issues.json", "--skip", cfg["id"], "--reason", SKIP_REASON, expect=0)
    applied: set[str] = set()
    for _ in range(200):
        nxt = m.script("progress.py", "issues.json", "--next", "--format", "json", expect=0)
        payload = json.loads(nxt.stdout)
        issue = payload.get("issue", payload) if payload else None
        if not issue or not issue.get("id"):
            break
        if issue["file"] not in applied:
            shutil.copyfile(m.fixed / issue["file"], m.project / issue["file"])
            applied.add(issue["file"])
        fixed = m.script("progress.py", "issues.json", "--fixed", issue["id"], expect=0)
        assert issue["id"] in fixed.stdout + fixed.stderr
    else:
        pytest.fail("the fix loop did not end")
    for path in m.fixed.rglob("*"):
        rel = path.relative_to(m.fixed).as_posix()
        if path.is_file() and "__pycache__" not in rel:
            shutil.copyfile(path, m.project / rel)
    complete = m.script("progress.py", "issues.json", "--check-complete", expect=0)
    assert "complete" in (complete.stdout + complete.stderr).lower()


def test_5_verify_runtime_and_pipeline_emulated(m: Machine) -> None:
    result = m.script("verify.py", m.project, "--runtime", "--pipeline", "--config", CONFIG, "--emulate-npu",
                      expect=0)
    assert "emulated npu device from the project's migrate_to_cloudrobo/emulator" in result.stderr
    assert "pipeline" in result.stdout and "emulated" in result.stdout
    report = json.loads((m.project / "migrate_to_cloudrobo" / "verify-report.json").read_text())
    assert report["emulated"] is True
    assert not [c for c in report["checks"] if c["status"] == "fail"], report["checks"]


def test_6_verify_data_emulated(m: Machine) -> None:
    result = m.script("verify.py", m.project, "--data", "--config", CONFIG, "--emulate-npu", expect=0)
    assert "data" in result.stdout


def test_7_train_sh_emulated(m: Machine) -> None:
    result = m.run("bash", "migrate_to_cloudrobo/train.sh", "python", "train.py", "--config", CONFIG,
                   "--max-steps", "2", "--output-dir", "outputs/e2e", cwd=m.project,
                   env={"NPU_PATCHER_EMULATE": "1"}, expect=0)
    assert "train.sh: EMULATED NPU" in result.stderr
    assert "the run above (exit 0) used the emulated npu device" in result.stderr
    assert "device npu:0" in result.stdout, "the demo must train on the emulated npu, not the CPU"
    assert "done: 2 steps" in result.stdout
    # npu-verify keeps its runs' logs there too (verify_*.log): the training log is the other one.
    (log,) = [p for p in (m.project / "migrate_to_cloudrobo" / "logs").glob("*.log") if not p.name.startswith("verify_")]
    text = log.read_text()
    assert "# EMULATED NPU" in text and "done: 2 steps" in text and "# exit code: 0" in text

    without = m.run("bash", "migrate_to_cloudrobo/train.sh", "python", "-c", "import torch_npu", cwd=m.project)
    assert without.returncode != 0 and "torch_npu" in without.stdout, "without the switch nothing is emulated"


def test_8_summary(m: Machine) -> None:
    result = m.run(m.skill / "bin" / "npu-assets", "summary", m.project, "--issues", m.work / "issues.json",
                   expect=0)
    assert "ADAPTATION_SUMMARY.md" in result.stdout
    summary = (m.project / "migrate_to_cloudrobo" / "ADAPTATION_SUMMARY.md").read_text()
    assert SKIP_REASON in summary and "train.py" in summary
    for pattern in {i["pattern"] for i in m.issues()}:
        assert pattern in summary, f"the summary does not mention {pattern}"
    rows = {line.split("|")[1].strip(): line for line in summary.splitlines() if line.startswith("| ")}
    # Every step the tools recorded has a time and says where it comes from.
    for step, source in (("3", "issues.json histories"), ("5–6", "verify-runs.jsonl"), ("7", "# started:")):
        took = rows[step].split("|")[4].strip()
        assert took != "not recorded" and source in rows[step], rows[step]
    assert "| not recorded |" in rows["4"]
    # The checkpoint the emulated run wrote is its output, not a code change; the emulator copy is ignored.
    assert "| `outputs/e2e/policy.pt` |" not in summary
    assert "written while a training or verify run was going (its outputs): " in summary
    assert "`outputs/e2e/policy.pt`" in summary
    ignored = summary.split("what `.gitignore` leaves out: ")[1].split("\n")[0]
    assert ignored == (
        "`migrate_to_cloudrobo/emulator/`, `migrate_to_cloudrobo/logs/`, `migrate_to_cloudrobo/verify-report.json`."
    ), ignored
    assert not (m.project / "issues.json.lock").exists() and not (m.work / "issues.json.lock").exists()
