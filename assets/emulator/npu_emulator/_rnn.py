"""Recurrent-network ops that torch runs only on a device, computed on the host tensors behind the device tensors.

On a device (CUDA, and PrivateUse1, which the emulated npu is) torch's LSTM and GRU cells call the fused cell ops
``_thnn_fused_lstm_cell`` / ``_thnn_fused_gru_cell`` and, in backward, ``_thnn_fused_lstm_cell_backward_impl`` /
``_thnn_fused_gru_cell_backward``, which CPU torch has no kernel for. torch_npu has NPU kernels for the layers and
the cells (torch-npu 2.14.0 ``torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml``: ``lstm.input``,
``gru.input``, ``_thnn_fused_lstm_cell``, ``_thnn_fused_lstm_cell_backward_impl``, ``_thnn_fused_gru_cell``; the
GRU cell's backward is its CPU fallback, warned about here as there, npu_emulator/_kernels.py), so ``nn.LSTM``,
``nn.GRU``, ``nn.LSTMCell`` and ``nn.GRUCell`` train on an Ascend NPU. Here the same gate arithmetic runs on the
CPU tensors; the workspace a forward returns is read only by the matching backward below (its layout is this
module's own).

Packed sequences keep their bookkeeping on the host on every device: ``pack_padded_sequence`` takes CPU
``lengths``, its ``batch_sizes`` stay on the CPU, and the ``.data`` overloads of the RNN ops and
``_pad_packed_sequence`` take them from there (torch/nn/utils/rnn.py; torch_npu 2.14.0 lists
``_pack_padded_sequence`` and ``lstm.data`` among its NPU kernels). Those host tensors are not a device mismatch,
and the host results stay on the host.
"""

from __future__ import annotations

from typing import Any

import torch

aten = torch.ops.aten


def _gates(gates: torch.Tensor, hidden: torch.Tensor, bias_in: Any, bias_hidden: Any) -> torch.Tensor:
    total = gates + hidden
    if bias_in is not None:
        total = total + bias_in
    if bias_hidden is not None:
        total = total + bias_hidden
    return total


def lstm_cell(
    input_gates: torch.Tensor,
    hidden_gates: torch.Tensor,
    cx: torch.Tensor,
    input_bias: Any = None,
    hidden_bias: Any = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``_thnn_fused_lstm_cell``: (hy, cy, workspace); the workspace holds the activated gates i, f, g, o."""
    i, f, g, o = _gates(input_gates, hidden_gates, input_bias, hidden_bias).chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], 1)


def lstm_cell_backward(
    grad_hy: Any, grad_cy: Any, cx: torch.Tensor, cy: torch.Tensor, workspace: torch.Tensor, has_bias: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``_thnn_fused_lstm_cell_backward_impl``: (grad of the gates, grad of cx, grad of the bias)."""
    del has_bias  # the bias gradient is the gates' gradient summed over the batch; unused without a bias
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_c = torch.zeros_like(cy)
    if grad_cy is not None:
        grad_c = grad_c + grad_cy
    grad_o = torch.zeros_like(o)
    if grad_hy is not None:
        grad_c = grad_c + grad_hy * o * (1 - tanh_cy * tanh_cy)
        grad_o = grad_hy * tanh_cy * o * (1 - o)
    grad_i = grad_c * g * i * (1 - i)
    grad_f = grad_c * cx * f * (1 - f)
    grad_g = grad_c * i * (1 - g * g)
    grad_gates = torch.cat([grad_i, grad_f, grad_g, grad_o], 1)
    return grad_gates, grad_c * f, grad_gates.sum(0)


def gru_cell(
    input_gates: torch.Tensor,
    hidden_gates: torch.Tensor,
    hx: torch.Tensor,
    input_bias: Any = None,
    hidden_bias: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``_thnn_fused_gru_cell``: (hy, workspace); the workspace holds r, z, n, hx and the hidden candidate."""
    if input_bias is not None:
        input_gates = input_gates + input_bias
    if hidden_bias is not None:
        hidden_gates = hidden_gates + hidden_bias
    in_r, in_z, in_n = input_gates.chunk(3, 1)
    hid_r, hid_z, hid_n = hidden_gates.chunk(3, 1)
    r = (in_r + hid_r).sigmoid()
    z = (in_z + hid_z).sigmoid()
    n = (in_n + r * hid_n).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, hx, hid_n], 1)


def gru_cell_backward(
    grad_hy: torch.Tensor, workspace: torch.Tensor, has_bias: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``_thnn_fused_gru_cell_backward``: grads of the input gates, hidden gates, hx, input bias, hidden bias."""
    del has_bias
    r, z, n, hx, hid_n = workspace.chunk(5, 1)
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_z = grad_hy * (hx - n) * z * (1 - z)
    grad_r = grad_n * hid_n * r * (1 - r)
    grad_input = torch.cat([grad_r, grad_z, grad_n], 1)
    grad_hidden = torch.cat([grad_r, grad_z, grad_n * r], 1)
    return grad_input, grad_hidden, grad_hy * z, grad_input.sum(0), grad_hidden.sum(0)


# Device-only op → its computation on the host tensors (the functional overloads; ``.out`` ones are not called by
# torch's RNN modules).
KERNELS: dict[Any, Any] = {
    aten._thnn_fused_lstm_cell.default: lstm_cell,
    aten._thnn_fused_lstm_cell_backward_impl.default: lstm_cell_backward,
    aten._thnn_fused_gru_cell.default: gru_cell,
    aten._thnn_fused_gru_cell_backward.default: gru_cell_backward,
}

# Op → the positions of its results that stay on the host (the packed sequences' batch sizes and lengths); every
# op listed also takes host tensors by contract.
HOST_RESULTS: dict[Any, tuple[int, ...]] = {
    aten._pack_padded_sequence: (1,),
    aten._pad_packed_sequence: (1,),
    aten._pack_padded_sequence_backward: (),
}
