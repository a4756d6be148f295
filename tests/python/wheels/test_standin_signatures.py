"""The stand-in torch_npu's public API against each pinned wheel's own signatures (read with ``ast``).

Every name the stand-in offers is compared by parameter names, order and defaults with the wheel: the operators
with their schema line in ``_op_plugin_docs.py``, ``optim.NpuFusedAdamW``, ``torch.npu.*`` (the names of
``torch_npu.npu.__all__``) and ``torch.npu.amp.*`` with their ``def``/``class`` in the wheel's Python files. The
stand-in follows the newest pinned version; for an older version it may only add the trailing parameters that the
newest version added (listed in the emulator README). Any other difference fails.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest
import torch
from api_source import NO_DEFAULT, Expr, op_schema, python_signature
from wheels_cache import VERSIONS, wheel_root

OPS = ("npu_fusion_attention", "npu_rms_norm", "npu_rotary_mul")
AMP = ("autocast", "GradScaler", "custom_fwd", "custom_bwd")
# torch.npu's legacy tensor types (FloatTensor, ...): the wheel's C extension defines them, its Python files only
# name them in __all__; tests/python/emulator/test_emulator_legacy_types.py checks their behaviour instead.
LEGACY_TYPES = {
    f"{kind}Tensor" for kind in ("BFloat16", "Bool", "Byte", "Char", "Double", "Float", "Half", "Int", "Long", "Short")
}


def _ours(obj: Any) -> list[tuple[str, Any]]:
    target = obj.__init__ if isinstance(obj, type) else obj
    params = [
        (p.name, NO_DEFAULT if p.default is p.empty else p.default)
        for p in inspect.signature(target).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    return params[1:] if isinstance(obj, type) else params


def _value(default: Any) -> Any:
    # A default the wheel writes as an expression (`torch.float16`, `2.0 ** 16`) is evaluated with torch only.
    return eval(default.text, {"__builtins__": {}, "torch": torch}) if isinstance(default, Expr) else default  # noqa: S307


def _npu_all(root: Path) -> list[str]:
    tree = ast.parse((root / "torch_npu/npu/__init__.py").read_text(encoding="utf-8"))
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in stmt.targets):
            return sorted(set(ast.literal_eval(stmt.value)))
    raise AssertionError("torch_npu/npu/__init__.py has no literal __all__")


def signature_problem(
    name: str, wheel: list[tuple[str, Any]] | None, ours: list[tuple[str, Any]], newest: list[tuple[str, Any]] | None
) -> str | None:
    """Why ``ours`` does not match ``wheel`` (None when it does, or only adds ``newest``'s trailing params)."""
    if wheel is None:
        return f"{name}: the wheel does not define it"
    wheel = [(n, _value(d)) for n, d in wheel]
    newest = [(n, _value(d)) for n, d in (newest or [])]
    if ours == wheel:
        return None
    extra = ours[len(wheel) :]
    if ours[: len(wheel)] == wheel and extra and all(p in newest for p in extra):
        return None
    return f"{name}: the wheel has {wheel}, the stand-in {ours}"


def _pairs(npu: torch.device) -> list[tuple[str, Any, Any]]:
    """``(name, stand-in object, reader(root))`` for every compared name."""
    del npu
    import torch_npu
    from torch_npu.optim import NpuFusedAdamW

    pairs = [(f"torch_npu.{op}", getattr(torch_npu, op), lambda r, op=op: op_schema(r, op)) for op in OPS]
    pairs.append(("torch_npu.optim.NpuFusedAdamW", NpuFusedAdamW, lambda r: python_signature(r, "optim", "NpuFusedAdamW")))
    for name in AMP:
        pairs.append((f"torch.npu.amp.{name}", getattr(torch.npu.amp, name), lambda r, n=name: python_signature(r, "npu/amp", n)))
    newest = wheel_root(VERSIONS[-1])
    for name in _npu_all(newest):
        obj = getattr(torch.npu, name, None)
        if name in LEGACY_TYPES:
            continue  # listed in torch_npu.npu.__all__ but made by its C extension: no Python signature to read
        if callable(obj) and not name.startswith("_"):
            pairs.append((f"torch.npu.{name}", obj, lambda r, n=name: python_signature(r, "npu", n)))
    return pairs


@pytest.mark.parametrize("version", VERSIONS)
def test_the_standin_matches_the_wheels_signatures(version: str, npu: torch.device) -> None:
    root, newest = wheel_root(version), wheel_root(VERSIONS[-1])
    problems, compared = [], 0
    for name, obj, read in _pairs(npu):
        if name.startswith("torch.npu.") and not name.startswith("torch.npu.amp.") and name[10:] not in _npu_all(root):
            continue  # this version's torch_npu.npu does not offer it
        try:
            ours = _ours(obj)
        except (TypeError, ValueError):
            continue  # a builtin without a Python signature
        compared += 1
        problem = signature_problem(name, read(root), ours, read(newest))
        if problem:
            problems.append(problem)
    assert compared >= 20, compared
    assert not problems, f"the stand-in differs from torch-npu {version}:\n" + "\n".join(problems)


def test_a_wrong_default_or_name_is_caught() -> None:
    wheel = [("self", NO_DEFAULT), ("gamma", NO_DEFAULT), ("epsilon", 1e-6)]
    assert signature_problem("op", wheel, [("self", NO_DEFAULT), ("gamma", NO_DEFAULT), ("epsilon", 1e-5)], wheel)
    assert signature_problem("op", wheel, [("x", NO_DEFAULT), ("gamma", NO_DEFAULT), ("epsilon", 1e-6)], wheel)
    assert signature_problem("op", wheel, wheel[:2], wheel)
    # An extra trailing parameter passes only when the newest version has it.
    newer = [*wheel, ("rotate", None)]
    assert signature_problem("op", wheel, newer, newer) is None
    assert signature_problem("op", wheel, newer, wheel)
    assert signature_problem("op", None, wheel, wheel)
    assert signature_problem("op", [("dtype", Expr("torch.float16"))], [("dtype", torch.float16)], None) is None
