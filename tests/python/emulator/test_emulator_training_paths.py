"""Training paths that torch < 2.3 takes differently for a device subclass: shared parameters through ``.to()``,
foreach gradient clipping, GradScaler (plain and as ``torch.cuda.amp.GradScaler`` under transfer_to_npu). Each
trains the same model on the CPU and on the emulated npu and compares; they run on every torch of the matrix."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

EMULATOR = Path(__file__).resolve().parents[3] / "assets" / "emulator"


class Tied(nn.Module):
    """A language-model head sharing the embedding's weight (``head.weight = emb.weight``)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(7, 4)
        self.mid = nn.Linear(4, 4)
        self.head = nn.Linear(4, 7, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.mid(self.emb(tokens))))


def _train(model: nn.Module, device: torch.device | str, steps: int = 3, **clip: object) -> list[torch.Tensor]:
    tokens = torch.tensor([[1, 2, 3], [4, 5, 6]]).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten())
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1, **clip)  # type: ignore[arg-type]
        optimizer.step()
    return [p.detach().cpu() for p in model.parameters()]


def test_tied_weights_stay_tied_through_to_device(npu: torch.device) -> None:
    torch.manual_seed(0)
    cpu = Tied()
    dev = copy.deepcopy(cpu).to(npu)
    assert dev.head.weight is dev.emb.weight
    assert len(list(dev.parameters())) == len(list(cpu.parameters())) == 3
    assert dev.emb.weight.device.type == "npu"
    for got, want in zip(_train(dev, npu), _train(cpu, "cpu")):
        torch.testing.assert_close(got, want)
    assert dev.head.weight is dev.emb.weight  # still one parameter after training
    cpu_again = dev.to("cpu")
    assert cpu_again.head.weight is cpu_again.emb.weight


def test_foreach_gradient_clipping_runs_on_the_device(npu: torch.device) -> None:
    torch.manual_seed(0)
    cpu = Tied()
    dev = copy.deepcopy(cpu).to(npu)
    for got, want in zip(_train(dev, npu, foreach=True), _train(cpu, "cpu", foreach=True)):
        torch.testing.assert_close(got, want)
    weight = nn.Parameter(torch.zeros(3).to(npu))
    weight.grad = torch.full((3,), 10.0).to(npu)
    norm = torch.nn.utils.clip_grad_norm_([weight], 1.0, foreach=True)
    assert norm.device.type == "npu"
    torch.testing.assert_close(norm.cpu(), torch.tensor(3**0.5 * 10))
    torch.testing.assert_close(weight.grad.norm().cpu(), torch.tensor(1.0), rtol=1e-5, atol=1e-5)


def _scaled_run(device: str, make_scaler: object) -> tuple[list[torch.Tensor], list[float]]:
    torch.manual_seed(0)
    model = nn.Linear(3, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = make_scaler()  # type: ignore[operator]
    x = torch.randn(4, 3).to(device)
    scales = []
    for step in range(4):
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        if step == 1:
            loss = loss * float("inf")  # an overflowing step: skipped, the scale backs off
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        scales.append(scaler.get_scale())
    return [p.detach().cpu() for p in model.parameters()], scales


def _unscaled_reference() -> list[torch.Tensor]:
    """What the scaler must give: plain float32 training on the CPU with the overflowing step skipped."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 3)
    for step in range(4):
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        if step != 1:
            optimizer.step()
    return [p.detach() for p in model.parameters()]


def test_grad_scaler_trains_as_unscaled_training_on_the_cpu(npu: torch.device, capsys: pytest.CaptureFixture[str]) -> None:
    del npu
    params, scales = _scaled_run("npu", lambda: torch.npu.amp.GradScaler(init_scale=2.0**8, growth_interval=2))
    for got, want in zip(params, _unscaled_reference()):
        torch.testing.assert_close(got, want)
    assert scales == [2.0**8, 2.0**7, 2.0**7, 2.0**8]  # backoff after the inf, growth after two clean steps
    # torch_npu's scaler (npu/amp/grad_scaler.py, 2.1.0.post17 and 2.14.0) says what it does.
    assert capsys.readouterr().out.splitlines() == [
        "Gradient overflow. Skipping step",
        "Loss scaler reducing loss scale to 128.0",
        "Loss scaler increasing loss scale to 256.0",
    ]
    if hasattr(torch.amp, "GradScaler"):
        on_cpu = _scaled_run("cpu", lambda: torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=2))
        assert on_cpu[1] == scales
        for got, want in zip(params, on_cpu[0]):
            torch.testing.assert_close(got, want)


def test_a_static_loss_scale_steps_every_time(npu: torch.device) -> None:
    model = nn.Linear(3, 1).to(npu)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.npu.amp.GradScaler(init_scale=4.0, dynamic=False)
    before = model.weight.detach().cpu().clone()
    scaler.scale(model(torch.ones(2, 3, device=npu)).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == 4.0
    torch.testing.assert_close(model.weight.detach().cpu(), before - 0.1 * 2.0)  # unscaled gradient: 2 per weight


def test_grad_scaler_unscale_then_clip(npu: torch.device) -> None:
    model = nn.Linear(3, 1).to(npu)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.npu.amp.GradScaler(init_scale=2.0**10)
    scaler.scale(model(torch.ones(2, 3, device=npu)).sum()).backward()
    scaler.unscale_(optimizer)
    torch.testing.assert_close(model.bias.grad.cpu(), torch.tensor([2.0]))  # unscaled: d(sum)/d(bias) = 2
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == 2.0**10


def test_cuda_code_under_transfer_to_npu_keeps_ties_clips_and_scales(tmp_path: Path) -> None:
    """``model.cuda()``, ``clip_grad_norm_(foreach=True)`` and ``torch.cuda.amp.GradScaler`` under the stand-in
    transfer_to_npu (which replays the pinned wheel's remaps: ``torch.cuda.amp`` takes ``torch_npu.npu.amp``'s
    names, GradScaler among them, in every pinned version), against the same training on the CPU."""
    code = textwrap.dedent(
        f"""
        import sys, warnings
        warnings.simplefilter("ignore")
        sys.path.insert(0, {str(EMULATOR)!r})
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import copy
        import torch
        import npu_emulator
        import torch_npu
        from torch_npu.contrib import transfer_to_npu
        from test_emulator_training_paths import Tied, _train, _unscaled_reference, _scaled_run
        assert torch.cuda.amp.GradScaler is torch.npu.amp.GradScaler
        torch.manual_seed(0)
        cpu = Tied()
        dev = copy.deepcopy(cpu).cuda()
        assert dev.head.weight is dev.emb.weight and dev.emb.weight.device.type == "npu"
        for got, want in zip(_train(dev, "cuda", foreach=True), _train(cpu, "cpu", foreach=True)):
            torch.testing.assert_close(got, want)
        params, scales = _scaled_run("cuda", lambda: torch.cuda.amp.GradScaler(init_scale=256.0, growth_interval=2))
        for got, want in zip(params, _unscaled_reference()):
            torch.testing.assert_close(got, want)
        assert scales == [256.0, 128.0, 128.0, 256.0], scales
        print(transfer_to_npu.SOURCE)
        """
    )
    env = dict(os.environ, NPU_PATCHER_TORCH_NPU_DIR=str(tmp_path))  # an empty cache: the stand-in
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "stand-in", done.stdout


def test_the_amp_ops_run_on_the_device(npu: torch.device) -> None:
    """torch_npu has kernels for both (kernel table of 2.1.0.post17 and 2.14.0); CPU torch < 2.3 has neither."""
    scale = torch.full((), 8.0).to(npu)
    tracker = torch.zeros((), dtype=torch.int32).to(npu)
    found = torch.zeros(1).to(npu)
    seen = []
    for inf in (0.0, 0.0, 1.0, 0.0):
        found.fill_(inf)
        torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 2)
        seen.append((scale.item(), tracker.item()))
    assert seen == [(8.0, 1), (16.0, 0), (8.0, 0), (8.0, 1)]
    grads = [torch.tensor([2.0, 4.0]).to(npu), torch.tensor([float("inf")]).to(npu)]
    found.zero_()
    torch._amp_foreach_non_finite_check_and_unscale_(grads[:1], found, torch.tensor(0.5).to(npu))
    assert found.item() == 0.0 and grads[0].cpu().tolist() == [1.0, 2.0]
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, torch.tensor(0.5).to(npu))
    assert found.item() == 1.0 and grads[0].cpu().tolist() == [0.5, 1.0]
