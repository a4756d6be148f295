"""The emulator's core modules import in one direction, bottom-up, so that each can be read knowing only those below.

The layers (lowest first): the restriction switches and errors; the device count and current device; what lives on
a device without being a tensor (generator, streams, memory API, storage tags on save/load, the GradScaler class);
the restriction checks, beside the tensor; the ``torch.npu`` module; the device tensor itself. A module may import
from lower layers only, also inside functions (a deferred import is still a dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "assets" / "emulator" / "npu_emulator"

LAYERS = [
    {"_rules"},
    {"_errors"},
    {"_devices"},
    {"_generator", "_streams", "_memory", "_serialization", "_grad_scaler"},
    {"_checks"},
    {"_backend"},
    {"_tensor"},
]
LAYER_OF = {name: level for level, names in enumerate(LAYERS) for name in names}


def _imported(path: Path) -> set[str]:
    """The npu_emulator modules ``path`` imports, at any depth of its code."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "npu_emulator":
                found.update(alias.name for alias in node.names)
            elif node.module.startswith("npu_emulator."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("npu_emulator."))
    return found


def test_the_core_modules_import_only_from_lower_layers() -> None:
    upward = []
    for name, level in sorted(LAYER_OF.items()):
        for other in sorted(_imported(PACKAGE / f"{name}.py")):
            if other in LAYER_OF and LAYER_OF[other] >= level:
                upward.append(f"{name} (layer {level}) imports {other} (layer {LAYER_OF[other]})")
    assert upward == []


def test_the_layer_check_sees_deferred_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from npu_emulator._tensor import NPUTensor\n    import npu_emulator._backend\n")
    assert _imported(module) == {"_tensor", "_backend"}
