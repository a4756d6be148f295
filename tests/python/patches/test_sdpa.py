"""SdpaMaskBroadcast: broadcast bool masks fail on the device (561103) without it; minimal expansion with it."""

from __future__ import annotations

import sys
import types

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

import runtime_patches as rp

# In a tuple: module-level names bound to the original are exactly what the patch rebinds.
ORIGINAL = (F.scaled_dot_product_attention,)
B, N, SQ, SKV, D = 2, 3, 4, 5, 8


def _qkv(device):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(B, N, SQ, D, generator=gen)
    k = torch.randn(B, N, SKV, D, generator=gen)
    v = torch.randn(B, N, SKV, D, generator=gen)
    return q.to(device), k.to(device), v.to(device)


def _padding_mask():
    keep = torch.ones(B, 1, 1, SKV, dtype=torch.bool)
    keep[0, ..., -2:] = False
    keep[1, ..., 0] = False
    return keep


def test_broadcast_mask_fails_on_device_without_the_patch(accel, fails_without_patch):
    q, k, v = _qkv(accel)
    mask = _padding_mask().to(accel)
    fails_without_patch(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), "561103")


@pytest.mark.parametrize(
    "mask_shape",
    [(B, 1, 1, SKV), (B, N, 1, SKV), (1, 1, 1, SKV), (1, SQ, SKV), (B, 1, SQ, SKV), (SQ, SKV), (N, 1, SKV)],
)
def test_masked_attention_matches_cpu(accel, make_patcher, mask_shape):
    q_host, k_host, v_host = _qkv("cpu")
    gen = torch.Generator().manual_seed(1)
    mask = torch.rand(mask_shape, generator=gen) > 0.3
    mask[..., 0] = True  # no fully masked rows
    expected = F.scaled_dot_product_attention(q_host, k_host, v_host, attn_mask=mask)
    patcher = make_patcher()
    q, k, v = q_host.to(accel), k_host.to(accel), v_host.to(accel)
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(accel))
    assert got.device.type == accel.type
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)
    got_positional = torch._C._nn.scaled_dot_product_attention(q, k, v, mask.to(accel), 0.0, False)
    torch.testing.assert_close(got_positional.cpu(), expected, rtol=1e-5, atol=1e-5)
    accepted = {(B, N, SQ, SKV), (B, 1, SQ, SKV), (1, 1, SQ, SKV), (SQ, SKV)}
    assert patcher.fires()["SdpaMaskBroadcast"] == (0 if mask_shape in accepted else 2)


@pytest.mark.parametrize(
    ("mask_shape", "fitted"),
    [
        ((B, 1, 1, SKV), (B, 1, SQ, SKV)),  # only the heads broadcast after Sq: keep N at 1
        ((1, 1, 1, SKV), (1, 1, SQ, SKV)),
        ((B, N, 1, SKV), (B, N, SQ, SKV)),
        ((1, N, SQ, SKV), (B, N, SQ, SKV)),
        ((N, 1, SKV), (B, N, SQ, SKV)),
        ((1, SQ, SKV), (1, 1, SQ, SKV)),
        ((B, 1, SQ, SKV), None),
        ((B, N, SQ, SKV), None),
        ((1, 1, SQ, SKV), None),
        ((SQ, SKV), None),
        ((B, 2, 1, SKV), None),  # not broadcastable: SDPA reports it
    ],
)
def test_mask_is_expanded_only_as_far_as_needed(mask_shape, fitted):
    q = torch.empty(B, N, SQ, D)
    k = torch.empty(B, N, SKV, D)
    result = rp._fit_mask(torch.ones(mask_shape, dtype=torch.bool), q, k)
    assert (None if result is None else tuple(result.shape)) == fitted


def test_float_masks_and_host_tensors_are_untouched(accel, make_patcher):
    q, k, v = _qkv(accel)
    patcher = make_patcher()
    additive = torch.zeros(B, 1, 1, SKV, device=accel)
    F.scaled_dot_product_attention(q, k, v, attn_mask=additive)
    F.scaled_dot_product_attention(q.cpu(), k.cpu(), v.cpu(), attn_mask=_padding_mask())
    assert patcher.fires()["SdpaMaskBroadcast"] == 0


def test_early_bound_references_are_rebound_and_restored(accel, make_patcher):
    module = types.ModuleType("early_bound_attention")
    module.sdpa = F.scaled_dot_product_attention  # as `from torch.nn.functional import ... as sdpa`
    sys.modules[module.__name__] = module
    try:
        patcher = make_patcher()
        assert module.sdpa is F.scaled_dot_product_attention is not ORIGINAL[0]
        q, k, v = _qkv(accel)
        module.sdpa(q, k, v, attn_mask=_padding_mask().to(accel))
        assert patcher.fires()["SdpaMaskBroadcast"] == 1
        row = next(r for r in patcher.report() if r.name == "SdpaMaskBroadcast")
        assert "early_bound_attention.sdpa" in row.reason
        patcher.remove()
        assert module.sdpa is ORIGINAL[0]
    finally:
        del sys.modules[module.__name__]


def test_multihead_attention_python_path_is_caught(accel, make_patcher):
    # nn.MultiheadAttention converts bool masks to float ones itself; what matters is that it calls the patched
    # function through torch.nn.functional's namespace.
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True).to(accel)
    x = torch.randn(2, 5, 16, device=accel)
    calls = []
    patcher = make_patcher()
    patched = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(1)
        return patched(*args, **kwargs)

    F.scaled_dot_product_attention = spy
    try:
        mha(x, x, x, need_weights=False)
    finally:
        F.scaled_dot_product_attention = patched
    assert calls, "nn.MultiheadAttention did not go through torch.nn.functional.scaled_dot_product_attention"
    assert patcher.applied
