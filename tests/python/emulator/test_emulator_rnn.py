"""LSTM and GRU layers, cells and packed sequences train on the emulated npu as on the CPU.

On a device torch's recurrent cells call fused ops that CPU torch has no kernel for, and packed sequences keep
their lengths and batch sizes on the host (npu_emulator/_rnn.py). Each case runs from the same seed on the CPU and
on the npu (the module and the inputs made on the CPU, then moved) and compares the outputs, the input gradients and
every parameter's gradient.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

LAYERS = [
    pytest.param(nn.LSTM, False, id="lstm"),
    pytest.param(nn.LSTM, True, id="lstm-bidirectional"),
    pytest.param(nn.GRU, False, id="gru"),
    pytest.param(nn.GRU, True, id="gru-bidirectional"),
]


def _grads(module: nn.Module) -> list[torch.Tensor]:
    return [p.grad.detach().cpu() for p in module.parameters()]


def _close(npu_values: list[Any], cpu_values: list[Any]) -> None:
    assert len(npu_values) == len(cpu_values)
    for got, want in zip(npu_values, cpu_values):
        if isinstance(want, torch.Tensor):
            assert got.device.type == "cpu"  # every value was brought to the host for the comparison
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        else:
            assert got == want


def _layer_run(layer: type[nn.Module], bidirectional: bool, dev: str) -> list[Any]:
    torch.manual_seed(0)
    module = layer(4, 8, num_layers=2, batch_first=True, bidirectional=bidirectional).to(dev)
    x = torch.randn(3, 5, 4).to(dev).requires_grad_(True)
    out, hidden = module(x)
    final = hidden[0] if isinstance(hidden, tuple) else hidden
    (out.pow(2).sum() + final.sum()).backward()
    assert out.device.type == torch.device(dev).type
    return [out.detach().cpu(), final.detach().cpu(), x.grad.cpu(), *_grads(module)]


@pytest.mark.parametrize(("layer", "bidirectional"), LAYERS)
def test_a_recurrent_layer_trains_as_on_the_cpu(npu: torch.device, layer: Any, bidirectional: bool) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # GRU's backward is torch_npu's CPU fallback: warned, as on an NPU
        _close(_layer_run(layer, bidirectional, str(npu)), _layer_run(layer, bidirectional, "cpu"))


def _packed_run(layer: type[nn.Module], bidirectional: bool, dev: str) -> list[Any]:
    torch.manual_seed(0)
    module = layer(4, 6, batch_first=True, bidirectional=bidirectional).to(dev)
    x = torch.randn(3, 5, 4)
    lengths = torch.tensor([5, 2, 3])  # on the host, as pack_padded_sequence requires on every device
    packed = pack_padded_sequence(x.to(dev), lengths, batch_first=True, enforce_sorted=False)
    out, _ = module(packed)
    padded, out_lengths = pad_packed_sequence(out, batch_first=True)
    padded.sum().backward()
    return [
        padded.detach().cpu(),
        out_lengths.tolist(),
        packed.batch_sizes.device.type,
        out_lengths.device.type,
        packed.data.device.type == torch.device(dev).type,
        *_grads(module),
    ]


@pytest.mark.parametrize(("layer", "bidirectional"), LAYERS)
def test_packed_sequences_keep_their_sizes_on_the_host(npu: torch.device, layer: Any, bidirectional: bool) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _close(_packed_run(layer, bidirectional, str(npu)), _packed_run(layer, bidirectional, "cpu"))


def _cell_run(cell: type[nn.Module], dev: str) -> list[Any]:
    torch.manual_seed(0)
    module = cell(4, 6).to(dev)
    x = torch.randn(2, 4).to(dev).requires_grad_(True)
    hidden = module(x)
    h = hidden[0] if isinstance(hidden, tuple) else hidden
    # create_graph: the gradient of the gradient goes through torch's differentiable cell backward
    (grad,) = torch.autograd.grad(h.pow(2).sum(), x, create_graph=True)
    grad.sum().backward()
    return [h.detach().cpu(), grad.detach().cpu(), *_grads(module)]


@pytest.mark.parametrize("cell", [nn.LSTMCell, nn.GRUCell], ids=["lstm-cell", "gru-cell"])
def test_a_cell_and_its_double_backward_match_the_cpu(npu: torch.device, cell: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _close(_cell_run(cell, str(npu)), _cell_run(cell, "cpu"))

