"""The step profile of npu-verify --pipeline (assets/harness/npu_verify_harness/profile.py) on the emulated npu.

The profile is driven here as the harness drives it (a batch from the DataLoader, the program's ops, the optimizer
step's ``step_done``), with this folder as the project: the sites are lines of this file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

HARNESS = Path(__file__).resolve().parents[3] / "assets" / "harness"
sys.path.insert(0, str(HARNESS))

from npu_verify_harness import profile as step_profile  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).name
SOURCE = Path(__file__).read_text(encoding="utf-8").splitlines()
WHEELS = json.loads((ROOT / "torch-npu" / "wheels.json").read_text(encoding="utf-8"))["wheels"]


def site(marker: str) -> str:
    (number,) = [n for n, text in enumerate(SOURCE, 1) if text.rstrip().endswith("# " + marker)]
    return f"{HERE}:{number}"


class Observer:
    """What the profile reads from the harness's observer."""

    def __init__(self) -> None:
        self.busy = False
        self.backward_site = None
        self.fallbacks: dict[str, int] = {}
        self.steps = 0


class Recorder:
    def __init__(self) -> None:
        self.checks: dict[str, dict[str, Any]] = {}

    def check(self, name: str, status: str, detail: str, remedy: str | None = None, data: Any = None, **_: Any) -> None:
        self.checks[name] = {"status": status, "detail": detail, "remedy": remedy, "data": data}


def profiled(step: Callable[[int], None], batches: list[int], observer: Observer | None = None) -> Any:
    from npu_emulator import _kernels

    observer = observer or Observer()
    profile = step_profile.StepProfile(
        torch, str(Path(__file__).parent), "npu", observer, _kernels.verdict, _kernels.table_info()
    )
    profile.install()
    try:
        for batch in batches:
            profile.note_batch({"obs": torch.zeros(batch, 3), "meta": [1, 2]})
            step(batch)
            observer.steps += 1
            profile.step_done()
    finally:
        profile.uninstall()
    return profile, observer


@pytest.fixture
def paired_table(monkeypatch: pytest.MonkeyPatch) -> Any:
    from npu_emulator import _kernels

    monkeypatch.delenv(_kernels.VERSION_ENV, raising=False)
    monkeypatch.setenv(_kernels.PROJECT_ENV, str(Path(__file__).parent))
    _kernels.reset()
    yield _kernels.table_info()
    _kernels.reset()


def slow_step(batch: int) -> None:
    x = torch.randn(batch, 4, device="npu")
    total = 0.0
    for i in range(batch):
        total += x[i].sum().item()  # ITEM
    host = x.cpu()  # CPU
    masked = x[x > 0]  # MASK
    where = torch.nonzero(x)  # NONZERO
    values = x.tolist()  # TOLIST
    if bool(x.sum() > -1e9):  # BOOL
        pass
    for _layer in range(batch):
        x = x * 1.0  # LAYERS
    torch.lgamma(x.abs() + 1.0)  # LGAMMA
    del host, masked, where, values


def test_syncs_fallbacks_and_per_sample_loops_are_counted_per_line_and_step(
    npu: torch.device, paired_table: dict[str, Any]
) -> None:
    profile, observer = profiled(slow_step, [4, 4, 4])
    summary = profile.summary()
    assert summary["profiled_steps"] == 2 and summary["warmup_steps"] == 1
    assert summary["batch_sizes"] == [4, 4]
    lines = summary["lines"]
    assert lines[site("ITEM")]["syncs"] == [4, 4]
    assert lines[site("ITEM")]["sync_kinds"] == {"_local_scalar_dense": 4}
    assert lines[site("CPU")]["sync_kinds"] == {"copy to host": 1}
    assert lines[site("MASK")]["sync_kinds"] == {"boolean-mask indexing": 1}
    assert lines[site("NONZERO")]["sync_kinds"] == {"nonzero": 1}
    assert lines[site("TOLIST")]["sync_kinds"] in ({"copy to host (tolist)": 1}, {"copy to host": 1})
    assert lines[site("BOOL")]["sync_kinds"] == {"_local_scalar_dense": 1}
    assert lines[site("LAYERS")]["syncs"] == [0, 0]
    # Once per sample, picking x[i]: a per-sample loop. The loop over layers runs as often but picks no sample.
    assert lines[site("ITEM")]["per_sample"] == {
        "runs_per_sample": 1, "batch_sizes": [4], "basis": "batch dimension"}
    assert lines[site("LAYERS")]["runs"] == [4, 4]
    assert lines[site("LAYERS")]["per_sample"] is None
    assert lines[site("CPU")]["per_sample"] is None
    (fallback,) = lines[site("LGAMMA")]["fallbacks"]
    assert fallback["op"] == "aten::lgamma" and fallback["kind"] == "fallback" and fallback["per_step"] == 1

    results = Recorder()
    step_profile.report(results, profile, observer, 3)
    checks = results.checks
    version = paired_table["torch_npu"]
    assert checks["pipeline.profile"]["status"] == "pass"
    syncs = checks["pipeline.syncs"]
    assert syncs["status"] == "warn", syncs
    assert f"4 at {site('ITEM')} (_local_scalar_dense)" in syncs["detail"], syncs
    assert syncs["data"]["threshold"] == step_profile.SYNCS_PER_STEP_OK
    per_sample = checks["pipeline.per_sample"]
    assert per_sample["status"] == "warn" and site("ITEM") in per_sample["detail"], per_sample
    assert site("LAYERS") not in per_sample["detail"]
    fallback_check = checks["pipeline.cpu_fallback"]
    if version is None:
        assert fallback_check["status"] == "skip", fallback_check
    else:
        assert fallback_check["status"] == "warn", fallback_check
        assert f"torch_npu {version}" in fallback_check["detail"]
        assert f"aten::lgamma at {site('LGAMMA')} (1.0/step)" in fallback_check["detail"], fallback_check
        assert fallback_check["data"]["torch_npu"] == version


def test_the_paired_release_is_the_one_of_this_torch(npu: torch.device, paired_table: dict[str, Any]) -> None:
    base = torch.__version__.split("+")[0]
    paired = [w["version"] for w in WHEELS if w["torch"] == base]
    if paired:
        assert paired_table["torch_npu"] == paired[-1]


def vectorised_step(batch: int) -> None:
    x = torch.randn(batch, 4, device="npu")
    y = (x * 2).sum(dim=1)
    loss = y.mean()
    if batch == 4:
        loss.item()  # LOG


def test_a_vectorised_step_passes_and_the_harness_reading_the_loss_is_not_counted(
    npu: torch.device, paired_table: dict[str, Any]
) -> None:
    observer = Observer()

    def step(batch: int) -> None:
        vectorised_step(batch)
        observer.busy = True
        torch.ones(3, device="npu").sum().item()  # HARNESS
        observer.busy = False

    profile, observer = profiled(step, [4, 4, 8], observer)
    results = Recorder()
    step_profile.report(results, profile, observer, 3)
    checks = results.checks
    assert checks["pipeline.syncs"]["status"] == "pass", checks["pipeline.syncs"]
    assert checks["pipeline.syncs"]["data"]["per_step"] == [1, 0]
    assert checks["pipeline.per_sample"]["status"] == "pass", checks["pipeline.per_sample"]
    if paired_table["torch_npu"] is not None:
        assert checks["pipeline.cpu_fallback"]["status"] == "pass", checks["pipeline.cpu_fallback"]
    assert site("HARNESS") not in profile.summary()["lines"]


def test_two_batch_sizes_measure_the_loop_against_both(npu: torch.device, paired_table: dict[str, Any]) -> None:
    def step(batch: int) -> None:
        x = torch.randn(batch, 2, device="npu")
        for row in x:
            row.sum().item()  # ROWS

    profile, _ = profiled(step, [3, 4, 6])
    line = profile.summary()["lines"][site("ROWS")]
    assert line["syncs"] == [4, 6]
    assert line["per_sample"] == {"runs_per_sample": 1, "batch_sizes": [4, 6], "basis": "batch sizes [4, 6]"}


def test_one_step_is_only_the_warm_up(npu: torch.device, paired_table: dict[str, Any]) -> None:
    profile, observer = profiled(vectorised_step, [4])
    assert profile.summary() is None
    results = Recorder()
    step_profile.report(results, profile, observer, 1)
    assert results.checks["pipeline.syncs"]["status"] == "skip"
    assert "--steps 2" in results.checks["pipeline.syncs"]["detail"]


def test_on_a_real_npu_the_verdict_comes_from_the_dispatchers_registrations(npu: torch.device) -> None:
    # The emulated backend registers a few PrivateUse1 kernels itself (empty, empty_strided, tril_indices...): asked
    # the way the harness asks on an NPU, those have a kernel and every other non-composite op falls back.
    verdict = step_profile.real_verdict(torch)
    aten = torch.ops.aten
    assert verdict(aten.empty.memory_format) is None
    assert verdict(aten.detach.default) is None  # CompositeExplicitAutograd: decomposes
    assert verdict(aten.select_backward.default) is None  # a decomposition registered as NonFunctional
    kind, message = verdict(aten.lgamma.default)  # structured: its out= form runs on the backend
    assert kind == "fallback" and "'aten::lgamma.out'" in message, message
    kind, message = verdict(aten.nonzero.default)
    assert kind == "fallback" and "'aten::nonzero'" in message, message
    assert step_profile.out_variants(torch, aten.softplus_backward.default) == ["softplus_backward.grad_input"]


def logging_step(batch: int) -> None:
    x = torch.randn(batch, 4, device="npu")
    loss = (x * 2).mean()
    acc = (x > 0).float().mean()
    grad_norm = x.norm()
    logged = {"loss": loss.item()}  # LOG_LOSS
    logged["acc"] = acc.item()  # LOG_ACC
    logged["grad_norm"] = grad_norm.item()  # LOG_NORM
    logged["max"] = x.max().item()  # LOG_MAX
    del logged


def test_one_scalar_per_logged_value_is_within_the_allowance_and_more_is_not(
    npu: torch.device, paired_table: dict[str, Any]
) -> None:
    # Four logged scalars a step: four syncs, over SYNCS_PER_STEP_OK, but each is one `.item()` of a logged value.
    profile, observer = profiled(logging_step, [4, 4, 4])
    results = Recorder()
    step_profile.report(results, profile, observer, 3)
    syncs = results.checks["pipeline.syncs"]
    assert syncs["status"] == "pass", syncs
    assert syncs["data"]["per_step"] == [4, 4]
    assert syncs["data"]["beyond_scalar_logging"] == [0, 0]
    logged = [site(m) for m in ("LOG_LOSS", "LOG_ACC", "LOG_NORM", "LOG_MAX")]
    assert syncs["data"]["scalar_logging"] == {"allowance": step_profile.SCALAR_LOGGING_ALLOWANCE, "sites": logged}
    assert "4 line(s) read one scalar each per step (logging, allowed up to 8 lines)" in syncs["detail"], syncs

    # A line that reads a scalar per element is no logging: it warns, and the allowance does not cover it.
    def per_element(batch: int) -> None:
        logging_step(batch)
        x = torch.randn(batch, device="npu")
        for i in range(batch):
            x[i].item()  # PER_ELEMENT

    profile, observer = profiled(per_element, [4, 4, 4])
    results = Recorder()
    step_profile.report(results, profile, observer, 3)
    syncs = results.checks["pipeline.syncs"]
    assert syncs["status"] == "warn", syncs
    assert site("PER_ELEMENT") not in syncs["data"]["scalar_logging"]["sites"]
    assert syncs["data"]["beyond_scalar_logging"] == [4, 4]
