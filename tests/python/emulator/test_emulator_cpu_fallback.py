"""torch_npu's CPU fallback on the emulated device (npu_emulator/_kernels.py and the generated npu_kernels/ tables)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from npu_emulator import _kernels

ROOT = Path(__file__).resolve().parents[3]
WHEELS = json.loads((ROOT / "torch-npu" / "wheels.json").read_text(encoding="utf-8"))["wheels"]
BASE = torch.__version__.split("+")[0]
HERE = Path(__file__).name
SOURCE = Path(__file__).read_text(encoding="utf-8").splitlines()


def line_of(marker: str) -> int:
    """The line of this file that carries ``# <marker>``."""
    (number,) = [n for n, text in enumerate(SOURCE, 1) if text.rstrip().endswith("# " + marker)]
    return number


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``table(version=None)``: use that pinned release's table (None: the one paired with this torch)."""

    def use(version: str | None = None) -> dict[str, Any]:
        if version is None:
            monkeypatch.delenv(_kernels.VERSION_ENV, raising=False)
        else:
            monkeypatch.setenv(_kernels.VERSION_ENV, version)
        monkeypatch.setenv(_kernels.PROJECT_ENV, str(Path(__file__).parent))
        _kernels.reset()
        return _kernels.table_info()

    yield use
    _kernels.reset()


def test_every_pinned_wheel_has_a_table_paired_with_its_torch() -> None:
    shipped = _kernels.available()
    assert shipped == {w["version"]: w["torch"] for w in WHEELS}
    for wheel in WHEELS:
        data = json.loads((Path(_kernels.TABLES_DIR) / f"torch_npu-{wheel['version']}.json").read_text())
        kernels = set(data["kernels"])
        assert len(kernels) > 1000, wheel["version"]
        assert {"add.Tensor", "mm", "_local_scalar_dense", "_to_copy"} <= kernels
        assert not kernels & {"lgamma", "lgamma.out", "digamma.out", "polygamma.out", "_standard_gamma"}


def test_the_table_in_use_is_the_release_paired_with_this_torch(table: Callable[..., dict[str, Any]]) -> None:
    info = table()
    paired = [w["version"] for w in WHEELS if w["torch"] == BASE]
    if paired:
        assert info["torch_npu"] == paired[-1], info
        assert "pairs with torch" in info["reason"]
    else:
        assert info["torch_npu"] is None or "no pinned torch-npu pairs" in info["reason"], info


def test_an_op_without_an_npu_kernel_warns_as_torch_npu_and_is_recorded_at_the_callers_line(
    npu: torch.device, table: Callable[..., dict[str, Any]]
) -> None:
    table("2.14.0")
    host = torch.rand(6) + 0.5
    x = host.to(npu)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = torch.lgamma(x)  # LGAMMA
        torch.lgamma(x)  # LGAMMA-AGAIN
    assert torch.equal(y.cpu(), torch.lgamma(host))
    assert _kernels.fallbacks() == [
        {"op": "aten::lgamma", "kind": "fallback", "site": f"{HERE}:{line_of('LGAMMA')}", "count": 1},
        {"op": "aten::lgamma", "kind": "fallback", "site": f"{HERE}:{line_of('LGAMMA-AGAIN')}", "count": 1},
    ]
    texts = [str(w.message) for w in caught if "CAUTION" in str(w.message)]
    # torch_npu's text (its parts are strings of libtorch_npu.so); the structured op falls back at its out= form.
    assert texts == [
        "CAUTION: The operator 'aten::lgamma.out' is not currently supported on the NPU backend and will fall back "
        "to run on the CPU."
    ], texts
    assert [w.lineno for w in caught if "CAUTION" in str(w.message)] == [line_of("LGAMMA")]


def test_ops_with_an_npu_kernel_or_a_decomposition_do_not_fall_back(
    npu: torch.device, table: Callable[..., dict[str, Any]]
) -> None:
    table("2.14.0")
    x = torch.randn(4, 3, device=npu, requires_grad=True)
    w = torch.randn(3, 3, device=npu)
    y = torch.nn.functional.softplus(x @ w + 1.0)  # softplus_backward runs its grad_input form: a kernel
    loss = y[0].sum() + y[:, 1:].mean()  # select_backward / slice_backward decompose
    loss.backward()
    assert x.grad is not None
    assert _kernels.fallbacks() == []


@pytest.mark.parametrize(("version", "falls_back"), [("2.1.0.post17", True), ("2.6.0.post5", True), ("2.14.0", False)])
def test_the_verdict_follows_the_torch_npu_release(
    npu: torch.device, table: Callable[..., dict[str, Any]], version: str, falls_back: bool
) -> None:
    # scatter_reduce.two has an NPU kernel from 2.14.0 on (its wheel lists scatter_reduce.two_out; older ones do not).
    assert table(version)["torch_npu"] == version
    index = torch.tensor([0, 1, 0, 1], device=npu)
    src = torch.tensor([1.0, 2.0, 3.0, 4.0], device=npu)
    out = torch.zeros(2, device=npu).scatter_reduce(0, index, src, reduce="amax")  # SCATTER
    assert out.cpu().tolist() == [3.0, 4.0]
    recorded = [(r["op"], r["site"]) for r in _kernels.fallbacks()]
    expected = [("aten::scatter_reduce.two", f"{HERE}:{line_of('SCATTER')}")] if falls_back else []
    assert recorded == expected


def test_a_kernel_whose_fallback_the_binary_names_is_recorded_as_warned(
    npu: torch.device, table: Callable[..., dict[str, Any]]
) -> None:
    table("2.14.0")
    x = torch.rand(5, device=npu) * 0.8 + 0.1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.logit(x)
    (record,) = _kernels.fallbacks()
    assert record["op"] == "aten::logit" and record["kind"] == "warned", record
    assert any("aten::logit" in str(w.message) and "fallback to run on the CPU" in str(w.message) for w in caught)


def test_the_check_can_be_turned_off_and_an_unknown_release_says_so(
    npu: torch.device, table: Callable[..., dict[str, Any]]
) -> None:
    assert table("off") == {"torch_npu": None, "reason": "NPU_EMULATOR_TORCH_NPU_VERSION=off"}
    torch.lgamma(torch.rand(3, device=npu))
    assert _kernels.fallbacks() == []
    info = table("9.9.9")
    assert info["torch_npu"] is None and "9.9.9" in info["reason"] and "2.14.0" in info["reason"], info
