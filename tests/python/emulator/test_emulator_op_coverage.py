"""Ops common in VLA training give the CPU results (values, dtypes, gradients) on the emulated device."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

Op = Callable[[torch.Tensor], torch.Tensor]

OPS: dict[str, Op] = {
    "conv2d": lambda x: F.conv2d(x.view(1, 3, 4, 4), torch.ones(5, 3, 3, 3, device=x.device), padding=1),
    "layer_norm": lambda x: F.layer_norm(x, (x.shape[-1],)),
    "group_norm": lambda x: F.group_norm(x.view(2, 6, 4), 3),
    "gelu_silu": lambda x: F.gelu(x) + F.silu(x),
    "softmax": lambda x: torch.softmax(x, dim=-1),
    "log_softmax_nll": lambda x: F.nll_loss(
        F.log_softmax(x, -1), torch.arange(x.shape[0], device=x.device) % x.shape[1]
    ),
    "cross_entropy": lambda x: F.cross_entropy(x, torch.arange(x.shape[0], device=x.device) % x.shape[1]),
    "mse_smooth_l1": lambda x: F.mse_loss(x, x.flip(0)) + F.smooth_l1_loss(x, x * 0.5),
    "interpolate": lambda x: F.interpolate(x.view(1, 3, 4, 4), scale_factor=2, mode="bilinear"),
    "einsum": lambda x: torch.einsum("ij,kj->ik", x, x),
    "cumsum_float": lambda x: x.cumsum(-1),
    "scatter_add": lambda x: torch.zeros_like(x).scatter_add(1, torch.zeros_like(x, dtype=torch.long), x),
    "gather_index_select": lambda x: (
        x.gather(1, torch.zeros(x.shape[0], 2, dtype=torch.long, device=x.device))
        + x.index_select(1, torch.tensor([0, 1], device=x.device))
    ),
    "masked_fill_where": lambda x: torch.where(x > 0, x, x.masked_fill(x < -1, 0.0) * 2),
    "cat_stack_split": lambda x: torch.cat([*x.split(2, dim=1), torch.stack([x, x]).sum(0)], dim=1),
    "clamp_norm": lambda x: x.clamp(-0.5, 0.5) + x.norm(dim=-1, keepdim=True),
    "topk_sort": lambda x: x.topk(3, dim=-1).values + x.sort(dim=-1).values[:, :3],
    "max_min_mean": lambda x: x.max(dim=-1).values + x.min(dim=-1).values + x.mean(dim=-1),
    "exp_log_rsqrt": lambda x: x.exp() + (x.abs() + 1).log() + (x.abs() + 1).rsqrt(),
    "embedding": lambda x: F.embedding(torch.tensor([[0, 2], [1, 1]], device=x.device), x),
    "dropout_eval": lambda x: F.dropout(x, p=0.5, training=False),
    "linear": lambda x: F.linear(x, torch.ones(3, x.shape[-1], device=x.device), torch.ones(3, device=x.device)),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_matches_cpu_with_gradients(npu: torch.device, name: str) -> None:
    op = OPS[name]
    base = torch.randn(6, 8, generator=torch.Generator().manual_seed(11))
    cpu_x = base.clone().requires_grad_(True)
    dev_x = base.clone().to(npu).requires_grad_(True)
    expected = op(cpu_x)
    got = op(dev_x)
    assert got.device == npu
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    assert torch.allclose(got.detach().cpu(), expected.detach(), atol=1e-5, rtol=1e-5)
    expected.float().sum().backward()
    got.float().sum().backward()
    assert dev_x.grad is not None
    assert dev_x.grad.device == npu
    assert torch.allclose(dev_x.grad.cpu(), cpu_x.grad, atol=1e-5, rtol=1e-5)


def test_random_sampling_on_device(npu: torch.device) -> None:
    torch.manual_seed(0)
    concentration = torch.full((1000,), 2.0, device=npu)
    beta = torch.distributions.Beta(concentration, torch.ones_like(concentration)).sample()
    assert beta.device == npu
    assert beta.min().item() >= 0.0
    assert beta.max().item() <= 1.0
    normal = torch.distributions.Normal(torch.zeros(1000, device=npu), 1.0).rsample()
    assert abs(normal.mean().item()) < 0.2
    picks = torch.multinomial(torch.ones(4, device=npu), 2)
    assert picks.device == npu
    dropped = F.dropout(torch.ones(1000, device=npu), p=0.5, training=True)
    assert 300 < int((dropped == 0).sum().item()) < 700
