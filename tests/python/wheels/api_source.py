"""Signatures of torch_npu's public API as an extracted wheel states them, read with ``ast`` (nothing imported).

- ``op_schema(root, name)``: the schema line of ``torch_npu.<name>`` in ``_op_plugin_docs.py`` (the operator
  docs the wheel ships: ``torch_npu.npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> ...``);
- ``python_signature(root, module_dir, name)``: the parameters of a module-level ``def name`` (or of
  ``class name``'s ``__new__``, else its ``__init__``) found in the Python files of ``torch_npu/<module_dir>``.

Both return ``[(parameter, default)]`` in order, ``default`` as a Python value (``NO_DEFAULT`` when there is
none, an ``Expr`` when the source writes an expression), without ``self`` of a method.
"""

from __future__ import annotations

import ast
import functools
import warnings
from pathlib import Path
from typing import Any

NO_DEFAULT = object()


class Expr:
    """A default written as an expression (``torch.float16``, ``2.0 ** 16``), kept as its source text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


@functools.lru_cache(maxsize=None)
def _parse(path: Path) -> ast.Module:
    # The operator docs hold invalid escape sequences in plain strings: warnings about the wheel, not about us.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DeprecationWarning, SyntaxWarning))
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def _schema_default(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return {"true": True, "false": False}.get(text.lower(), text)


def op_schema(root: Path, name: str) -> list[tuple[str, Any]] | None:
    """The parameters of ``torch_npu.<name>`` in the wheel's operator docs, or None if it has no schema line."""
    path = root / "torch_npu" / "_op_plugin_docs.py"
    tree = _parse(path)
    prefix = f"torch_npu.{name}("
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and len(node.args) >= 2):
            continue
        first, doc = node.args[0], node.args[1]
        if not (isinstance(first, ast.Constant) and first.value == name and isinstance(doc, ast.Constant)):
            continue
        for line in str(doc.value).splitlines():
            line = line.strip()
            if line.startswith(prefix):
                inner = line[len(prefix) : line.rindex(")", 0, line.index("->") if "->" in line else len(line))]
                params = []
                for part in _split_top_level(inner):
                    declaration, _, default = part.partition("=")
                    param = declaration.split()[-1]
                    params.append((param, _schema_default(default.strip()) if default else NO_DEFAULT))
                return params
    return None


def _function_params(function: ast.FunctionDef, drop_self: bool) -> list[tuple[str, Any]]:
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    defaults: list[Any] = [NO_DEFAULT] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = []
    for arg, default in zip(positional, defaults, strict=True):
        params.append((arg.arg, NO_DEFAULT if default is NO_DEFAULT else _value(default)))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        params.append((arg.arg, NO_DEFAULT if default is None else _value(default)))
    if drop_self and params and params[0][0] in ("self", "cls"):
        params = params[1:]
    return params


def _value(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return Expr(ast.unparse(node))


def python_signature(root: Path, module_dir: str, name: str) -> list[tuple[str, Any]] | None:
    """The parameters of ``def name`` / ``class name.__init__`` at module level under ``torch_npu/<module_dir>``.

    ``__init__.py`` is searched first, then the other files in name order; None if none defines it.
    """
    base = root / "torch_npu" / module_dir
    files = sorted(base.glob("*.py"), key=lambda p: (p.name != "__init__.py", p.name))
    for path in files:
        tree = _parse(path)
        for stmt in tree.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
                return _function_params(stmt, drop_self=False)
            if isinstance(stmt, ast.ClassDef) and stmt.name == name:
                methods = {i.name: i for i in stmt.body if isinstance(i, ast.FunctionDef)}
                for constructor in ("__new__", "__init__"):
                    if constructor in methods:
                        return _function_params(methods[constructor], drop_self=True)
                return []
    return None
