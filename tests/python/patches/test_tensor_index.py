"""TensorIndexDevice and TorchTensorSafe, including the CPython ``sq_item`` slot effect in fresh interpreters."""

from __future__ import annotations

import json

import pytest
import torch


def test_host_index_fails_on_device_without_the_patch(accel, fails_without_patch):
    x = torch.arange(10, device=accel)
    fails_without_patch(lambda: x[torch.tensor([1, 3])], "index")
    mask = torch.zeros(10, dtype=torch.bool)
    fails_without_patch(lambda: x.__setitem__(mask, 0), "index")


def test_host_indices_follow_the_indexed_tensor(accel, make_patcher):
    host = torch.arange(20).reshape(4, 5)
    idx = torch.tensor([2, 0])
    mask = host[:, 0] > 4
    patcher = make_patcher()
    x = host.to(accel)
    for got, want in (
        (x[idx], host[idx]),
        (x[mask], host[mask]),
        (x[idx, 1:], host[idx, 1:]),
        (x[:, idx], host[:, idx]),
        (x[(idx, idx)], host[(idx, idx)]),
    ):
        assert got.device.type == accel.type
        assert torch.equal(got.cpu(), want)
    y, expected = x.clone(), host.clone()
    y[mask] = -1
    expected[mask] = -1
    y[idx, 0] = 7
    expected[idx, 0] = 7
    assert torch.equal(y.cpu(), expected)
    assert x[1, 2].item() == host[1, 2].item() and torch.equal(x[1:3].cpu(), host[1:3])
    assert patcher.fires()["TensorIndexDevice"] == 7


def test_device_indices_on_host_tensors(accel, make_patcher):
    host = torch.arange(6)
    make_patcher()
    assert torch.equal(host[torch.tensor([5, 1], device=accel)], torch.tensor([5, 1]))


def test_torch_tensor_of_zero_dim_device_tensors(accel, make_patcher):
    a_host, b_host = torch.tensor(1.5), torch.tensor(2, dtype=torch.int32)
    cases = [[a_host, b_host], [[a_host, 3], [b_host, True]], (b_host, b_host)]
    expected = [torch.tensor(case) for case in cases]
    patcher = make_patcher()
    a, b = a_host.to(accel), b_host.to(accel)
    device_cases = [[a, b], [[a, 3], [b, True]], (b, b)]
    for case, want in zip(device_cases, expected, strict=True):
        got = torch.tensor(case)
        assert got.dtype is want.dtype and got.device.type == "cpu" and torch.equal(got, want)
    on_device = torch.tensor([a, b], device=accel, dtype=torch.float16, requires_grad=True)
    assert on_device.device.type == accel.type and on_device.dtype is torch.float16
    assert on_device.requires_grad and on_device.is_leaf
    assert torch.equal(torch.as_tensor([a, a]), torch.tensor([1.5, 1.5]))
    mixed = torch.tensor([1.0, a])  # first element a number: the original path, then the fallback if needed
    assert torch.equal(mixed, torch.tensor([1.0, 1.5]))
    assert patcher.fires()["TorchTensorSafe"] >= 5
    with pytest.raises((ValueError, TypeError, RuntimeError)):
        torch.tensor([torch.ones(2, device=accel), 1.0])  # not 0-dim: torch's own error, as before
    assert torch.equal(torch.tensor([1, 2]), torch.tensor([1, 2]))


SLOT_SCRIPT = r"""
import json, sys
import torch
import runtime_patches as rp
device = DEVICE
if device == "npu":
    import npu_emulator
    npu_emulator.install()
out = {}
t = torch.tensor(1.0)
out["before"] = torch.tensor([t, t]).tolist()
def attempt(fn):
    try:
        return fn()
    except TypeError as err:
        return "TypeError: " + str(err)
p = rp.build_vla_patcher(TorchTensorSafe=False).apply()
out["slot_without_safe"] = attempt(lambda: torch.tensor([t, t]).tolist())
out["as_tensor_without_safe"] = attempt(lambda: torch.as_tensor([t, t]).tolist())
p.remove()
p = rp.build_vla_patcher().apply()
x = torch.arange(5, device=device)
out["indexed"] = x[torch.tensor([4, 1])].tolist()
out["slot_with_safe"] = torch.tensor([t, t]).tolist()
out["as_tensor_with_safe"] = torch.as_tensor([t, t]).tolist()
p.remove()
out["getitem_in_dict_after"] = "__getitem__" in torch.Tensor.__dict__
base = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase  # torch < 2.2: _TensorBase
out["getitem_is_original"] = torch.Tensor.__getitem__ is base.__getitem__
out["after_remove"] = attempt(lambda: torch.tensor([t, t]).tolist())
out["report"] = [r.reason for r in p.report() if r.name == "TensorIndexDevice"][0]
print(json.dumps(out))
"""

MODE_SCRIPT = r"""
import json
import torch
import runtime_patches as rp
device = DEVICE
if device == "npu":
    import npu_emulator
    npu_emulator.install()
t = torch.tensor(1.0)
p = rp.build_vla_patcher(tensor_index="mode", TorchTensorSafe=False).apply()
x = torch.arange(5, device=device)
out = {"indexed": x[torch.tensor([4, 1])].tolist(), "during": torch.tensor([t, t]).tolist()}
out["modes_during"] = torch._C._len_torch_function_stack()
p.remove()
out["modes_after"] = torch._C._len_torch_function_stack()
out["after_remove"] = torch.tensor([t, t]).tolist()
print(json.dumps(out))
"""


def test_slot_strategy_side_effect_in_a_fresh_interpreter(run_fresh, accel):
    done = run_fresh(SLOT_SCRIPT.replace("DEVICE", repr(accel.type)), emulator=accel.type == "npu")
    out = json.loads(done.stdout)
    assert out["before"] == [1.0, 1.0]
    # Assigning Tensor.__getitem__ fills CPython's sq_item slot: torch then treats 0-dim tensors as sequences.
    assert out["slot_without_safe"] == "TypeError: len() of a 0-d tensor"
    assert out["as_tensor_without_safe"] == "TypeError: len() of a 0-d tensor"
    assert out["indexed"] == [4, 1]
    assert out["slot_with_safe"] == [1.0, 1.0] and out["as_tensor_with_safe"] == [1.0, 1.0]
    # remove() restores the attribute, but the slot stays filled for the process (documented, and reported).
    assert out["getitem_in_dict_after"] is False and out["getitem_is_original"] is True
    assert out["after_remove"] == "TypeError: len() of a 0-d tensor"
    assert "sq_item" in out["report"]


def test_mode_strategy_leaves_no_trace_in_a_fresh_interpreter(run_fresh, accel):
    done = run_fresh(MODE_SCRIPT.replace("DEVICE", repr(accel.type)), emulator=accel.type == "npu")
    out = json.loads(done.stdout)
    assert out["indexed"] == [4, 1] and out["during"] == [1.0, 1.0]
    assert out["modes_during"] == 1 and out["modes_after"] == 0
    assert out["after_remove"] == [1.0, 1.0]
