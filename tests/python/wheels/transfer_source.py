"""What a torch-npu wheel's Python layer says about ``transfer_to_npu``, read with Python's ``ast``.

``read_facts(root)`` takes an extracted wheel (``<root>/torch_npu/...``, see ``cargo xtask torch-npu``) and returns
the facts that ``torch-npu/transfer_to_npu.json`` records for that version, in the same shape:

- ``device_arguments``: for each object that ``_device_wrapper(obj, names)`` wraps, the names whose device
  arguments become npu (``cuda`` strings and devices; ``int`` too for ``to``/``to_empty``);
- ``device_keywords``: the keyword arguments those wrappers rewrite (``device_kwargs_list``);
- ``int_device_functions``: the wrapped names whose positional ``int`` argument also becomes ``npu:<int>``;
- ``module_patches``: what ``_patch_cuda`` installs, ``torch.<dest>`` -> the torch_npu module or object whose
  ``__all__`` names are copied onto it (see ``torch_npu/_init/patches/monkey_patches.py``);
- ``assignments``: every ``torch.* = value`` (and ``setattr(torch..., name, value)``) that module-level
  ``_init()`` runs, directly or through a module-level helper it calls, the value as ``ast.unparse`` writes it;
- ``deletions``: every ``del torch...`` it runs;
- ``npu_all``: ``__all__`` of ``torch_npu.npu``, ``torch_npu.npu.amp`` and ``torch_npu.npu.random``: the names
  copied onto ``torch.cuda``, ``torch.cuda.amp`` and ``torch.cuda.random``;
- ``cuda_check_kept``: the library functions during which ``torch.cuda.is_available`` is put back to torch's own
  (CUDA) check (``contrib/apis_config.json``, applied by ``_do_wrapper_libraries_func``), with the library
  version they apply from.

Nothing is imported or executed: the wheel's ``_C`` needs CANN, and a parse cannot be fooled by run-time state.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

TRANSFER = "torch_npu/contrib/transfer_to_npu.py"
NPU_ALL = {
    "torch_npu.npu": "torch_npu/npu/__init__.py",
    "torch_npu.npu.amp": "torch_npu/npu/amp/__init__.py",
    "torch_npu.npu.random": "torch_npu/npu/random.py",
}


def _literal_lists(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level ``NAME = [str, ...]`` assignments."""
    lists: dict[str, list[str]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            try:
                value = ast.literal_eval(stmt.value)
            except ValueError:
                continue
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                lists[stmt.targets[0].id] = value
    return lists


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """Every statement of ``body``, into ``if``/``try``/``with``/``for`` blocks but not into nested functions."""
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        out.append(stmt)
        for field in ("body", "orelse", "finalbody"):
            out.extend(_statements(getattr(stmt, field, []) or []))
        for handler in getattr(stmt, "handlers", []) or []:
            out.extend(_statements(handler.body))
    return out


def _called_helpers(stmts: list[ast.stmt], functions: dict[str, ast.FunctionDef]) -> list[ast.FunctionDef]:
    """The module-level functions that ``stmts`` call as statements (``_patch_cuda()``)."""
    helpers = []
    for stmt in stmts:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Name):
            name = stmt.value.func.id
            if name in functions and name != "_device_wrapper":
                helpers.append(functions[name])
    return helpers


def _init_statements(tree: ast.Module) -> list[ast.stmt]:
    """The statements ``_init()`` runs, with those of the helpers it calls (and theirs), in order."""
    functions = _functions(tree)
    if "_init" not in functions:
        raise ValueError(f"{TRANSFER} has no module-level _init()")
    seen: set[str] = set()
    out: list[ast.stmt] = []

    def visit(function: ast.FunctionDef) -> None:
        if function.name in seen:
            return
        seen.add(function.name)
        stmts = _statements(function.body)
        out.extend(stmts)
        for helper in _called_helpers(stmts, functions):
            visit(helper)

    visit(functions["_init"])
    return out


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _str_list(node: ast.expr, lists: dict[str, list[str]]) -> list[str] | None:
    if isinstance(node, ast.Name) and node.id in lists:
        return lists[node.id]
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def read_facts(root: Path) -> dict[str, Any]:
    """The facts of the extracted wheel at ``root`` (see the module doc)."""
    path = root / TRANSFER
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    lists = _literal_lists(tree)
    stmts = _init_statements(tree)

    device_arguments: dict[str, list[str]] = {}
    assignments: dict[str, str] = {}
    deletions: list[str] = []
    module_patches: dict[str, str] = {}
    uses_config = False
    for stmt in stmts:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            call = stmt.value
            func = _dotted(call.func)
            if func == "_device_wrapper" and len(call.args) == 2:
                target = _dotted(call.args[0])
                names = _str_list(call.args[1], lists)
                if target is None or names is None:
                    raise ValueError(f"{path}:{stmt.lineno}: cannot read `{ast.unparse(call)}`")
                device_arguments.setdefault(target, []).extend(names)
            elif func == "_do_wrapper_libraries_func":
                uses_config = True
            elif func == "setattr" and len(call.args) == 3 and isinstance(call.args[1], ast.Constant):
                owner = _dotted(call.args[0])
                if owner is not None and owner.startswith("torch"):
                    assignments[f"{owner}.{call.args[1].value}"] = ast.unparse(call.args[2])
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                name = _dotted(target)
                if name is not None and name.startswith("torch"):
                    assignments[name] = ast.unparse(stmt.value)
            # `patches = [['cuda', torch_npu.npu], ...]` in _patch_cuda.
            if (
                len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
                and stmt.targets[0].id in ("patches", "patchs")
                and isinstance(stmt.value, ast.List)
            ):
                for row in stmt.value.elts:
                    if isinstance(row, ast.List) and len(row.elts) == 2 and isinstance(row.elts[0], ast.Constant):
                        dest = f"torch.{row.elts[0].value}"
                        if dest.startswith("torch.cuda"):
                            module_patches[dest] = ast.unparse(row.elts[1])
        elif isinstance(stmt, ast.Delete):
            deletions.extend(ast.unparse(t) for t in stmt.targets if ast.unparse(t).startswith("torch"))

    # `replace_int = fn.__name__ in ['to', 'to_empty']` in _wrapper_cuda.
    int_device: list[str] = []
    wrapper = _functions(tree).get("_wrapper_cuda")
    if wrapper is not None:
        for node in ast.walk(wrapper):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "replace_int"
                and isinstance(node.value, ast.Compare)
            ):
                int_device = ast.literal_eval(node.value.comparators[0])

    npu_all = {}
    for module, rel in NPU_ALL.items():
        module_tree = ast.parse((root / rel).read_text(encoding="utf-8"))
        values = _literal_lists(module_tree).get("__all__")
        if values is None:
            raise ValueError(f"{root / rel}: no literal __all__")
        npu_all[module] = sorted(set(values))

    config = root / "torch_npu/contrib/apis_config.json"
    kept: dict[str, str] = {}
    if uses_config and config.is_file():
        for library, entry in json.loads(config.read_text(encoding="utf-8")).items():
            for api in entry.get("apis", {}):
                kept[api] = f"{library}>={entry.get('version')}"

    return {
        "cuda_check_kept": dict(sorted(kept.items())),
        "device_arguments": {k: sorted(set(v)) for k, v in sorted(device_arguments.items())},
        "device_keywords": sorted(lists.get("device_kwargs_list", [])),
        "int_device_functions": sorted(int_device),
        "module_patches": dict(sorted(module_patches.items())),
        "assignments": dict(sorted(assignments.items())),
        "deletions": sorted(deletions),
        "npu_all": npu_all,
    }


def differences(table: dict[str, Any], facts: dict[str, Any]) -> list[str]:
    """Every way a version's table entry disagrees with the facts read from its wheel, one line each."""
    problems = []
    for key in sorted(set(table) | set(facts)):
        if key in ("torch", "notes"):
            continue
        if key not in facts:
            problems.append(f"`{key}` is in the table but is not a fact read from the source")
            continue
        if key not in table:
            problems.append(f"`{key}` is missing from the table")
            continue
        want, got = table[key], facts[key]
        if isinstance(got, dict):
            for name in sorted(set(want) | set(got)):
                if name not in got:
                    problems.append(f"{key}: the table has `{name}`, the source does not")
                elif name not in want:
                    problems.append(f"{key}: the source has `{name}` = {got[name]!r}, the table does not")
                elif _normalized(want[name]) != _normalized(got[name]):
                    problems.append(f"{key}: `{name}` is {got[name]!r} in the source, {want[name]!r} in the table")
        elif _normalized(want) != _normalized(got):
            extra = sorted(set(want) - set(got))
            missing = sorted(set(got) - set(want))
            problems.append(f"{key}: only in the table {extra}, only in the source {missing}")
    return problems


def _normalized(value: Any) -> Any:
    return sorted(set(value)) if isinstance(value, list) else value
