"""The stand-in torch_npu package: version, namespaces, npu_fusion_attention, NpuFusedAdamW, transfer_to_npu."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from npu_emulator import EmulatedNPUError

ROOT = Path(__file__).resolve().parents[3]
EMULATOR = ROOT / "assets" / "emulator"

B, N, SQ, SKV, D = 2, 3, 5, 7, 8
SCALE = 1.0 / math.sqrt(D)


@pytest.fixture(scope="module")
def torch_npu(npu: torch.device) -> object:
    del npu
    import torch_npu

    return torch_npu


def _qkv(sq: int = SQ, skv: int = SKV, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(B, N, sq, D, generator=generator)
    k = torch.randn(B, N, skv, D, generator=generator)
    v = torch.randn(B, N, skv, D, generator=generator)
    return q, k, v


def _to_layout(x: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(1, 2).contiguous()
    if layout == "BSH":
        return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)
    return x.permute(2, 0, 1, 3).reshape(x.shape[2], x.shape[0], -1)  # SBH


def test_version_and_namespaces(torch_npu: object) -> None:
    base = torch.__version__.split("+")[0]
    assert torch_npu.__version__ == f"{base}.post0+emulated"
    assert torch_npu.__version__.split(".post")[0] == base
    assert torch_npu.npu is torch.npu
    torch_npu.npu.config.allow_internal_format = False
    assert torch.npu.config.allow_internal_format is False
    torch_npu.npu.set_compile_mode(jit_compile=False)
    assert torch_npu.npu.is_jit_compile_false()
    import torch_npu.npu as by_import

    assert by_import is torch.npu


@pytest.mark.parametrize("layout", ["BSH", "SBH", "BSND", "BNSD"])
@pytest.mark.parametrize("mask_kind", ["none", "BNSS", "B1SS", "11SS", "SS"])
def test_fusion_attention_matches_sdpa(torch_npu: object, npu: torch.device, layout: str, mask_kind: str) -> None:
    q, k, v = _qkv()
    keep = torch.rand(B, N, SQ, SKV, generator=torch.Generator().manual_seed(9)) > 0.4
    keep[..., 0] = True
    shapes = {"BNSS": (B, N, SQ, SKV), "B1SS": (B, 1, SQ, SKV), "11SS": (1, 1, SQ, SKV), "SS": (SQ, SKV)}
    sdpa_mask = None
    npu_mask = None
    if mask_kind != "none":
        sdpa_mask = keep[tuple(slice(0, n) for n in shapes[mask_kind])] if mask_kind != "SS" else keep[0, 0]
        npu_mask = sdpa_mask.logical_not().to(npu)  # True = masked out
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=sdpa_mask)
    out = torch_npu.npu_fusion_attention(
        _to_layout(q, layout).to(npu),
        _to_layout(k, layout).to(npu),
        _to_layout(v, layout).to(npu),
        N,
        layout,
        atten_mask=npu_mask,
        scale=SCALE,
    )
    assert isinstance(out, tuple)
    assert out[0].device == npu
    assert out[0].shape == _to_layout(q, layout).shape
    assert torch.allclose(out[0].cpu(), _to_layout(expected, layout), atol=1e-5)


def test_fusion_attention_default_scale_is_one(torch_npu: object) -> None:
    q, k, v = _qkv()
    unscaled = torch_npu.npu_fusion_attention(q, k, v, N, "BNSD")[0]
    assert torch.allclose(unscaled, F.scaled_dot_product_attention(q, k, v, scale=1.0), atol=1e-5)
    assert not torch.allclose(unscaled, F.scaled_dot_product_attention(q, k, v), atol=1e-3)


def test_fusion_attention_mask_polarity_is_inverted(torch_npu: object) -> None:
    q, k, v = _qkv()
    keep = torch.ones(SQ, SKV, dtype=torch.bool)
    keep[:, 3:] = False
    right = torch_npu.npu_fusion_attention(q, k, v, N, "BNSD", atten_mask=~keep, scale=SCALE)[0]
    wrong = torch_npu.npu_fusion_attention(q, k, v, N, "BNSD", atten_mask=keep, scale=SCALE)[0]
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    assert torch.allclose(right, expected, atol=1e-5)
    assert not torch.allclose(wrong, expected, atol=1e-3)


@pytest.mark.parametrize(("sparse_mode", "sq", "skv"), [(2, 5, 5), (2, 4, 7), (3, 5, 5), (3, 4, 7)])
def test_fusion_attention_causal_sparse_modes(
    torch_npu: object, npu: torch.device, sparse_mode: int, sq: int, skv: int
) -> None:
    q, k, v = _qkv(sq, skv)
    compressed = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    rows, cols = torch.arange(sq).unsqueeze(1), torch.arange(skv).unsqueeze(0)
    offset = 0 if sparse_mode == 2 else skv - sq  # left-up vs right-down alignment
    keep = cols <= rows + offset
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    out = torch_npu.npu_fusion_attention(
        q.to(npu), k.to(npu), v.to(npu), N, "BNSD", atten_mask=compressed.to(npu), scale=SCALE,
        sparse_mode=sparse_mode,
    )[0]  # fmt: skip
    assert torch.allclose(out.cpu(), expected, atol=1e-5)
    if sq == skv:
        causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        assert torch.allclose(out.cpu(), causal, atol=1e-5)


def test_fusion_attention_rejects_wrong_masks(torch_npu: object) -> None:
    q, k, v = _qkv()
    with pytest.raises(EmulatedNPUError, match="561103"):
        torch_npu.npu_fusion_attention(q, k, v, N, "BNSD", atten_mask=torch.zeros(B, 1, 1, SKV, dtype=torch.bool))
    with pytest.raises(EmulatedNPUError, match="2048"):
        torch_npu.npu_fusion_attention(
            q, k, v, N, "BNSD", atten_mask=torch.zeros(SQ, SKV, dtype=torch.bool), sparse_mode=3
        )
    tril = torch.ones(2048, 2048, dtype=torch.bool).tril()
    with pytest.raises(EmulatedNPUError, match="SDPA polarity"):
        torch_npu.npu_fusion_attention(q, k, v, N, "BNSD", atten_mask=tril, sparse_mode=3)
    with pytest.raises(EmulatedNPUError, match="input_layout"):
        torch_npu.npu_fusion_attention(q, k, v, N, "NSD")
    with pytest.raises(EmulatedNPUError, match="sparse_mode=5"):
        torch_npu.npu_fusion_attention(q, k, v, N, "BNSD", sparse_mode=5)
    with pytest.raises(EmulatedNPUError, match="head_num"):
        torch_npu.npu_fusion_attention(q, k, v, N + 1, "BNSD")


@pytest.mark.parametrize("sparse_mode", [0, 3])
def test_fusion_attention_tnd_varlen(torch_npu: object, npu: torch.device, sparse_mode: int) -> None:
    lengths_q, lengths_kv = [3, 5, 2], [4, 5, 6]
    generator = torch.Generator().manual_seed(4)
    q = torch.randn(sum(lengths_q), N, D, generator=generator)
    k = torch.randn(sum(lengths_kv), N, D, generator=generator)
    v = torch.randn(sum(lengths_kv), N, D, generator=generator)
    cu_q = torch.tensor([0, *lengths_q]).cumsum(0)
    cu_kv = torch.tensor([0, *lengths_kv]).cumsum(0)
    mask = torch.ones(2048, 2048, dtype=torch.bool).triu(1).to(npu) if sparse_mode == 3 else None
    out = torch_npu.npu_fusion_attention(
        q.to(npu), k.to(npu), v.to(npu), N, "TND", atten_mask=mask, scale=SCALE, sparse_mode=sparse_mode,
        actual_seq_qlen=cu_q[1:].tolist(), actual_seq_kvlen=cu_kv[1:].tolist(),
    )[0]  # fmt: skip
    assert out.shape == q.shape
    for i, (sq, skv) in enumerate(zip(lengths_q, lengths_kv, strict=True)):
        qs = q[cu_q[i] : cu_q[i + 1]].transpose(0, 1)
        ks = k[cu_kv[i] : cu_kv[i + 1]].transpose(0, 1)
        vs = v[cu_kv[i] : cu_kv[i + 1]].transpose(0, 1)
        keep = None
        if sparse_mode == 3:
            keep = torch.arange(skv).unsqueeze(0) <= torch.arange(sq).unsqueeze(1) + (skv - sq)
        expected = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=keep).transpose(0, 1)
        assert torch.allclose(out[cu_q[i] : cu_q[i + 1]].cpu(), expected, atol=1e-5), i
    with pytest.raises(EmulatedNPUError, match="cumulative"):
        torch_npu.npu_fusion_attention(q, k, v, N, "TND", actual_seq_qlen=[3, 2, 10], actual_seq_kvlen=[4, 9, 15])


def test_fusion_attention_half_precision_and_gqa(torch_npu: object, npu: torch.device) -> None:
    q, k, v = _qkv()
    k1, v1 = k[:, :1], v[:, :1]
    expected = F.scaled_dot_product_attention(q, k1.expand_as(k), v1.expand_as(v))
    out = torch_npu.npu_fusion_attention(
        q.to(npu).half(), k1.to(npu).half(), v1.to(npu).half(), N, "BNSD", scale=SCALE
    )[0]
    assert out.dtype == torch.float16
    assert torch.allclose(out.float().cpu(), expected, atol=5e-3)


def test_rms_norm_and_rotary_mul(torch_npu: object, npu: torch.device) -> None:
    x = torch.randn(2, 3, 8)
    gamma = torch.rand(8)
    out, rstd = torch_npu.npu_rms_norm(x.to(npu), gamma.to(npu), epsilon=1e-6)
    expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * gamma
    assert torch.allclose(out.cpu(), expected, atol=1e-6)
    assert rstd.shape == (2, 3, 1)
    cos, sin = torch.rand(1, 3, 8), torch.rand(1, 3, 8)
    rotated = torch.cat((-x[..., 4:], x[..., :4]), dim=-1)
    got = torch_npu.npu_rotary_mul(x.to(npu), cos.to(npu), sin.to(npu))
    assert torch.allclose(got.cpu(), x * cos + rotated * sin, atol=1e-6)


def test_npu_fused_adamw_restrictions(torch_npu: object, npu: torch.device) -> None:
    from torch_npu.optim import NpuFusedAdamW

    with pytest.raises(TypeError, match="bfloat16") as caught:
        NpuFusedAdamW(torch.nn.Linear(2, 2).bfloat16().to(npu).parameters())
    assert "emulated npu" in str(caught.value)
    assert "NPU-FACTS.md, 'Optimizers'" in str(caught.value)
    model = torch.nn.Linear(2, 2).to(npu)
    optimizer = NpuFusedAdamW(model.parameters())
    with pytest.raises(ValueError, match="set_to_none") as caught_none:
        optimizer.zero_grad(set_to_none=True)
    assert "emulated npu" in str(caught_none.value)
    optimizer.zero_grad()
    with pytest.raises(ValueError, match="learning rate"):
        NpuFusedAdamW(model.parameters(), lr=-1.0)
    with pytest.raises(TypeError):
        NpuFusedAdamW(model.parameters(), foreach=True)  # type: ignore[call-arg]


def test_npu_fused_adamw_matches_adamw(torch_npu: object, npu: torch.device) -> None:
    from torch_npu.optim import NpuFusedAdamW

    torch.manual_seed(2)
    reference = torch.nn.Linear(4, 3)
    fused_model = torch.nn.Linear(4, 3).to(npu)
    fused_model.load_state_dict(reference.state_dict())
    stock = torch.optim.AdamW(reference.parameters(), lr=0.05, weight_decay=0.1)
    fused = NpuFusedAdamW(fused_model.parameters(), lr=0.05, weight_decay=0.1)
    x = torch.randn(6, 4)
    for _ in range(3):
        stock.zero_grad()
        fused.zero_grad()
        reference(x).pow(2).sum().backward()
        fused_model(x.to(npu)).pow(2).sum().backward()
        stock.step()
        fused.step()
    assert torch.allclose(fused_model.weight.cpu(), reference.weight.detach(), atol=1e-6)
    assert torch.allclose(fused_model.bias.cpu(), reference.bias.detach(), atol=1e-6)


def test_npu_fused_adamw_leaves_out_params_without_grad_at_first_step(torch_npu: object, npu: torch.device) -> None:
    from torch_npu.optim import NpuFusedAdamW

    first, second = torch.nn.Linear(2, 2).to(npu), torch.nn.Linear(2, 2).to(npu)
    optimizer = NpuFusedAdamW([*first.parameters(), *second.parameters()], lr=0.1)
    first(torch.ones(1, 2, device=npu)).sum().backward()
    optimizer.step()  # second has no grad yet: it is not fused
    before = second.weight.detach().cpu().clone()
    second(torch.ones(1, 2, device=npu)).sum().backward()
    optimizer.step()
    assert torch.equal(second.weight.detach().cpu(), before)


def _pinned_wheel_for_this_torch() -> str | None:
    """The pinned torch-npu version (torch-npu/wheels.json) that pairs with this torch, if any."""
    manifest = json.loads((ROOT / "torch-npu" / "wheels.json").read_text(encoding="utf-8"))
    base = torch.__version__.split("+")[0]
    return next((w["version"] for w in manifest["wheels"] if w["torch"] == base), None)


@pytest.mark.parametrize("which", ["real", "standin"])
def test_transfer_to_npu_remaps_cuda(which: str, tmp_path: Path) -> None:
    """The same remaps with the wheel's own transfer_to_npu.py over the emulator and, with no wheel in the cache
    (offline), with the stand-in."""
    env = dict(os.environ)
    expected = "stand-in"
    if which == "standin":
        env["NPU_PATCHER_TORCH_NPU_DIR"] = str(tmp_path)  # an empty cache
    else:
        version = _pinned_wheel_for_this_torch()
        if version is None:
            pytest.skip(f"no pinned torch-npu wheel pairs with torch {torch.__version__}: only the stand-in can run")
        # The locator alone, without importing the stand-in package (which installs the device).
        spec = importlib.util.spec_from_file_location("_locator", EMULATOR / "torch_npu/contrib/_real_transfer.py")
        locator = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(locator)
        if not (locator.wheels_dir() / version / ".complete").is_file():
            pytest.fail(
                f"torch-npu {version} is not extracted under {locator.wheels_dir()}: run `cargo xtask torch-npu`"
            )
        expected = f"torch-npu {version} contrib/transfer_to_npu.py"
    code = textwrap.dedent(
        f"""
        import sys, warnings
        warnings.simplefilter("ignore")
        sys.path.insert(0, {str(EMULATOR)!r})
        import torch
        import npu_emulator
        from torch_npu.contrib import transfer_to_npu
        print(transfer_to_npu.SOURCE)
        if transfer_to_npu.SOURCE == "stand-in":
            assert "no extracted torch-npu wheel" in transfer_to_npu.STANDIN_REASON, transfer_to_npu.STANDIN_REASON
        checks = {{
            "factory str": torch.zeros(2, device="cuda").device.type,
            "factory index": torch.ones(2, device="cuda:0").device.type,
            "factory device": torch.randn(2, device=torch.device("cuda")).device.type,
            "tensor()": torch.tensor([1.0], device="cuda").device.type,
            "Tensor.to": torch.ones(1).to("cuda").device.type,
            "Tensor.to int": torch.ones(1).to(0).device.type,
            "Tensor.to kw": torch.ones(1).to(device="cuda").device.type,
            "Tensor.cuda": torch.ones(1).cuda().device.type,
            "Module.to": torch.nn.Linear(2, 2).to("cuda").weight.device.type,
            "Module.cuda": torch.nn.Linear(2, 2).cuda().weight.device.type,
        }}
        bad = {{k: v for k, v in checks.items() if v != "npu"}}
        assert not bad, bad
        assert torch.ones(1).cuda().is_cuda
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1
        assert torch.cuda.get_device_name() == torch.npu.get_device_name()
        assert torch.cuda.amp.autocast is torch.npu.amp.autocast
        assert torch.cuda.amp.GradScaler is torch.npu.amp.GradScaler
        if transfer_to_npu.SOURCE == "stand-in":  # the memory and stream API, as torch_npu's
            torch.cuda.set_per_process_memory_fraction(0.5)
            assert torch.cuda.utilization() == 0 and torch.cuda.memory_stats()["allocated_bytes.all.peak"] == 0
            torch.cuda.caching_allocator_delete(torch.cuda.caching_allocator_alloc(16))
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                assert torch.cuda.current_stream() == side
            assert torch.cuda.current_stream() != side
        import torch._dynamo  # torch internals still import
        optimizer = torch.optim.AdamW(torch.nn.Linear(2, 2).cuda().parameters())
        with torch.cuda.amp.autocast(dtype=torch.bfloat16):
            assert (torch.ones(2, 2).cuda() @ torch.ones(2, 2).cuda()).dtype == torch.bfloat16
        scripted = torch.jit.script(lambda x: x)
        assert scripted(3) == 3
        # not fixed, as documented: string comparisons
        assert torch.device("cuda").type == "cuda"
        # nccl is remapped to hccl, which the emulator runs as gloo underneath
        import tempfile
        store = tempfile.NamedTemporaryFile(delete=False).name
        assert torch.distributed.is_nccl_available() is True  # transfer_to_npu: is_nccl_available = is_hccl_available
        torch.distributed.init_process_group("nccl", rank=0, world_size=1, init_method="file://" + store)
        assert torch.distributed.get_backend() == "hccl", torch.distributed.get_backend()
        total = torch.ones(2, device="cuda")
        torch.distributed.all_reduce(total)
        assert total.device.type == "npu" and total.tolist() == [1.0, 1.0]
        torch.distributed.destroy_process_group()
        print("remapped", len(checks))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == [expected, "remapped 10"], done.stdout


def test_fusion_attention_token_band_in_sparse_mode_0(torch_npu: object) -> None:
    q, k, v = _qkv(5, 5)
    rows, cols = torch.arange(5).unsqueeze(1), torch.arange(5).unsqueeze(0)
    causal = torch_npu.npu_fusion_attention(q, k, v, N, "BNSD", scale=SCALE, next_tockens=0)[0]
    assert torch.allclose(causal, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-5)
    window = torch_npu.npu_fusion_attention(q, k, v, N, "BNSD", scale=SCALE, pre_tockens=1, next_tockens=0)[0]
    keep = (cols <= rows) & (cols >= rows - 1)
    assert torch.allclose(window, F.scaled_dot_product_attention(q, k, v, attn_mask=keep), atol=1e-5)


@pytest.mark.parametrize("which", ["real", "standin"])
def test_transfer_to_npu_remaps_device_contexts_and_the_cuda_api(which: str, tmp_path: Path) -> None:
    """Device contexts, the default device, torch.cuda's stream and memory API with CUDA devices, the profiler's
    and HCCL's option classes: the same with the wheel's own module and with the stand-in's replay of it."""
    env = dict(os.environ)
    if which == "standin":
        env["NPU_PATCHER_TORCH_NPU_DIR"] = str(tmp_path)  # an empty cache
    elif _pinned_wheel_for_this_torch() is None:
        pytest.skip(f"no pinned torch-npu wheel pairs with torch {torch.__version__}: only the stand-in can run")
    code = textwrap.dedent(
        f"""
        import sys, warnings
        warnings.simplefilter("ignore")
        sys.path.insert(0, {str(EMULATOR)!r})
        import torch
        import npu_emulator
        import torch_npu
        from torch_npu.contrib import transfer_to_npu
        with torch.device("cuda"):
            assert torch.tensor(1).device.type == "npu"
        with torch.device("meta"):
            assert torch.nn.Linear(2, 2).weight.device.type == "meta"
        if hasattr(torch, "set_default_device"):
            torch.set_default_device("cuda")
            try:
                assert torch.zeros(1).device.type == "npu"
            finally:
                torch.set_default_device(None)
        assert torch.zeros(1).device.type == "cpu"
        assert torch.cuda.current_stream(torch.device("cuda:0")) == torch.npu.current_stream(0)
        assert torch.cuda.memory_allocated("cuda:0") == torch.npu.memory_allocated(0)
        assert torch.ones(2, device=0).device.type == "npu"  # a card index given by keyword
        if hasattr(torch, "Event"):
            assert str(torch.Event(device="cuda:0").device).startswith("npu")
        from torch.distributed.distributed_c10d import ProcessGroupNCCL
        assert ProcessGroupNCCL.Options() is not None
        config = torch_npu.profiler._ExperimentalConfig(1, 1)
        assert config is not None
        print(transfer_to_npu.SOURCE)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False, env=env
    )
    assert done.returncode == 0, done.stderr
    assert (done.stdout.strip() == "stand-in") == (which == "standin"), done.stdout


@pytest.mark.parametrize("which", ["real", "standin"])
def test_transfer_to_npu_helpers_kernel_and_generators(which: str, tmp_path: Path) -> None:
    """The module's helpers under its names (config files, device dicts, third-party wrappers, the NCCL backend
    map), ``profiler_util.Kernel`` with a CUDA device and, from torch-npu 2.14.0 on, ``torch.cuda.default_generators``:
    the same with the wheel's own module and with the stand-in."""
    env = dict(os.environ)
    if which == "standin":
        env["NPU_PATCHER_TORCH_NPU_DIR"] = str(tmp_path / "empty")  # an empty cache
    elif _pinned_wheel_for_this_torch() is None:
        pytest.skip(f"no pinned torch-npu wheel pairs with torch {torch.__version__}: only the stand-in can run")
    config = tmp_path / "config.json"
    config.write_text('{"lib": {"version": "1.0"}}', encoding="utf-8")
    (tmp_path / "list.json").write_text("[1, 2]", encoding="utf-8")
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "link.json").symlink_to(config)
    code = textwrap.dedent(
        f"""
        import os, sys, warnings
        warnings.simplefilter("ignore")
        sys.path.insert(0, {str(EMULATOR)!r})
        import torch
        import npu_emulator
        import torch_npu
        from torch_npu.contrib import transfer_to_npu as t
        d = {str(tmp_path)!r}
        assert t._check_input_file_valid(os.path.join(d, "config.json"))
        assert not t._check_input_file_valid(os.path.join(d, "link.json"))
        assert not t._check_input_file_valid(os.path.join(d, "missing.json"))
        assert t._load_json_file(os.path.join(d, "config.json")) == {{"lib": {{"version": "1.0"}}}}
        for name in ("list.json", "broken.json", "link.json", "missing.json"):
            assert t._load_json_file(os.path.join(d, name)) == {{}}, name
        assert t._replace_cuda_to_npu_in_dict({{"cuda:0": "cuda:1", 3: 4}}) == {{"npu:0": "npu:1", 3: 4}}
        assert torch.cuda.is_available()
        seen = t._wrapper_libraries_func(lambda: torch.cuda.is_available())()
        assert seen is False and torch.cuda.is_available()
        def fails():
            raise ValueError("x")
        try:
            t._wrapper_libraries_func(fails)()
        except ValueError:
            pass
        # Both modules put the remapped is_available back only when the function returns.
        assert torch.cuda.is_available() is False
        backend = torch.distributed.Backend
        if hasattr(backend, "default_device_backend_map"):
            assert hasattr(t, "_del_nccl_device_backend_map")
            backend.default_device_backend_map["cuda"] = "nccl"
            t._del_nccl_device_backend_map()
            assert "cuda" not in backend.default_device_backend_map
        kernel = torch.autograd.profiler_util.Kernel("k", "cuda", 11)
        assert kernel.device == "npu" and kernel.name == "k" and kernel.duration == 11, kernel
        version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
        if version >= (2, 14):
            assert len(torch.cuda.default_generators) == len(torch.npu.default_generators) == 1
            assert torch.cuda.default_generators[0].device.type == "npu"
        print(t.SOURCE)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False, env=env
    )
    assert done.returncode == 0, done.stderr
    assert (done.stdout.strip() == "stand-in") == (which == "standin"), done.stdout
