"""``torch.jit.trace`` of modules with convolutions on the emulated npu: the graph and the numbers the CPU gives."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch


def _modules() -> dict[str, tuple[torch.nn.Module, tuple[int, ...]]]:
    torch.manual_seed(0)
    return {
        "conv2d": (torch.nn.Conv2d(2, 3, 3, stride=2, padding=1), (1, 2, 6, 6)),
        "conv2d_no_bias_groups": (torch.nn.Conv2d(4, 4, 3, groups=2, bias=False), (1, 4, 5, 5)),
        "conv1d": (torch.nn.Conv1d(2, 3, 3, dilation=2), (2, 2, 9)),
        "conv_transpose2d": (torch.nn.ConvTranspose2d(2, 3, 3, output_padding=1, stride=2), (1, 2, 4, 4)),
        "conv_relu_linear": (
            torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(36, 2)),
            (2, 2, 5, 5),
        ),
    }


def _kinds(traced: torch.jit.ScriptModule) -> list[str]:
    return [node.kind() for node in traced.inlined_graph.nodes() if node.kind().startswith("aten::")]


@pytest.mark.parametrize("name", list(_modules()))
def test_trace_of_a_convolution_matches_the_cpu(npu: torch.device, name: str) -> None:
    module, shape = _modules()[name]
    x = torch.randn(shape)
    other = torch.randn(shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cpu_traced = torch.jit.trace(copy.deepcopy(module), x)
        device_traced = torch.jit.trace(module.to(npu), x.to(npu))
    # The same graph as on the CPU: torch records aten::_convolution on every device.
    assert _kinds(device_traced) == _kinds(cpu_traced)
    assert "aten::_convolution" in _kinds(device_traced)
    # The traced graph runs on other inputs (the output depends on them) and trains.
    out = device_traced(other.to(npu))
    assert out.device == npu
    torch.testing.assert_close(out.cpu(), cpu_traced(other), rtol=1e-5, atol=1e-5)
    out.sum().backward()
    cpu_traced(other).sum().backward()
    for (n, p_cpu), p_npu in zip(cpu_traced.named_parameters(), device_traced.parameters()):
        torch.testing.assert_close(p_npu.grad.cpu(), p_cpu.grad, rtol=1e-5, atol=1e-5, msg=n)
