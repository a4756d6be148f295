"""AdamWFused (opt-in): AdamW -> NpuFusedAdamW on the device, stock AdamW with a warning where it cannot apply."""

from __future__ import annotations

import json
import sys
import types
import warnings

import pytest
import torch

ORIGINAL = (torch.optim.AdamW,)


@pytest.fixture
def fused_base(accel):
    if accel.type != "npu":
        # Reported in the summary, not silent: NpuFusedAdamW exists only in torch_npu (real or stand-in).
        pytest.skip(f"AdamWFused needs torch_npu, absent on {accel}; test_skipped_without_torch_npu covers it")
    import torch_npu.optim

    return torch_npu.optim.NpuFusedAdamW


def _model(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).to(device)


def _train(model, opt, device, steps=4):
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(16, 4, generator=gen).to(device)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]


def test_fused_optimizer_restrictions_without_the_patch(fused_base, accel):
    bf16 = torch.nn.Parameter(torch.ones(2, device=accel, dtype=torch.bfloat16))
    with pytest.raises(TypeError):
        fused_base([bf16])
    opt = fused_base([torch.nn.Parameter(torch.ones(2, device=accel))])
    with pytest.raises(ValueError):
        opt.zero_grad(set_to_none=True)


def test_adamw_becomes_fused_and_matches_stock_adamw(fused_base, accel, make_patcher):
    reference = _train(_model("cpu"), None, "cpu", steps=0)  # same init
    cpu_model = _model("cpu")
    expected = _train(cpu_model, torch.optim.AdamW(cpu_model.parameters(), lr=1e-2, weight_decay=0.1), "cpu")
    patcher = make_patcher(fused_adamw=True)
    model = _model(accel)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1, foreach=True)
    assert isinstance(opt, fused_base) and isinstance(opt, torch.optim.AdamW)
    assert isinstance(opt, torch.optim.Optimizer)
    got = _train(model, opt, accel)  # zero_grad() defaults to set_to_none=True: handled
    for g, e, r in zip(got, expected, reference, strict=True):
        assert not torch.equal(g, r)
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
    opt.zero_grad()  # set_to_none=True by default in torch: zeroed in place instead of failing
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    assert patcher.fires()["AdamWFused"] == 1


@pytest.mark.parametrize(
    ("make_params", "kwargs", "reason"),
    [
        (lambda d: [torch.nn.Parameter(torch.ones(2, device=d, dtype=torch.bfloat16))], {}, "bfloat16"),
        (lambda d: [torch.nn.Parameter(torch.ones(2))], {}, "parameters on cpu"),
        (lambda d: [torch.nn.Parameter(torch.ones(2, device=d))], {"maximize": True}, "maximize"),
    ],
)
def test_fallback_to_stock_adamw_with_a_warning(fused_base, accel, make_patcher, make_params, kwargs, reason):
    patcher = make_patcher(fused_adamw=True)
    with pytest.warns(RuntimeWarning, match=reason):
        opt = torch.optim.AdamW(make_params(accel), **kwargs)
    assert type(opt) is ORIGINAL[0] and not isinstance(opt, fused_base)
    assert patcher.fires()["AdamWFused"] == 0


def test_param_groups_generators_and_early_imports(fused_base, accel, make_patcher):
    module = types.ModuleType("early_bound_optim")
    module.AdamW = torch.optim.AdamW
    sys.modules[module.__name__] = module
    try:
        patcher = make_patcher(fused_adamw=True)
        model = _model(accel)
        groups = [{"params": iter(model[0].parameters()), "lr": 0.1}, {"params": model[2].parameters()}]
        opt = module.AdamW(groups, lr=1e-3)
        assert isinstance(opt, fused_base)
        assert [g["lr"] for g in opt.param_groups] == [0.1, 1e-3]
        assert len(opt.param_groups[0]["params"]) == 2
        patcher.remove()
        assert module.AdamW is ORIGINAL[0] is torch.optim.AdamW
    finally:
        del sys.modules[module.__name__]


def test_disabled_by_default(make_patcher):
    patcher = make_patcher()
    assert torch.optim.AdamW is ORIGINAL[0]
    row = next(r for r in patcher.report() if r.name == "AdamWFused")
    assert row.state == "disabled" and "fused_adamw=True" in row.reason


def test_skipped_without_torch_npu(run_fresh):
    code = (
        "import json, sys, torch, runtime_patches as rp\n"
        "p = rp.build_vla_patcher(fused_adamw=True).apply()\n"
        "row = [r.as_dict() for r in p.report() if r.name == 'AdamWFused'][0]\n"
        "row['same'] = torch.optim.AdamW is sys.modules['torch.optim.adamw'].AdamW\n"
        "row['torch_npu'] = 'torch_npu' in sys.modules\n"
        "p.remove()\n"
        "print(json.dumps(row))\n"
    )
    row = json.loads(run_fresh(code, emulator=False).stdout)
    assert row["state"] == "skipped" and "torch_npu is not importable" in row["reason"]
    assert row["same"] is True and row["torch_npu"] is False
