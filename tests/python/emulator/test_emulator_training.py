"""Training on the emulated device: parameter identity, backward, optimizers, a small transformer, AMP."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn


class TinyPolicy(nn.Module):
    """A small transformer policy: token embedding, two encoder layers, an action head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(32, 32)
        layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(32)
        self.head = nn.Linear(32, 7)

    def forward(self, tokens: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(self.embed(tokens), src_key_padding_mask=pad)
        return self.head(self.norm(hidden).mean(dim=1))


def _batch(device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(5)
    tokens = torch.randint(0, 32, (4, 10), generator=generator)
    pad = torch.zeros(4, 10, dtype=torch.bool)
    pad[:, 8:] = True
    target = torch.randn(4, 7, generator=generator)
    return tokens.to(device), pad.to(device), target.to(device)


# torch < 2.3 has no tensor swap: Module.to() replaces the Parameter objects of wrapper tensors (emulator README).
SWAPS_PARAMETERS = hasattr(torch.utils, "swap_tensors")
NO_SWAP = f"torch {torch.__version__} has no torch.utils.swap_tensors (torch >= 2.3): Module.to('npu') makes new Parameters"


def _train(model: nn.Module, device: torch.device | str, steps: int) -> list[float]:
    if not SWAPS_PARAMETERS:
        model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.to(device)  # after building the optimizer, as much training code does
    tokens, pad, target = _batch(device)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(tokens, pad), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.skipif(not SWAPS_PARAMETERS, reason=NO_SWAP)
def test_module_to_keeps_parameter_identity(npu: torch.device) -> None:
    model = nn.Linear(4, 3)
    weight = model.weight
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model.to(npu)
    assert model.weight is weight
    assert isinstance(model.weight, nn.Parameter)
    assert weight.device == npu
    before = weight.detach().cpu().clone()
    model(torch.ones(2, 4, device=npu)).sum().backward()
    assert weight.grad is not None
    assert weight.grad.device == npu
    optimizer.step()
    assert torch.allclose(weight.detach().cpu(), before - 0.5 * 2.0)


def test_backward_matches_cpu(npu: torch.device) -> None:
    torch.manual_seed(0)
    cpu_model = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 2))
    dev_model = copy.deepcopy(cpu_model).to(npu)
    x = torch.randn(5, 6)
    cpu_model(x).pow(2).mean().backward()
    dev_model(x.to(npu)).pow(2).mean().backward()
    for cpu_p, dev_p in zip(cpu_model.parameters(), dev_model.parameters(), strict=True):
        assert dev_p.grad.device == npu
        assert torch.allclose(dev_p.grad.cpu(), cpu_p.grad, atol=1e-6)


def test_small_transformer_trains_like_cpu(npu: torch.device) -> None:
    torch.manual_seed(3)
    reference = TinyPolicy()
    cpu_losses = _train(copy.deepcopy(reference), "cpu", steps=4)
    device_model = copy.deepcopy(reference)
    dev_losses = _train(device_model, npu, steps=4)
    assert all(p.device == npu for p in device_model.parameters())
    assert dev_losses[-1] < dev_losses[0]
    assert dev_losses == pytest.approx(cpu_losses, rel=1e-4, abs=1e-5)


def test_buffers_and_state_dict_round_trip(npu: torch.device) -> None:
    model = nn.BatchNorm1d(3).to(npu)
    model(torch.randn(8, 3, device=npu))
    assert model.running_mean.device == npu
    assert model.num_batches_tracked.item() == 1
    state = {k: v.cpu() for k, v in model.state_dict().items()}
    assert state["running_mean"].abs().sum() > 0


def test_autocast_on_device(npu: torch.device) -> None:
    model = nn.Linear(8, 4).to(npu)
    x = torch.randn(3, 8, device=npu)
    with torch.autocast("npu", dtype=torch.bfloat16):
        out = model(x)
        probs = torch.softmax(out, dim=-1)
        summed = x + x
    assert out.dtype == torch.bfloat16
    assert probs.dtype == torch.float32
    assert summed.dtype == torch.float32
    assert torch.allclose(out.float().cpu(), model(x).cpu(), atol=5e-2)
    with torch.npu.amp.autocast(dtype=torch.bfloat16):
        assert model(x).dtype == torch.bfloat16
    assert model(x).dtype == torch.float32
    # CPU code inside an npu autocast region is untouched.
    with torch.autocast("npu", dtype=torch.bfloat16):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


def test_float16_autocast_on_device(npu: torch.device) -> None:
    # On every torch of the matrix: where CPU torch lacks float16 matmul (2.1), the emulator computes it in
    # float32 and casts back (an emulator fault it carries on from, not the program's).
    model = nn.Linear(8, 4).to(npu)
    x = torch.randn(3, 8, device=npu)
    with torch.npu.amp.autocast(dtype=torch.float16):
        assert model(x).dtype == torch.float16
    assert model(x).dtype == torch.float32


def test_grad_scaler_steps(npu: torch.device) -> None:
    model = nn.Linear(4, 1).to(npu)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.npu.amp.GradScaler(init_scale=1024.0)
    before = model.weight.detach().cpu().clone()
    with torch.autocast("npu", dtype=torch.float16):
        loss = model(torch.ones(2, 4, device=npu)).float().sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    assert not torch.equal(before, model.weight.detach().cpu())
    assert scaler.get_scale() == 1024.0


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_activation_checkpointing_replays_device_randomness(npu: torch.device, use_reentrant: bool) -> None:
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.GELU()).to(npu)
    x = torch.randn(16, 8).to(npu).requires_grad_(True)

    torch.manual_seed(1)
    block(x).sum().backward()
    direct = x.grad.cpu().clone()
    x.grad = None
    block.zero_grad()

    torch.manual_seed(1)
    checkpoint(block, x, use_reentrant=use_reentrant).sum().backward()
    assert torch.allclose(x.grad.cpu(), direct, atol=1e-6)  # the recomputation drew the same dropout mask


def test_optimizers_default_to_foreach_on_the_device(npu: torch.device) -> None:
    from torch.optim.optimizer import _default_to_fused_or_foreach

    device_params = list(nn.Linear(2, 2).to(npu).parameters())
    assert _default_to_fused_or_foreach(device_params, differentiable=False) == (False, True)
    cpu_params = list(nn.Linear(2, 2).parameters())
    assert _default_to_fused_or_foreach(cpu_params, differentiable=False) == (False, False)
