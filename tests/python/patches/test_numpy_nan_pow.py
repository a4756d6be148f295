"""TensorNumpySafe, NanToNumSafe and PowFloatSafe: the device failure without them, CPU-equal results with them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

NONFINITE = [math.nan, math.inf, -math.inf, 1.5, -70000.0, 70000.0]


def test_numpy_fails_on_device_without_the_patch(accel, fails_without_patch):
    x = torch.arange(3.0, device=accel)
    fails_without_patch(lambda: x.numpy(), "numpy")
    if accel.type == "npu":
        with pytest.raises(TypeError):
            x.numpy()


def test_numpy_copies_device_tensors_to_host(accel, make_patcher):
    patcher = make_patcher()
    x = torch.arange(3.0, device=accel)
    assert x.numpy().tolist() == [0.0, 1.0, 2.0]
    assert np.asarray(x).tolist() == [0.0, 1.0, 2.0]
    grad = torch.ones(2, device=accel, requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):
        grad.numpy()
    assert grad.numpy(force=True).tolist() == [1.0, 1.0]
    host = torch.zeros(2)
    host.numpy()[0] = 5.0
    assert host[0].item() == 5.0, "CPU .numpy() still shares memory"
    assert patcher.fires()["TensorNumpySafe"] == 4


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_nan_to_num_half_fails_without_the_patch(accel, fails_without_patch, dtype):
    x = torch.tensor(NONFINITE, device=accel).to(dtype)
    fails_without_patch(lambda: torch.nan_to_num(x), "nan_to_num|Half|BFloat16")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_nan_to_num_half_matches_cpu(accel, make_patcher, dtype):
    host = torch.tensor(NONFINITE).to(dtype)
    expected = torch.nan_to_num(host)
    expected_args = torch.nan_to_num(host, nan=1.0, posinf=100.0, neginf=-100.0)
    patcher = make_patcher()
    x = host.to(accel)
    got = torch.nan_to_num(x)
    assert got.dtype is dtype and got.device.type == accel.type
    assert torch.isfinite(got.cpu().float()).all(), "inf must become the dtype's finite max, not inf again"
    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)
    torch.testing.assert_close(x.nan_to_num(1.0, 100.0, -100.0).cpu(), expected_args, rtol=0, atol=0)
    out = torch.empty(0, dtype=dtype, device=accel)
    assert torch.nan_to_num(x, out=out) is out
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)
    y = x.clone()
    assert y.nan_to_num_() is y
    torch.testing.assert_close(y.cpu(), expected, rtol=0, atol=0)
    assert patcher.fires()["NanToNumSafe"] == 4


def test_nan_to_num_float32_is_untouched(accel, make_patcher):
    patcher = make_patcher()
    x = torch.tensor(NONFINITE, device=accel)
    torch.testing.assert_close(torch.nan_to_num(x).cpu(), torch.nan_to_num(torch.tensor(NONFINITE)))
    assert patcher.fires()["NanToNumSafe"] == 0


def test_fractional_pow_fails_without_the_patch(accel, fails_without_patch):
    ints = torch.tensor([4, 9], device=accel)
    halves = torch.tensor([4.0, 9.0], device=accel).half()
    fails_without_patch(lambda: ints**0.5, "pow")
    fails_without_patch(lambda: torch.pow(halves, 0.5), "pow")


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float16, torch.bfloat16])
def test_fractional_pow_matches_cpu(accel, make_patcher, dtype):
    host = torch.tensor([1, 4, 9, 16]).to(dtype)
    expected = host**0.5
    exp_tensor = torch.tensor(0.25)
    expected_tensor = torch.pow(host, exp_tensor)
    patcher = make_patcher()
    x = host.to(accel)
    for got in (x**0.5, torch.pow(x, 0.5), x.pow(0.5)):
        assert got.dtype is expected.dtype and got.device.type == accel.type
        torch.testing.assert_close(got.cpu(), expected)
    got = torch.pow(x, exp_tensor.to(accel))
    assert got.dtype is expected_tensor.dtype
    torch.testing.assert_close(got.cpu(), expected_tensor)
    assert patcher.fires()["PowFloatSafe"] == 4


def test_pow_inplace_and_out(accel, make_patcher):
    host = torch.tensor([4.0, 9.0]).half()
    make_patcher()
    x = host.to(accel)
    assert x.pow_(0.5) is x
    torch.testing.assert_close(x.cpu(), host**0.5)
    y = host.to(accel)
    y **= 0.5
    torch.testing.assert_close(y.cpu(), host**0.5)
    out = torch.empty(2, dtype=torch.float16, device=accel)
    assert torch.pow(host.to(accel), 0.5, out=out) is out
    torch.testing.assert_close(out.cpu(), host**0.5)
    with pytest.raises(RuntimeError):
        torch.tensor([4, 9], device=accel).pow_(0.5)  # int storage cannot hold the float result, as on CPU


def test_pow_integer_exponents_and_float_bases_are_untouched(accel, make_patcher):
    patcher = make_patcher()
    ints = torch.tensor([2, 3], device=accel)
    assert (ints**2).dtype is torch.int64
    assert (torch.tensor([4.0], device=accel) ** 0.5).item() == 2.0
    assert (ints**2.0).cpu().tolist() == [4.0, 9.0]
    assert patcher.fires()["PowFloatSafe"] == 0
