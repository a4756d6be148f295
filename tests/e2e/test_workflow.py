"""The whole SKILL.md workflow, literally, through the release bundle's launchers, on a copy of the demo project.

`cargo xtask test` builds the bundle and passes its path in NPU_PATCHER_BUNDLE. Each step's exit code and key
output are asserted; the steps share one project copy and run in order (module-scoped fixtures, numbered tests).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "assets" / "demo"
ORIGINAL = DEMO / "tiny-vla"
FIXED = DEMO / "tiny-vla-fixed"
KEY = DEMO / "tiny-vla.expected.json"
CONFIG = "configs/train.yaml"
TIMEOUT_S = 900


def _bundle() -> Path:
    value = os.environ.get("NPU_PATCHER_BUNDLE", "")
    if not value:
        pytest.fail("NPU_PATCHER_BUNDLE is not set: run the end-to-end test through `cargo xtask test`")
    bundle = Path(value)
    if not (bundle / "SKILL.md").is_file():
        pytest.fail(f"NPU_PATCHER_BUNDLE={bundle} is not a built bundle (no SKILL.md): run `cargo xtask dist`")
    return bundle


class Workflow:
    """One port of the demo project: the project copy, the directory issues.json lives in, and a runner."""

    def __init__(self, base: Path) -> None:
        self.bundle = _bundle()
        self.project = base / "tiny-vla"
        self.work = base / "work"
        shutil.copytree(ORIGINAL, self.project, ignore=shutil.ignore_patterns("__pycache__", "outputs"))
        self.work.mkdir()
        self.git("init", "-q")
        self.git("add", "-A")
        self.git("commit", "-q", "-m", "original CUDA project")
        self.applied: set[str] = set()

    def git(self, *args: str) -> None:
        env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@e", GIT_COMMITTER_NAME="t",
                   GIT_COMMITTER_EMAIL="t@e")
        subprocess.run(["git", *args], cwd=self.project, env=env, check=True, capture_output=True)

    def run(self, *argv: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(a) for a in argv],
            cwd=cwd or self.work,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        print(f"$ {' '.join(str(a) for a in argv)}\n[exit {result.returncode}]\n{result.stdout}\n{result.stderr}")
        return result

    def script(self, name: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
        """`python <skill dir>/scripts/<name> ...`, as SKILL.md writes it."""
        return self.run(sys.executable, self.bundle / "scripts" / name, *args)

    def progress(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.script("progress.py", "issues.json", *args)

    def issues(self) -> list[dict]:
        return json.loads((self.work / "issues.json").read_text())["issues"]

    def apply_fix(self, rel: str) -> None:
        """Apply the demo's known fix for one file: the fixed tree's version of it."""
        fixed = FIXED / rel
        assert fixed.is_file(), f"the fixed tree has no {rel}"
        shutil.copyfile(fixed, self.project / rel)
        self.applied.add(rel)


def describe(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout ---\n{result.stdout[-5000:]}\n--- stderr ---\n{result.stderr[-5000:]}"


@pytest.fixture(scope="module")
def wf(tmp_path_factory: pytest.TempPathFactory) -> Workflow:
    return Workflow(tmp_path_factory.mktemp("e2e"))


def test_1_init_creates_migrate_to_cloudrobo(wf: Workflow) -> None:
    result = wf.run(wf.bundle / "bin" / "npu-assets", "init", wf.project)
    assert result.returncode == 0, describe(result)
    migrate = wf.project / "migrate_to_cloudrobo"
    for name in ("env_npu.sh", "train.sh", "runtime_patches.py"):
        assert (migrate / name).is_file(), f"init did not create {name}"
    assert (migrate / "runtime_patches.py").read_bytes() == (wf.bundle / "scripts" / "runtime_patches.py").read_bytes()
    # The port starts here: the summary's code inventory is measured from this commit.
    wf.git("add", "-A")
    wf.git("commit", "-q", "-m", "add migrate_to_cloudrobo")


def test_2_scan_writes_issues_json(wf: Workflow) -> None:
    result = wf.script("scan.py", wf.project, "--output", ".")
    assert result.returncode == 1, "findings must exit 1\n" + describe(result)
    assert (wf.work / "issues.json").is_file()
    found = {i["pattern"] for i in wf.issues()}
    planted = {f["rule"] for f in json.loads(KEY.read_text())["findings"]}
    missing = planted - found
    assert not missing, f"patterns planted in the demo but not found: {sorted(missing)}"
    assert all(i["status"] == "pending" for i in wf.issues())


def test_3_fixed_is_refused_while_the_code_is_unchanged(wf: Workflow) -> None:
    nxt = wf.progress("--next", "--format", "json")
    assert nxt.returncode == 0, describe(nxt)
    issue = json.loads(nxt.stdout)
    issue = issue.get("issue", issue)
    result = wf.progress("--fixed", issue["id"])
    assert result.returncode == 1, "marking an unfixed issue fixed must be refused\n" + describe(result)
    assert issue["id"] in result.stdout + result.stderr
    status = {i["id"]: i["status"] for i in wf.issues()}
    assert status[issue["id"]] == "pending"


def test_4_skip_needs_a_reason_and_is_refused_for_performance_issues(wf: Workflow) -> None:
    issues = wf.issues()
    perf = next(i for i in issues if i["performance"])
    refused = wf.progress("--skip", perf["id"], "--reason", "looks fine to me")
    assert refused.returncode != 0, describe(refused)
    assert "performance" in (refused.stdout + refused.stderr).lower()

    cfg = next(i for i in issues if i["pattern"] == "P_CFG")
    no_reason = wf.progress("--skip", cfg["id"])
    assert no_reason.returncode != 0, describe(no_reason)
    skipped = wf.progress("--skip", cfg["id"], "--reason", "the launcher overrides the device on the command line")
    assert skipped.returncode == 0, describe(skipped)
    status = {i["id"]: i for i in wf.issues()}
    assert status[cfg["id"]]["status"] == "skipped"
    assert status[perf["id"]]["status"] == "pending"


def test_4b_fix_applies_the_safe_fixes(wf: Workflow) -> None:
    before = {i["id"]: i for i in wf.issues()}
    preview = wf.script("scan.py", wf.project, "--output", ".", "--diff")
    assert preview.returncode == 1, describe(preview)
    assert "+    _NPU_PATCHER.apply()" in preview.stdout
    assert {i["id"]: i["status"] for i in wf.issues()} == {k: v["status"] for k, v in before.items()}, "--diff wrote issues.json"

    result = wf.script("scan.py", wf.project, "--output", ".", "--fix")
    assert result.returncode == 1, "judgement issues remain, so --fix exits 1\n" + describe(result)
    assert "Applied " in result.stdout and "left for judgement" in result.stdout, describe(result)
    after = {i["id"]: i for i in wf.issues()}
    by_fix = {k for k, i in after.items() if i["history"][-1]["note"] == "fixed by --fix"}
    assert by_fix, describe(result)
    assert all(after[k]["status"] == "fixed" for k in by_fix)
    # Every entry point got its setup; the skipped config value was left alone.
    assert not [i for i in after.values() if i["pattern"] == "P_ENT" and i["status"] == "pending"]
    skipped = [k for k, i in before.items() if i["status"] == "skipped"]
    assert skipped and all(after[k]["status"] == "skipped" for k in skipped)
    for rel in ("train.py", "eval.py", "train_hydra.py"):
        source = (wf.project / rel).read_text()
        assert "_NPU_PATCHER.apply()" in source, rel
        compile(source, rel, "exec")


def test_5_fix_loop_until_complete(wf: Workflow) -> None:
    incomplete = wf.progress("--check-complete")
    assert incomplete.returncode == 1, describe(incomplete)

    for _ in range(500):
        nxt = wf.progress("--next", "--format", "json")
        assert nxt.returncode == 0, describe(nxt)
        payload = json.loads(nxt.stdout)
        issue = payload.get("issue", payload) if payload else None
        if not issue or not issue.get("id"):
            break
        if issue["file"] not in wf.applied and (FIXED / issue["file"]).is_file():
            wf.apply_fix(issue["file"])
        fixed = wf.progress("--fixed", issue["id"])
        assert fixed.returncode == 0, f"{issue['id']} ({issue['pattern']} in {issue['file']}) after its fix\n" + describe(fixed)
    else:
        pytest.fail("the fix loop did not end")

    # Files the fixed tree changes that no pending issue pointed at (e.g. the skipped config) get their fix too.
    for fixed in FIXED.rglob("*"):
        rel = fixed.relative_to(FIXED).as_posix()
        if fixed.is_file() and "__pycache__" not in rel and rel not in wf.applied:
            wf.apply_fix(rel)

    rescan = wf.script("scan.py", wf.project, "--output", ".")
    assert rescan.returncode in (0, 1), describe(rescan)
    pending = [i for i in wf.issues() if i["status"] == "pending"]
    assert not pending, f"the fixed demo still has pending issues: {pending}"
    complete = wf.script("progress.py", "--check-complete")
    assert complete.returncode == 0, describe(complete)


def test_6_verify_runtime_and_pipeline_on_the_emulated_npu(wf: Workflow) -> None:
    result = wf.script("verify.py", wf.project, "--runtime", "--pipeline", "--config", CONFIG, "--emulate-npu",
                       "--python", sys.executable)
    assert result.returncode == 0, describe(result)
    report = json.loads((wf.project / "migrate_to_cloudrobo" / "verify-report.json").read_text())
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses, "the verify report has no checks"
    assert "fail" not in statuses.values(), statuses


def test_6b_verify_two_ranks_on_the_emulated_npu(wf: Workflow) -> None:
    result = wf.script("verify.py", wf.project, "--pipeline", "--nproc-per-node", "2", "--config", CONFIG,
                       "--emulate-npu", "--python", sys.executable, "--format", "json")
    assert result.returncode == 0, describe(result)
    ranks = next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "pipeline.ranks")
    assert ranks["status"] == "pass", ranks
    data = ranks["data"]
    assert data["backends"] == ["hccl"] and data["params_equal"] is True, data
    assert [r["params_devices"] for r in data["ranks"]] == [["npu:0"], ["npu:1"]], data


def test_7_verify_data_on_the_emulated_npu(wf: Workflow) -> None:
    result = wf.script("verify.py", wf.project, "--data", "--config", CONFIG, "--emulate-npu",
                       "--python", sys.executable)
    assert result.returncode == 0, describe(result)


def test_8_train_through_train_sh(wf: Workflow) -> None:
    result = wf.run("bash", "migrate_to_cloudrobo/train.sh", sys.executable, "train.py", "--config", CONFIG,
                    "--max-steps", "2", "--device", "cpu", "--output-dir", "outputs/e2e", cwd=wf.project)
    assert result.returncode == 0, describe(result)
    assert "done: 2 steps" in result.stdout
    # npu-verify keeps its runs' logs there too (verify_*.log): the training logs are the others.
    logs = [p for p in (wf.project / "migrate_to_cloudrobo" / "logs").glob("*.log") if not p.name.startswith("verify_")]
    assert logs, "train.sh wrote no log"
    assert "done: 2 steps" in logs[0].read_text()

    failing = wf.run("bash", "migrate_to_cloudrobo/train.sh", sys.executable, "-c", "import sys; sys.exit(3)",
                     cwd=wf.project)
    assert failing.returncode == 3, "train.sh must return the launch command's exit code\n" + describe(failing)


def test_9_summary_draft(wf: Workflow) -> None:
    result = wf.run(wf.bundle / "bin" / "npu-assets", "summary", wf.project, "--issues", wf.work / "issues.json")
    assert result.returncode == 0, describe(result)
    summary = (wf.project / "migrate_to_cloudrobo" / "ADAPTATION_SUMMARY.md").read_text()
    for pattern in {i["pattern"] for i in wf.issues()}:
        assert pattern in summary, f"the summary does not mention {pattern}"
    assert "the launcher overrides the device on the command line" in summary  # the skip reason
    assert "train.py" in summary  # the code inventory
