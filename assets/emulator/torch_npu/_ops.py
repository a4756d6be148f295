"""Reference implementations of the torch_npu custom ops that ported VLA code calls.

They compute on whatever device their inputs are on (the emulated ``npu`` or CPU), in float32, and cast back to
the input dtype. Semantics follow NPU-FACTS.md ("Attention", "What public VLA ports changed").
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch
from npu_emulator import EmulatedNPUError
from npu_emulator._errors import emulated_message

_FACTS = "NPU-FACTS.md, 'Attention'"
_LAYOUTS = ("BSH", "SBH", "BSND", "BNSD", "TND")
_COMPRESSED = 2048
_CAUSAL_MODES = (2, 3)
_MAX_TOKENS = 2147483647


def _fail(real: str, detail: str, source: str = _FACTS) -> EmulatedNPUError:
    return EmulatedNPUError(emulated_message(real, detail, source))


def _to_bnsd(x: torch.Tensor, layout: str, heads: int | None, head_dim: int | None) -> torch.Tensor:
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.permute(0, 2, 1, 3)
    if layout == "BSH":
        b, s, h = x.shape
        n = heads if heads is not None else h // _require(head_dim)
        return x.reshape(b, s, n, h // n).permute(0, 2, 1, 3)
    if layout == "SBH":
        s, b, h = x.shape
        n = heads if heads is not None else h // _require(head_dim)
        return x.reshape(s, b, n, h // n).permute(1, 2, 0, 3)
    raise _fail("invalid input_layout", f"layout {layout!r}; expected one of {', '.join(_LAYOUTS)}")


def _require(value: int | None) -> int:
    if value is None:
        raise _fail("invalid input", "head dimension unknown")
    return value


def _from_bnsd(x: torch.Tensor, layout: str) -> torch.Tensor:
    b, n, s, d = x.shape
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.permute(0, 2, 1, 3)
    if layout == "BSH":
        return x.permute(0, 2, 1, 3).reshape(b, s, n * d)
    return x.permute(2, 0, 1, 3).reshape(s, b, n * d)


def _check_mask_shape(mask: torch.Tensor, b: int, n: int, sq: int, skv: int, sparse_mode: int) -> None:
    shape = tuple(mask.shape)
    if sparse_mode in _CAUSAL_MODES:
        if shape != (_COMPRESSED, _COMPRESSED):
            detail = (
                f"sparse_mode={sparse_mode} expects the compressed triu(ones(2048, 2048), 1) bool mask, got "
                f"{list(shape)}"
            )
            raise _fail("get unsupported atten_mask shape", detail)
        if not torch.equal(mask.detach().cpu().bool(), _compressed_mask()):
            detail = (
                f"sparse_mode={sparse_mode}: atten_mask is not triu(ones(2048, 2048), 1) with True = masked out; "
                "a real device would compute with a wrong mask (a tril mask is the SDPA polarity)"
            )
            raise _fail("wrong compressed atten_mask", detail)
        return
    accepted = {(b, n, sq, skv), (b, 1, sq, skv), (1, 1, sq, skv), (sq, skv)}
    if shape not in accepted:
        detail = f"atten_mask {list(shape)}; accepted [B,N,Sq,Skv], [B,1,Sq,Skv], [1,1,Sq,Skv], [Sq,Skv]"
        real = "call aclnnFlashAttentionScore failed, error code is 561103 ... get unsupported atten_mask shape"
        raise _fail(real, detail)


@functools.cache
def _compressed_mask() -> torch.Tensor:
    return torch.ones(_COMPRESSED, _COMPRESSED, dtype=torch.bool).triu(1)


def _band(sq: int, skv: int, device: torch.device, sparse_mode: int, pre: int, nxt: int) -> torch.Tensor | None:
    """The positions a sparse mode masks out (True = masked), or None when nothing is."""
    rows = torch.arange(sq, device=device).unsqueeze(1)
    cols = torch.arange(skv, device=device).unsqueeze(0)
    if sparse_mode == 2:  # left-up causal
        return cols > rows
    if sparse_mode == 3:  # right-down causal
        return cols > rows + (skv - sq)
    if pre >= _MAX_TOKENS and nxt >= _MAX_TOKENS:
        return None
    return (cols > rows + nxt) | (cols < rows - pre)


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    pse: torch.Tensor | None,
    scale: float,
    keep_prob: float,
    sparse_mode: int,
    pre: int,
    nxt: int,
) -> torch.Tensor:
    """BNSD attention in float32; ``mask`` True = masked out."""
    n, nk = q.shape[1], k.shape[1]
    if nk != n:
        if n % nk:
            raise _fail("invalid head_num", f"query has {n} heads, key/value {nk}: not a multiple")
        k = k.repeat_interleave(n // nk, dim=1)
        v = v.repeat_interleave(n // nk, dim=1)
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if pse is not None:
        scores = scores + pse.float()
    sq, skv = q.shape[2], k.shape[2]
    masked = _band(sq, skv, q.device, sparse_mode, pre, nxt)
    if mask is not None and sparse_mode not in _CAUSAL_MODES:
        user = mask.bool()
        masked = user if masked is None else (user | masked)
    if masked is not None:
        scores = scores.masked_fill(masked, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if masked is not None:
        probs = torch.nan_to_num(probs, nan=0.0)
    if keep_prob < 1.0:
        probs = torch.nn.functional.dropout(probs, p=1.0 - keep_prob)
    return torch.matmul(probs, v.float())


def _lengths(cumulative: Sequence[int] | torch.Tensor | None, name: str) -> list[int]:
    if cumulative is None:
        raise _fail("invalid input", f"input_layout 'TND' needs {name} (cumulative sequence lengths)")
    values = [int(x) for x in (cumulative.tolist() if isinstance(cumulative, torch.Tensor) else cumulative)]
    if any(b < a for a, b in zip([0, *values], values, strict=False)):
        raise _fail("invalid input", f"{name} must be cumulative (non-decreasing), got {values}")
    return values


def npu_fusion_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    head_num: int,
    input_layout: str,
    pse: torch.Tensor | None = None,
    padding_mask: torch.Tensor | None = None,
    atten_mask: torch.Tensor | None = None,
    scale: float = 1.0,
    keep_prob: float = 1.0,
    pre_tockens: int = _MAX_TOKENS,
    next_tockens: int = _MAX_TOKENS,
    inner_precise: int = 0,
    prefix: Sequence[int] | None = None,
    actual_seq_qlen: Sequence[int] | torch.Tensor | None = None,
    actual_seq_kvlen: Sequence[int] | torch.Tensor | None = None,
    sparse_mode: int = 0,
    gen_mask_parallel: bool = True,
    sync: bool = False,
    softmax_layout: str = "",
) -> tuple[torch.Tensor, ...]:
    """Reference ``torch_npu.npu_fusion_attention``; returns a tuple whose ``[0]`` is the attention output.

    ``atten_mask`` is bool/uint8 with True = masked out (the inverse of SDPA's bool mask). ``scale`` defaults to
    1.0: pass ``1/sqrt(head_dim)`` yourself. ``sparse_mode`` 0 (mask as given, plus the pre/next token band),
    2 (left-up causal) and 3 (right-down causal; both with the compressed 2048x2048 ``triu`` mask) are emulated.
    The other tuple items are placeholders (softmax statistics are not reproduced).
    """
    # softmax_layout only changes the layout of the softmax statistics, which are placeholders here.
    del inner_precise, prefix, gen_mask_parallel, sync, softmax_layout
    if input_layout not in _LAYOUTS:
        raise _fail("invalid input_layout", f"{input_layout!r}; expected one of {', '.join(_LAYOUTS)}")
    if sparse_mode not in (0, *_CAUSAL_MODES):
        raise _fail("not emulated", f"sparse_mode={sparse_mode} (the emulator implements 0, 2 and 3)")
    if padding_mask is not None:
        raise _fail("invalid input", "padding_mask is reserved and must be None")
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        if tensor.dtype not in (torch.float16, torch.bfloat16, torch.float32):
            raise _fail("invalid dtype", f"{name} is {tensor.dtype}; npu_fusion_attention takes fp16/bf16/fp32")
    if atten_mask is not None and atten_mask.dtype not in (torch.bool, torch.uint8):
        raise _fail("invalid atten_mask dtype", f"{atten_mask.dtype}; expected bool or uint8 (True = masked out)")

    if input_layout == "TND":
        out = _tnd(query, key, value, head_num, pse, atten_mask, scale, keep_prob, sparse_mode,
                   pre_tockens, next_tockens, actual_seq_qlen, actual_seq_kvlen)  # fmt: skip
    else:
        head_dim = query.shape[-1] if input_layout in ("BSND", "BNSD") else query.shape[-1] // head_num
        q = _to_bnsd(query, input_layout, head_num, head_dim)
        k = _to_bnsd(key, input_layout, None, head_dim)
        v = _to_bnsd(value, input_layout, None, head_dim)
        b, n, sq, _ = q.shape
        if n != head_num:
            raise _fail("invalid head_num", f"head_num={head_num} but query has {n} heads in layout {input_layout}")
        if atten_mask is not None:
            _check_mask_shape(atten_mask, b, n, sq, k.shape[2], sparse_mode)
        o = _attend(q, k, v, atten_mask, pse, scale, keep_prob, sparse_mode, pre_tockens, next_tockens)
        out = _from_bnsd(o.to(query.dtype), input_layout)
    placeholder = query.new_zeros(())
    return out, placeholder, placeholder, placeholder, 0, 0, 0


def _tnd(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    head_num: int,
    pse: torch.Tensor | None,
    atten_mask: torch.Tensor | None,
    scale: float,
    keep_prob: float,
    sparse_mode: int,
    pre: int,
    nxt: int,
    actual_seq_qlen: Sequence[int] | torch.Tensor | None,
    actual_seq_kvlen: Sequence[int] | torch.Tensor | None,
) -> torch.Tensor:
    q_ends = _lengths(actual_seq_qlen, "actual_seq_qlen")
    kv_ends = _lengths(actual_seq_kvlen, "actual_seq_kvlen")
    if len(q_ends) != len(kv_ends):
        raise _fail("invalid input", f"{len(q_ends)} query sequences but {len(kv_ends)} key/value sequences")
    if query.shape[1] != head_num:
        raise _fail("invalid head_num", f"head_num={head_num} but TND query has {query.shape[1]} heads")
    if q_ends and (q_ends[-1] > query.shape[0] or kv_ends[-1] > key.shape[0]):
        raise _fail("invalid input", f"actual_seq lengths end at {q_ends[-1]}/{kv_ends[-1]}, beyond T")
    if atten_mask is not None and sparse_mode in _CAUSAL_MODES:
        _check_mask_shape(atten_mask, 1, head_num, 0, 0, sparse_mode)
    elif atten_mask is not None:
        raise _fail("not emulated", "TND with an explicit atten_mask needs sparse_mode 2 or 3 in the emulator")
    out = query.new_zeros(query.shape)
    q_start = kv_start = 0
    for q_end, kv_end in zip(q_ends, kv_ends, strict=True):
        q = query[q_start:q_end].transpose(0, 1).unsqueeze(0)
        k = key[kv_start:kv_end].transpose(0, 1).unsqueeze(0)
        v = value[kv_start:kv_end].transpose(0, 1).unsqueeze(0)
        o = _attend(q, k, v, None, pse, scale, keep_prob, sparse_mode, pre, nxt)
        out[q_start:q_end] = o.squeeze(0).transpose(0, 1).to(query.dtype)
        q_start, kv_start = q_end, kv_end
    return out


def npu_rms_norm(self: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference ``torch_npu.npu_rms_norm``: ``(x * rsqrt(mean(x^2) + eps) * gamma, rstd)``.

    The first parameter is named ``self`` as in torch_npu's schema (``_op_plugin_docs.py``).
    """
    x = self
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=dims, keepdim=True) + epsilon)
    return (xf * rstd * gamma.float()).to(x.dtype), rstd


def npu_rotary_mul(
    input: torch.Tensor,  # noqa: A002 - torch_npu's parameter name (_op_plugin_docs.py)
    r1: torch.Tensor,
    r2: torch.Tensor,
    rotary_mode: str = "half",
    rotate: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reference ``torch_npu.npu_rotary_mul`` in ``half`` mode: ``x * r1 + rotate_half(x) * r2``.

    ``interleave`` mode and the ``rotate`` matrix (torch_npu 2.8.0.post5 and later) are not emulated.
    """
    if rotary_mode != "half":
        raise _fail("not emulated", f"rotary_mode={rotary_mode!r} (the emulator implements 'half')")
    if rotate is not None:
        raise _fail("not emulated", "the rotate matrix (the emulator implements rotate=None)")
    x = input
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * r1 + rotated * r2


def default_scale(head_dim: int) -> float:
    """``1/sqrt(head_dim)``, the scale SDPA uses by default and npu_fusion_attention does not."""
    return 1.0 / math.sqrt(head_dim)
