"""The emulated npu device: registration, the torch.npu surface, tensors, ops, aliasing and serialization."""

from __future__ import annotations

import copy
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import npu_emulator
import pytest
import torch

EMULATOR = Path(__file__).resolve().parents[3] / "assets" / "emulator"


def test_install_is_idempotent_and_reported(npu: torch.device) -> None:
    npu_emulator.install()
    assert npu_emulator.is_installed()
    assert torch._C._get_privateuse1_backend_name() == "npu"
    assert npu == torch.device("npu", 0)


def test_torch_npu_module_surface(npu: torch.device) -> None:
    del npu
    assert torch.npu.is_available()
    assert torch.npu.device_count() == 1
    torch.npu.set_device(0)
    torch.npu.set_device("npu:0")
    assert torch.npu.current_device() == 0
    torch.npu.synchronize()
    torch.npu.empty_cache()
    assert torch.npu.is_bf16_supported()
    assert "emulated npu" in torch.npu.get_device_name()
    assert torch.npu.get_device_capability() is None
    assert torch.npu.memory_allocated() == 0
    with pytest.raises(npu_emulator.EmulatedNPUError, match="only npu:0"):
        torch.npu.set_device(1)
    import torch.npu.amp as npu_amp  # the module is importable, as with torch_npu

    assert npu_amp.autocast is torch.npu.amp.autocast
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    start.record()
    end.record()
    assert end.elapsed_time(start) <= 0.0 <= start.elapsed_time(end)


def test_factories_and_transfers(npu: torch.device) -> None:
    cases = {
        "randn": torch.randn(3, 4, device=npu),
        "zeros": torch.zeros(2, device="npu"),
        "full": torch.full((2, 2), 3.0, device="npu:0"),
        "arange": torch.arange(5, device=npu),
        "tensor": torch.tensor([1, 2, 3], device=npu),
        "eye": torch.eye(3, device=npu),
        "tril_indices": torch.tril_indices(3, 3, device=npu),
        "to": torch.ones(2).to(npu),
        "npu()": torch.ones(2).npu(),
        "zeros_like": torch.zeros_like(torch.ones(2, device=npu)),
    }
    for name, tensor in cases.items():
        assert tensor.device == npu, name
        assert tensor.is_npu, name
    assert torch.equal(cases["full"].cpu(), torch.full((2, 2), 3.0))
    assert torch.equal(cases["arange"].cpu(), torch.arange(5))
    back = cases["tensor"].cpu()
    assert type(back) is torch.Tensor
    assert back.device.type == "cpu"
    assert back.tolist() == [1, 2, 3]
    assert cases["tensor"].tolist() == [1, 2, 3]
    assert cases["tensor"].sum().item() == 6
    assert "device='npu:0'" in repr(cases["tensor"])
    with pytest.raises(npu_emulator.EmulatedNPUError, match="only npu:0"):
        torch.zeros(2, device="npu:1")


def test_ops_match_cpu(npu: torch.device) -> None:
    torch.manual_seed(0)
    a, b = torch.randn(4, 5), torch.randn(5, 3)
    da, db = a.to(npu), b.to(npu)
    assert torch.allclose((da @ db).cpu(), a @ b)
    assert torch.allclose(torch.softmax(da, -1).cpu(), torch.softmax(a, -1))
    values, indices = da.max(dim=1)
    assert values.device == npu
    assert indices.device == npu
    assert torch.equal(indices.cpu(), a.max(dim=1).indices)
    chunks = da.split(2, dim=0)
    assert [c.device for c in chunks] == [npu, npu, npu][: len(chunks)]
    assert torch.equal(torch.cat(chunks).cpu(), a)


def test_in_place_views_and_aliasing(npu: torch.device) -> None:
    x = torch.zeros(4, device=npu)
    y = x.add_(1)
    assert y is x
    view = x[1:3]
    view.mul_(5)
    assert x.tolist() == [1.0, 5.0, 5.0, 1.0]
    out = torch.empty(4, device=npu)
    result = torch.add(x, 1, out=out)
    assert result is out
    assert out.tolist() == [2.0, 6.0, 6.0, 2.0]


def test_write_alias_ops_resync_metadata(npu: torch.device) -> None:
    x = torch.zeros(3, device=npu)
    x.resize_(2, 5)
    assert x.shape == (2, 5)
    assert x.sum().item() == x.cpu().sum().item()
    y = torch.zeros(3, device=npu)
    y.unsqueeze_(0)
    assert y.shape == (1, 3)
    out = torch.empty(0, device=npu)
    torch.cat([torch.ones(2, device=npu), torch.ones(3, device=npu)], out=out)
    assert out.shape == (5,)
    assert out.tolist() == [1.0] * 5


def test_data_setter_and_data_ptr(npu: torch.device) -> None:
    v = torch.zeros(4, device=npu)
    v.data = torch.ones(2, 2, device=npu)
    assert v.shape == (2, 2)
    assert v.cpu().tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert v.data_ptr() != 0
    w = v.view(4)
    assert w.data_ptr() == v.data_ptr()


def test_repr_storage_and_inference_mode(npu: torch.device) -> None:
    x = torch.ones(2, device=npu, requires_grad=True)
    assert repr(x) == "tensor([1., 1.], device='npu:0', requires_grad=True)"
    assert "grad_fn=<MulBackward0>" in repr(x * 2)
    view = x.detach()[1:]
    assert view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    with torch.inference_mode():
        y = torch.ones(3, device=npu) * 2
    assert y.device == npu
    assert y.tolist() == [2.0, 2.0, 2.0]


def test_deepcopy_keeps_parameters_on_the_device(npu: torch.device) -> None:
    model = torch.nn.Linear(3, 2).to(npu)
    clone = copy.deepcopy(model)
    assert isinstance(clone.weight, torch.nn.Parameter)
    assert clone.weight.device == npu
    assert clone.weight is not model.weight
    assert torch.equal(clone.weight.cpu(), model.weight.cpu())
    with torch.no_grad():
        clone.weight.add_(1)
    assert not torch.equal(clone.weight.cpu(), model.weight.cpu())


def test_save_and_load_state_dict(npu: torch.device) -> None:
    model = torch.nn.Linear(3, 2).to(npu)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    assert all(t.device == npu for t in loaded.values())  # as a device checkpoint loads on its device
    buffer.seek(0)
    assert all(t.device.type == "cpu" for t in torch.load(buffer, map_location="cpu", weights_only=True).values())
    fresh = torch.nn.Linear(3, 2).to(npu)
    fresh.load_state_dict(loaded)
    assert fresh.weight.device == npu
    assert torch.equal(fresh.weight.cpu(), model.weight.cpu())


def test_device_rng_is_seeded_and_separate_from_cpu(npu: torch.device) -> None:
    torch.manual_seed(123)
    first = torch.randn(5, device=npu).cpu()
    torch.manual_seed(123)
    torch.randn(5)  # a CPU draw between the two device draws
    second = torch.randn(5, device=npu).cpu()
    assert torch.equal(first, second)  # the CPU draw in between did not consume the device stream
    torch.npu.manual_seed(7)
    state = torch.npu.get_rng_state()
    a = torch.rand(3, device=npu).cpu()
    torch.npu.set_rng_state(state)
    b = torch.rand(3, device=npu).cpu()
    assert torch.equal(a, b)


def test_device_rng_follows_the_cpu_stream_when_asked() -> None:
    # NPU_EMULATOR_RNG=cpu (npu-verify --parity): device draws come from the CPU default generator, in program order.
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(EMULATOR)!r})
        import torch
        import npu_emulator
        npu_emulator.install()

        def draws(device):
            torch.manual_seed(5)
            a = torch.randn(6, device=device)
            b = torch.rand(3)  # a host draw in between
            mask = torch.nn.functional.dropout(torch.ones(64, device=device), 0.5, training=True)
            return torch.cat([a.cpu(), b, mask.cpu()])

        print("same" if torch.equal(draws("npu"), draws("cpu")) else "different")
        """
    )
    for value, expected in (("cpu", "same"), ("", "different")):
        env = dict(os.environ, NPU_EMULATOR_RNG=value)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                              env=env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == expected, (value, done.stdout)


def test_cpu_code_is_unaffected_after_install(npu: torch.device) -> None:
    del npu
    x = torch.randn(4, 4, dtype=torch.float64)
    assert x.exp().dtype == torch.float64
    assert x.numpy().shape == (4, 4)
    q = torch.randn(2, 3, 5, 8)
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    assert torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask).shape == q.shape
    assert torch.nan_to_num(torch.tensor([float("nan")], dtype=torch.float16)).item() == 0.0
    assert torch.pow(torch.arange(4), 0.5).dtype == torch.float32
    assert (torch.ones(3) + torch.ones(3)).device.type == "cpu"


def test_import_installs_nothing_in_a_fresh_interpreter() -> None:
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(EMULATOR)!r})
        import torch
        import npu_emulator
        assert not npu_emulator.is_installed()
        assert torch._C._get_privateuse1_backend_name() == "privateuseone"
        assert not hasattr(torch, "npu")
        npu_emulator.install()
        assert hasattr(torch, "npu") and torch.ones(1, device="npu").device.type == "npu"
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_backward_works_when_the_engine_started_before_install() -> None:
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(EMULATOR)!r})
        import torch
        import npu_emulator
        w = torch.ones(2, requires_grad=True)
        (w * 3).sum().backward()  # starts the autograd engine before the npu device exists
        npu_emulator.install()
        x = torch.ones(2, device="npu", requires_grad=True)
        (x * 3).sum().backward()
        assert x.grad.device.type == "npu" and x.grad.tolist() == [3.0, 3.0]
        model = torch.nn.Linear(2, 1).to("npu")
        model(torch.ones(1, 2, device="npu")).sum().backward()
        assert model.weight.grad.tolist() == [[1.0, 1.0]]
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


@pytest.mark.skipif(not hasattr(torch, "accelerator"), reason=f"torch {torch.__version__} has no torch.accelerator (2.6+)")
def test_torch_accelerator_functions(npu: torch.device) -> None:
    assert torch.accelerator.current_accelerator() == torch.device("npu")
    assert torch.accelerator.device_count() == 1
    torch.accelerator.synchronize()
    torch.accelerator.synchronize(npu)
    with pytest.raises(npu_emulator.EmulatedNPUError, match="only npu:0"):
        torch.accelerator.synchronize(1)
    with torch.random.fork_rng(device_type="npu"):
        inside = torch.rand(3, device=npu).cpu()
    assert torch.equal(torch.rand(3, device=npu).cpu(), inside)  # fork_rng restored the device stream


@pytest.mark.skipif(
    not hasattr(getattr(torch, "accelerator", None), "memory_allocated"),
    reason=f"torch {torch.__version__} has no torch.accelerator memory statistics",
)
def test_torch_accelerator_memory_functions(npu: torch.device) -> None:
    torch.accelerator.empty_cache()
    assert torch.accelerator.memory_allocated() == 0
    assert torch.accelerator.max_memory_allocated(npu) == 0
    torch.accelerator.reset_peak_memory_stats()
    free, total = torch.accelerator.get_memory_info()
    assert free <= total


def test_dataloader_workers_with_pinned_memory(npu: torch.device) -> None:
    dataset = torch.utils.data.TensorDataset(torch.arange(16.0).view(8, 2), torch.arange(8))
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, pin_memory=True, num_workers=2)
    seen = [features.to(npu, non_blocking=True).sum().item() for features, _ in loader]
    assert seen == [28.0, 92.0]


def test_pinning_host_memory_is_a_copy_for_any_device_argument(npu: torch.device) -> None:
    # torch < 2.10 picks these kernels by the device argument (CUDA when None): none may touch CUDA here.
    host = torch.arange(4.0)
    for args in ((), ("npu",)):
        pinned = host.pin_memory(*args)
        assert torch.equal(pinned, host) and pinned.device.type == "cpu"
        assert not host.is_pinned(*args)
    assert torch.equal(host.pin_memory().to(npu, non_blocking=True).cpu(), host)
