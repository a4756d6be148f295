"""Each emulated NPU restriction fails where a real device would, names its source, and can be switched off."""

from __future__ import annotations

from pathlib import Path

import npu_emulator
import pytest
import torch
import torch.nn.functional as F
from npu_emulator import EmulatedNPUError

EMULATOR = Path(__file__).resolve().parents[3] / "assets" / "emulator"


def _assert_message(error: BaseException, real: str, source: str) -> None:
    text = str(error)
    assert real in text
    assert "emulated npu" in text
    assert source in text


def test_restriction_groups_are_listed_and_validated() -> None:
    assert set(npu_emulator.RESTRICTIONS) == {
        "device_mismatch",
        "index_device",
        "numpy",
        "float64",
        "sdpa_mask",
        "nan_to_num_half",
        "pow_fractional",
    }
    assert npu_emulator.enabled_restrictions() == frozenset(npu_emulator.RESTRICTIONS)
    with pytest.raises(ValueError, match="unknown restriction group"):
        npu_emulator.set_restriction("nope", False)
    with npu_emulator.restrictions(float64=False):
        assert "float64" not in npu_emulator.enabled_restrictions()
    assert "float64" in npu_emulator.enabled_restrictions()


def test_device_mismatch(npu: torch.device) -> None:
    x = torch.ones(3, device=npu)
    with pytest.raises(EmulatedNPUError) as caught:
        x + torch.ones(3)
    _assert_message(
        caught.value,
        "Expected all tensors to be on the same device, but found at least two devices, npu:0 and cpu!",
        "same-device check",
    )
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(3) * x
    # CPU 0-dim tensors act as scalars, as on CUDA.
    assert (x + torch.tensor(2.0)).tolist() == [3.0, 3.0, 3.0]
    assert (x * 2).device == npu
    with npu_emulator.restrictions(device_mismatch=False):
        assert (x + torch.ones(3)).tolist() == [2.0, 2.0, 2.0]


def test_index_with_cpu_indices(npu: torch.device) -> None:
    x = torch.arange(6.0, device=npu)
    idx = torch.tensor([0, 2])
    with pytest.raises(EmulatedNPUError) as caught:
        x[idx]
    _assert_message(caught.value, "npu:0 and cpu", "SKILL.md, Runtime Patches, TensorIndexDevice")
    assert x[idx.to(npu)].tolist() == [0.0, 2.0]
    assert x[1].item() == 1.0  # Python ints are fine
    with npu_emulator.restrictions(index_device=False):
        assert x[idx].tolist() == [0.0, 2.0]
    with pytest.raises(EmulatedNPUError, match="same-device"):
        torch.arange(6.0)[idx.to(npu)]


def test_numpy_on_device_tensor(npu: torch.device) -> None:
    x = torch.ones(2, device=npu)
    with pytest.raises(TypeError) as caught:
        x.numpy()
    assert isinstance(caught.value, EmulatedNPUError)
    _assert_message(
        caught.value,
        "can't convert npu:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.",
        ".numpy() check",
    )
    with pytest.raises(TypeError, match="can't convert npu:0"):
        import numpy as np

        np.asarray(x)
    assert x.cpu().numpy().tolist() == [1.0, 1.0]
    with npu_emulator.restrictions(numpy=False):
        assert x.numpy().tolist() == [1.0, 1.0]


def test_numpy_defers_to_a_replaced_tensor_numpy(npu: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    original = torch.Tensor.numpy

    def safe_numpy(self: torch.Tensor, *, force: bool = False) -> object:
        return original(self.cpu() if self.device.type != "cpu" else self, force=force)

    monkeypatch.setattr(torch.Tensor, "numpy", safe_numpy)
    assert torch.ones(2, device=npu).numpy().tolist() == [1.0, 1.0]


def _float64(npu: torch.device, *shape: int) -> torch.Tensor:
    """float64 data on the device: CPU float64 moved there (a dtype-only cast would give float32)."""
    return torch.rand(*shape, dtype=torch.float64).to(npu)


def _operands() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two 3x3 matrices and a vector, float64, on the CPU."""
    return tuple(torch.rand(*shape, dtype=torch.float64) for shape in ((3, 3), (3, 3), (3,)))  # type: ignore[return-value]


# Ops whose aclnn kernel's CANN dtype list lacks DOUBLE (op_dtypes.json): (name, kernel, call on float64 tensors).
REFUSED = [
    ("max.dim", "aclnnMaxDim", lambda a, b, v: a.max(dim=0)),
    ("min.dim", "aclnnMinDim", lambda a, b, v: a.min(dim=1)),
    ("nan_to_num", "aclnnNanToNum", lambda a, b, v: torch.nan_to_num(a)),
    ("mm", "aclnnMm", lambda a, b, v: a @ b),
    ("bmm", "aclnnBatchMatMul", lambda a, b, v: torch.bmm(a[None], b[None])),
    ("addmm", "aclnnAddmm", lambda a, b, v: F.linear(a, b, v)),
    ("baddbmm", "aclnnBaddbmm", lambda a, b, v: torch.baddbmm(a[None], a[None], b[None])),
    ("mv", "aclnnMv", lambda a, b, v: a @ v),
    ("dot", "aclnnDot", lambda a, b, v: v @ v),
]

# Ops whose kernel's list has DOUBLE, or whose list was not read (unknown: the emulator must not refuse).
ALLOWED = [
    ("exp", lambda a, b, v: a.exp()),
    ("log", lambda a, b, v: a.add(1).log()),
    ("cumsum", lambda a, b, v: a.cumsum(0)),
    ("mean", lambda a, b, v: a.mean()),
    ("max", lambda a, b, v: a.max()),
    ("min", lambda a, b, v: a.min()),
    ("gather", lambda a, b, v: a.gather(0, torch.zeros(2, 3, dtype=torch.long, device=a.device))),
    ("index_select", lambda a, b, v: a.index_select(0, torch.zeros(2, dtype=torch.long, device=a.device))),
    ("clamp", lambda a, b, v: a.clamp(0.2, 0.8)),
    ("clamp_min", lambda a, b, v: a.clamp(min=0.5)),
    ("clamp.Tensor", lambda a, b, v: a.clamp(b, b + 0.5)),
    ("addmv", lambda a, b, v: torch.addmv(v, a, v)),
    ("addbmm", lambda a, b, v: torch.addbmm(a, a[None], b[None])),
    ("softmax", lambda a, b, v: a.softmax(-1)),
]


@pytest.mark.parametrize(("name", "kernel", "call"), REFUSED, ids=[r[0] for r in REFUSED])
def test_float64_fails_where_the_kernels_dtype_list_lacks_it(
    npu: torch.device, name: str, kernel: str, call: object
) -> None:
    cpu = _operands()
    on_npu = [t.to(npu) for t in cpu]
    assert on_npu[0].dtype == torch.float64  # holding float64 data is allowed
    with pytest.raises(EmulatedNPUError) as caught:
        call(*on_npu)  # type: ignore[operator]
    _assert_message(caught.value, "Unsupport data type: at::ScalarType::Double", kernel)
    assert "lacks DOUBLE" in str(caught.value) and "op_dtypes.json" in str(caught.value), name
    with npu_emulator.restrictions(float64=False):
        result = call(*on_npu)  # type: ignore[operator]
    expected = call(*cpu)  # type: ignore[operator]
    leaves = torch.utils._pytree.tree_flatten
    for got, want in zip(leaves(result)[0], leaves(expected)[0], strict=True):
        assert torch.equal(got.cpu(), want), name
    assert call(*[t.float() for t in on_npu]) is not None  # type: ignore[operator]


@pytest.mark.parametrize(("name", "call"), ALLOWED, ids=[a[0] for a in ALLOWED])
def test_float64_runs_where_the_kernel_lists_it_or_nothing_is_known(npu: torch.device, name: str, call: object) -> None:
    cpu = _operands()
    result = call(*[t.to(npu) for t in cpu])  # type: ignore[operator]
    expected = call(*cpu)  # type: ignore[operator]
    assert result.dtype == torch.float64, name
    assert result.device.type == "npu"
    torch.testing.assert_close(result.cpu(), expected, rtol=0, atol=1e-12)


def test_multinomial_on_float64_probabilities_runs(npu: torch.device) -> None:
    probs = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
    assert probs.to(npu).multinomial(1).cpu().tolist() == probs.multinomial(1).tolist() == [1]


def test_the_dtype_table_names_real_overloads_and_cites_every_refusal() -> None:
    from npu_emulator import _checks

    rows = _checks.OP_DTYPES
    assert len(rows) >= 60
    for name, row in rows.items():
        packet, _, overload = name.removeprefix("aten::").partition(".")
        assert hasattr(getattr(torch.ops.aten, packet), overload or "default"), name
        assert row["float64"] in ("listed", "missing", "unknown"), name
        assert row["refuses"] == (["float64"] if row["float64"] == "missing" else []), name
        assert row["kernel"].startswith("aclnn") and row["op_plugin"], name
        if row["float64"] != "unknown":
            assert row["source"].strip(), name
    refused = {name for name, row in rows.items() if row["refuses"]}
    assert "aten::mm" in refused and "aten::max.dim" in refused
    assert not {"aten::exp", "aten::log", "aten::cumsum", "aten::mean.dim", "aten::max", "aten::gather"} & refused


def test_a_dtype_only_cast_to_float64_gives_float32_with_torch_npus_warning(
    npu: torch.device, monkeypatch: pytest.MonkeyPatch
) -> None:
    from npu_emulator import _checks

    monkeypatch.setattr(_checks, "_double_cast_warned", [False])
    x = torch.rand(3, device=npu)
    with pytest.warns(UserWarning, match="Device do not support double dtype now, dtype cast replace with float.") as seen:
        assert x.double().dtype == torch.float32
    assert seen[0].filename == __file__  # the program's line, as torch attributes the device's warnings
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process, as TORCH_NPU_WARN_ONCE
        assert x.to(torch.float64).dtype == torch.float32
        assert x.to(dtype=torch.double).dtype == torch.float32
    assert torch.equal(x.double().cpu(), x.cpu())
    # A cast naming the device, data moved from the CPU and device factories stay float64.
    assert x.to(npu, torch.float64).dtype == torch.float64
    assert torch.rand(2, dtype=torch.float64).to(npu).dtype == torch.float64
    assert torch.zeros(2, dtype=torch.float64, device=npu).dtype == torch.float64
    assert torch.rand(2, dtype=torch.float64).to(npu).double().dtype == torch.float64
    with npu_emulator.restrictions(float64=False):
        assert x.double().dtype == torch.float64
    model = torch.nn.Linear(2, 2).to(npu).double()
    assert model.weight.dtype == torch.float32  # Module.double() casts each parameter the same way
    assert x.cpu().double().dtype == torch.float64


def test_float64_allowed_for_ops_not_documented_missing(npu: torch.device) -> None:
    x = _float64(npu, 4)
    assert (x + x).dtype == torch.float64
    assert x.sin().dtype == torch.float64
    assert torch.ones(3, device=npu).mean(dtype=torch.float64).dtype == torch.float64  # aclnnMean lists DOUBLE
    with pytest.raises(EmulatedNPUError, match="Double"):
        torch.ones(3, 3, device=npu).mm(torch.ones(3, 3, device=npu).to(npu, torch.float64))


@pytest.mark.parametrize(
    ("mask_shape", "ok"),
    [
        ((2, 1, 1, 5), False),
        ((2, 3, 1, 5), False),
        ((1, 1, 1, 5), False),
        ((2, 3, 4, 5), True),
        ((2, 1, 4, 5), True),
        ((1, 1, 4, 5), True),
        ((4, 5), True),
    ],
)
def test_sdpa_broadcast_masks(npu: torch.device, mask_shape: tuple[int, ...], ok: bool) -> None:
    torch.manual_seed(1)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
    mask = torch.rand(mask_shape) > 0.3
    mask[..., 0] = True  # no fully masked rows
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    args = (q.to(npu), k.to(npu), v.to(npu))
    if ok:
        got = F.scaled_dot_product_attention(*args, attn_mask=mask.to(npu))
        assert torch.allclose(got.cpu(), expected, atol=1e-5)
        return
    with pytest.raises(EmulatedNPUError) as caught:
        F.scaled_dot_product_attention(*args, attn_mask=mask.to(npu))
    _assert_message(caught.value, "error code is 561103", "NPU-FACTS.md, 'Attention'")
    assert str(list(mask_shape)) in str(caught.value)
    # Expanding to an accepted layout is the fix.
    full = mask.expand(2, 3, 4, 5)
    got = F.scaled_dot_product_attention(*args, attn_mask=full.to(npu))
    assert torch.allclose(got.cpu(), expected, atol=1e-5)
    with npu_emulator.restrictions(sdpa_mask=False):
        got = F.scaled_dot_product_attention(*args, attn_mask=mask.to(npu))
        assert torch.allclose(got.cpu(), expected, atol=1e-5)


def test_sdpa_early_bound_reference_is_checked_too(npu: torch.device) -> None:
    from torch.nn.functional import scaled_dot_product_attention as early

    q = torch.randn(1, 2, 3, 4, device=npu)
    with pytest.raises(EmulatedNPUError, match="561103"):
        early(q, q, q, attn_mask=torch.ones(1, 1, 1, 3, dtype=torch.bool, device=npu))


def test_sdpa_backward_on_device(npu: torch.device) -> None:
    q = torch.randn(1, 2, 3, 4, device=npu, requires_grad=True)
    out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    out.sum().backward()
    assert q.grad is not None
    assert q.grad.device == npu
    cpu_q = q.detach().cpu().requires_grad_(True)
    F.scaled_dot_product_attention(cpu_q, cpu_q, cpu_q, is_causal=True).sum().backward()
    assert torch.allclose(q.grad.cpu(), cpu_q.grad, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_nan_to_num_on_half_precision(npu: torch.device, dtype: torch.dtype) -> None:
    x = torch.tensor([float("nan"), float("inf"), 1.0], dtype=dtype, device=npu)
    with pytest.raises(EmulatedNPUError) as caught:
        torch.nan_to_num(x)
    _assert_message(caught.value, "nan_to_num", "SKILL.md, Runtime Patches, NanToNumSafe")
    with pytest.raises(EmulatedNPUError):
        x.nan_to_num_()
    assert torch.nan_to_num(x.float(), nan=0.0).tolist()[0] == 0.0
    with npu_emulator.restrictions(nan_to_num_half=False):
        assert torch.nan_to_num(x).dtype == dtype


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float16, torch.bfloat16])
def test_pow_fractional_exponent(npu: torch.device, dtype: torch.dtype) -> None:
    x = torch.arange(4, device=npu).to(dtype)
    with pytest.raises(EmulatedNPUError) as caught:
        torch.pow(x, 0.5)
    _assert_message(caught.value, "fractional exponent", "SKILL.md, Runtime Patches, PowFloatSafe")
    with pytest.raises(EmulatedNPUError):
        x**1.5
    with pytest.raises(EmulatedNPUError):
        torch.pow(x, torch.tensor(0.5))
    assert (x**2).dtype == dtype  # integral exponents work
    assert torch.allclose(torch.pow(x.float(), 0.5).cpu(), torch.arange(4).float().sqrt())
    with npu_emulator.restrictions(pow_fractional=False):
        assert torch.pow(x, 0.5).device == npu


def test_pow_float32_base_is_fine(npu: torch.device) -> None:
    assert torch.allclose(torch.pow(torch.full((2,), 4.0, device=npu), 0.5).cpu(), torch.full((2,), 2.0))


def test_disable_from_the_environment() -> None:
    import os
    import subprocess
    import sys

    code = (
        f"import sys; sys.path.insert(0, {str(EMULATOR)!r}); import npu_emulator; "
        "print(sorted(npu_emulator.RESTRICTIONS.keys() - npu_emulator.enabled_restrictions()))"
    )
    env = dict(os.environ, NPU_EMULATOR_DISABLE="float64, numpy")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['float64', 'numpy']"
    env["NPU_EMULATOR_DISABLE"] = "bogus"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "unknown restriction group 'bogus'" in done.stderr


def test_numpy_patch_applied_before_the_emulator_is_imported() -> None:
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "original = torch.Tensor.numpy\n"
        "torch.Tensor.numpy = lambda self, *, force=False: original(self.cpu(), force=force)\n"
        f"sys.path.insert(0, {str(EMULATOR)!r})\n"
        "import npu_emulator\n"
        "npu_emulator.install()\n"
        "print(torch.ones(2, device='npu').numpy().tolist())\n"
        "torch.Tensor.numpy = original\n"
        "try:\n"
        "    torch.ones(2, device='npu').numpy()\n"
        "except TypeError as error:\n"
        "    print('emulated npu' in str(error))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[1.0,", "1.0]", "True"]


def test_every_restriction_error_carries_its_group(npu: torch.device) -> None:
    import pickle

    x = torch.ones(3, device=npu)
    q = torch.randn(2, 3, 4, 8, device=npu)
    k = torch.randn(2, 3, 5, 8, device=npu)
    broadcast = torch.ones(2, 1, 1, 5, dtype=torch.bool, device=npu)
    cases = {
        "device_mismatch": lambda: x + torch.ones(3),
        "index_device": lambda: torch.arange(6.0, device=npu)[torch.tensor([0, 2])],
        "numpy": lambda: x.numpy(),
        "float64": lambda: torch.ones(2, 2, dtype=torch.float64, device=npu).mm(x[:2, None].to(npu, torch.float64)),
        "sdpa_mask": lambda: F.scaled_dot_product_attention(q, k, k, attn_mask=broadcast),
        "nan_to_num_half": lambda: torch.nan_to_num(x.half()),
        "pow_fractional": lambda: torch.pow(x.half(), 0.5),
    }
    assert set(cases) == set(npu_emulator.RESTRICTIONS), "one case per group of the rule table"
    for group, call in cases.items():
        with pytest.raises(EmulatedNPUError) as caught:
            call()
        assert caught.value.group == group
        assert f"restriction group: {group}" in str(caught.value)
        assert npu_emulator.RESTRICTIONS[group][1] in str(caught.value)
        copy = pickle.loads(pickle.dumps(caught.value))
        assert (type(copy), copy.group, str(copy)) == (type(caught.value), group, str(caught.value))
    with pytest.raises(EmulatedNPUError) as caught:
        x.to("npu:1")
    assert caught.value.group is None, "a device the emulator lacks is no restriction group"
    assert "restriction group" not in str(caught.value)
