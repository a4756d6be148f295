"""Float64To32: float64 never reaches the device; the real float64 dtype keeps pickling; CPU keeps float64."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch

import runtime_patches as rp

F64 = torch.float64  # the real dtype object, bound before any patch


def test_float64_compute_fails_on_the_device_without_the_patch(accel, fails_without_patch):
    x = torch.linspace(0, 1, 5, dtype=F64).to(accel)
    assert x.dtype is F64
    fails_without_patch(lambda: x @ x, "Double")  # aclnnDot has no DOUBLE (op_dtypes.json)


def test_to_device_converts_float64_to_float32(accel, make_patcher):
    data = torch.linspace(0, 1, 5, dtype=F64)
    patcher = make_patcher()
    moved = data.to(accel)
    assert moved.dtype is torch.float32 and moved.device.type == accel.type
    torch.testing.assert_close(moved.exp().cpu(), data.exp().float())
    assert data.to(accel, F64).dtype is torch.float32
    assert data.to(device=accel, dtype=F64, copy=True).dtype is torch.float32
    assert torch.ones(2).to(accel).to(F64).dtype is torch.float32
    assert data.to("cpu").dtype is F64, "CPU keeps float64"
    assert data.to(F64) is data
    assert patcher.fires()["Float64To32"] == 4


def test_module_level_dtype_names_are_float32_while_applied(accel, make_patcher):
    patcher = make_patcher()
    assert torch.float64 is torch.float32 and torch.double is torch.float32
    made = torch.zeros(3, dtype=torch.float64, device=accel)
    assert made.dtype is torch.float32
    # Documented consequence: comparisons against the name change meaning.
    assert torch.ones(1).dtype == torch.float64
    assert torch.ones(1, dtype=F64).dtype != torch.float64
    patcher.remove()
    assert torch.float64 is F64 and torch.double is F64


def test_real_float64_dtype_still_pickles_and_copies(make_patcher):
    make_patcher()
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(F64, protocol=protocol)) is F64
        assert pickle.loads(pickle.dumps(torch.float32, protocol=protocol)) is torch.float32
    assert copy.deepcopy({"dtype": F64})["dtype"] is F64
    saved = pickle.dumps({"x": torch.ones(2, dtype=F64), "dtype": F64})
    loaded = pickle.loads(saved)
    assert loaded["x"].dtype is F64 and loaded["dtype"] is F64


def test_without_the_copyreg_entry_pickling_float64_fails(make_patcher):
    patcher = make_patcher(Float64To32=True)
    import copyreg

    entry = copyreg.dispatch_table.pop(torch.dtype)
    try:
        with pytest.raises(pickle.PicklingError):
            pickle.dumps(F64)
    finally:
        copyreg.dispatch_table[torch.dtype] = entry
    assert patcher.applied


def test_numpy_float64_to_device(accel, make_patcher):
    array = np.linspace(0, 1, 4)  # float64
    make_patcher()
    assert torch.as_tensor(array, device=accel).dtype is torch.float32
    assert torch.tensor(array, device=accel).dtype is torch.float32
    assert torch.as_tensor(array).dtype is F64, "host tensors keep float64"
    shared = torch.from_numpy(array)
    assert shared.dtype is F64
    array[0] = 42.0
    assert shared[0].item() == 42.0, "from_numpy keeps sharing memory"
    on_device = shared.to(accel)
    assert on_device.dtype is torch.float32 and on_device[0].item() == 42.0


def test_double_on_device_is_float32(accel, make_patcher):
    patcher = make_patcher()
    assert torch.ones(2, device=accel).double().dtype is torch.float32
    assert torch.ones(2).double().dtype is F64, "CPU .double() unchanged"
    if hasattr(torch.Tensor, accel.type):
        moved = getattr(torch.ones(2, dtype=F64), accel.type)()
        assert moved.dtype is torch.float32 and moved.device.type == accel.type
    assert patcher.fires()["Float64To32"] >= 1


def test_module_to_device_and_double(accel, make_patcher):
    model = torch.nn.Linear(3, 2).to(F64)
    patcher = make_patcher()
    model.to(accel)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    site = next(r.first_call_site for r in patcher.report() if r.name == "Float64To32")
    assert "test_float64.py" in site and "test_module_to_device_and_double" in site, site
    model.double()
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    out = model(torch.ones(4, 3, device=accel))
    assert out.dtype is torch.float32 and out.device.type == accel.type


def test_report_names_the_first_call_site(accel, make_patcher):
    patcher = make_patcher()
    torch.ones(2, dtype=F64).to(accel)
    row = next(r for r in patcher.report() if r.name == "Float64To32")
    assert row.state == "applied" and row.fires == 1
    assert row.first_call_site is not None and "test_float64.py" in row.first_call_site
    assert rp.active_patcher() is patcher


def test_float64_captured_before_apply_gives_float32_on_the_device(accel, make_patcher, fails_without_patch):
    captured = F64  # as a module constant or default argument bound before apply()
    unpatched = torch.zeros(2, 2, dtype=captured, device=accel)
    assert unpatched.dtype is F64
    fails_without_patch(lambda: unpatched @ unpatched, "Double")
    patcher = make_patcher()
    on_device = torch.ones(2, device=accel)
    made = [
        torch.zeros(2, dtype=captured, device=accel),
        torch.full((2,), 0.5, dtype=captured, device=accel),
        torch.arange(3, dtype=captured, device=accel),
        torch.linspace(0, 1, 3, dtype=captured, device=accel),
        torch.randn(2, dtype=captured, device=accel),
        torch.eye(2, dtype=captured, device=accel),
        torch.zeros_like(on_device, dtype=captured),
        on_device.new_zeros(3, dtype=captured),
        on_device.new_tensor([1.0, 2.0], dtype=captured),
    ]
    assert [t.dtype for t in made] == [torch.float32] * len(made)
    assert all(t.device.type == accel.type for t in made)
    assert (made[0] @ made[0]).dtype is torch.float32
    assert torch.zeros(2, dtype=captured).dtype is F64, "host tensors keep float64"
    assert torch.zeros_like(torch.ones(2), dtype=captured).dtype is F64
    before = torch.get_default_dtype()
    try:
        torch.set_default_dtype(captured)
        assert torch.get_default_dtype() is torch.float32
    finally:
        torch.set_default_dtype(before)
    assert patcher.fires()["Float64To32"] >= len(made) + 1


def test_a_float64_checkpoint_loaded_onto_the_device_arrives_as_float32(accel, make_patcher, fails_without_patch):
    import io

    saved = io.BytesIO()
    weight = torch.rand(2, 2, dtype=F64)
    module = torch.nn.Linear(2, 2).to(F64)
    torch.save({"w": weight, "nested": [weight * 2, (weight * 3,)], "module": module}, saved)

    def load(**kwargs):
        saved.seek(0)
        return torch.load(saved, weights_only=False, **kwargs)

    unpatched = load(map_location=accel)
    assert unpatched["w"].dtype is F64 and unpatched["w"].device.type == accel.type
    fails_without_patch(lambda: unpatched["w"] @ unpatched["w"], "Double")
    patcher = make_patcher()
    loaded = load(map_location=accel)
    tensors = [loaded["w"], loaded["nested"][0], loaded["nested"][1][0], *loaded["module"].parameters()]
    assert [t.dtype for t in tensors] == [torch.float32] * len(tensors)
    assert all(t.device.type == accel.type for t in tensors)
    assert isinstance(loaded["module"].weight, torch.nn.Parameter)
    torch.testing.assert_close(loaded["w"].cpu(), weight.float())
    torch.testing.assert_close(loaded["module"](loaded["w"]).cpu(), module(weight).float())
    on_host = load(map_location="cpu")
    assert on_host["w"].dtype is F64 and on_host["module"].weight.dtype is F64, "host tensors keep float64"
    assert patcher.fires()["Float64To32"] >= len(tensors)
