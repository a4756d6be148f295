"""The Patcher: apply/remove identity, toggles, one patcher at a time, rollback, report and self-test."""

from __future__ import annotations

import builtins
import io
import json

import pytest
import torch

import runtime_patches as rp


def test_apply_remove_restores_identical_objects(accel, make_patcher):
    originals = {"max": builtins.max, "numpy": torch.Tensor.numpy, "tensor": torch.tensor, "f64": torch.float64}
    patcher = make_patcher(fused_adamw=True, tensor_index="slot", TensorIndexDevice=False)
    assert patcher.applied and rp.active_patcher() is patcher
    assert builtins.max is not originals["max"] and torch.Tensor.numpy is not originals["numpy"]
    assert patcher.apply() is patcher  # idempotent
    patcher.remove()
    patcher.remove()  # idempotent
    assert builtins.max is originals["max"] and torch.Tensor.numpy is originals["numpy"]
    assert torch.tensor is originals["tensor"] and torch.float64 is originals["f64"]
    assert "numpy" not in torch.Tensor.__dict__
    assert rp.active_patcher() is None
    patcher.apply()  # re-applicable after removal
    assert torch.float64 is torch.float32


def test_context_manager(make_patcher):
    patcher = make_patcher(apply=False)
    with patcher as applied:
        assert applied is patcher and torch.float64 is torch.float32
    assert not patcher.applied and torch.float64 is not torch.float32


def test_toggles_by_name_and_environment(make_patcher, monkeypatch):
    patcher = make_patcher(apply=False, BuiltinMinMaxNPU=False)
    assert not patcher.is_enabled("BuiltinMinMaxNPU") and patcher.is_enabled("PowFloatSafe")
    patcher.disable("PowFloatSafe").enable("BuiltinMinMaxNPU")
    original_pow = torch.pow
    with patcher:
        assert torch.pow is original_pow and builtins.max.__module__ == rp.__name__
        with pytest.raises(RuntimeError, match="remove"):
            patcher.enable("PowFloatSafe")
    states = {row.name: row.state for row in patcher.report()}
    assert states["PowFloatSafe"] == "disabled" and states["BuiltinMinMaxNPU"] == "removed"
    with pytest.raises(ValueError, match="unknown patch 'Nope'"):
        rp.build_vla_patcher(Nope=True)
    with pytest.raises(ValueError, match="tensor_index"):
        rp.build_vla_patcher(tensor_index="other")
    monkeypatch.setenv("NPU_PATCHES_DISABLE", "NanToNumSafe, SdpaMaskBroadcast")
    from_env = rp.build_vla_patcher()
    assert not from_env.is_enabled("NanToNumSafe") and not from_env.is_enabled("SdpaMaskBroadcast")
    monkeypatch.setenv("NPU_PATCHES_DISABLE", "Typo")
    with pytest.raises(ValueError, match="NPU_PATCHES_DISABLE"):
        rp.build_vla_patcher()
    assert rp.build_npu_patcher is rp.build_vla_patcher


def test_one_patcher_at_a_time(make_patcher):
    first = make_patcher()
    second = make_patcher(apply=False)
    assert second.apply() is first and not second.applied  # a second setup keeps the first patcher
    assert rp.active_patcher() is first


def test_failed_apply_rolls_back(make_patcher, monkeypatch):
    def broken(self):
        raise RuntimeError("boom")

    monkeypatch.setattr(rp.PowFloatSafe, "install", broken)
    patcher = make_patcher(apply=False)
    with pytest.raises(RuntimeError, match="boom"):
        patcher.apply()
    assert not patcher.applied and rp.active_patcher() is None
    assert torch.float64 is not torch.float32  # earlier patches were undone (the leak fixture checks the rest)


def test_report_and_print_report(accel, make_patcher):
    patcher = make_patcher()
    torch.arange(3.0, device=accel).numpy()
    torch.arange(3.0, device=accel).numpy()
    rows = {row.name: row for row in patcher.report()}
    assert list(rows) == list(rp.PATCH_NAMES)
    numpy_row = rows["TensorNumpySafe"]
    assert numpy_row.state == "applied" and numpy_row.fires == 2
    assert "test_patcher.py" in numpy_row.first_call_site and "test_report_and_print_report" in numpy_row.first_call_site
    assert rows["PowFloatSafe"].fires == 0 and rows["PowFloatSafe"].first_call_site is None
    json.dumps([row.as_dict() for row in rows.values()])
    out = io.StringIO()
    patcher.print_report(out)
    text = out.getvalue()
    assert text.startswith("npu runtime patches:\n")
    assert "TensorNumpySafe" in text and "fired 2x, first at" in text
    assert "AdamWFused" in text and "opt-in" in text


def test_self_test_on_the_device_and_on_cpu(accel, make_patcher):
    results = rp.self_test(accel, fused_adamw=accel.type == "npu", tensor_index="mode")
    assert [name for name, _, _ in results] == list(rp.PATCH_NAMES)
    assert all(ok for _, ok, _ in results), results
    assert rp.active_patcher() is None
    cpu_results = rp.self_test("cpu", tensor_index="mode")
    assert all(ok for _, ok, _ in cpu_results), cpu_results
    patcher = make_patcher()
    before = patcher.fires()
    assert all(ok for _, ok, _ in patcher.self_test(accel))
    assert patcher.fires() == before, "self-test fires are not counted as user fires"
    assert patcher.applied


def test_self_test_reports_a_broken_patch(accel, make_patcher, monkeypatch):
    monkeypatch.setattr(rp.TensorNumpySafe, "install", lambda self: self.swap(torch.Tensor, "numpy", torch.Tensor.numpy))
    patcher = make_patcher(apply=False)
    results = dict((name, (ok, detail)) for name, ok, detail in patcher.self_test(accel))
    if accel.type == "npu":
        ok, detail = results["TensorNumpySafe"]
        assert not ok and "numpy" in detail
    assert results["Float64To32"][0]


def test_imports_without_torch_npu(run_fresh):
    code = (
        "import sys, runtime_patches as rp\n"
        "assert 'torch_npu' not in sys.modules\n"
        "print(rp._detect_device(), 'torch_npu' in sys.modules)\n"
    )
    out = run_fresh(code, emulator=False).stdout.split()
    assert out[1] == "False"
    assert out[0] in ("cpu", "cuda:0")


def test_command_line_self_test(run_fresh):
    code = "import runpy, sys; sys.argv = ['runtime_patches.py', 'cpu']; runpy.run_module('runtime_patches', run_name='__main__')"
    try:
        run_fresh(code, emulator=False)
    except AssertionError as err:  # SystemExit(0) ends the child normally; a failure would show in its output
        raise AssertionError(str(err)) from None
