"""``torch-npu/transfer_to_npu.json`` against each pinned wheel's ``contrib/transfer_to_npu.py``, read with ``ast``."""

from __future__ import annotations

import ast
import json
import copy
import textwrap
from pathlib import Path

import pytest
from wheels_cache import VERSIONS
from transfer_source import differences, read_facts


def test_the_table_has_one_entry_per_pinned_wheel(table: dict) -> None:
    assert sorted(table["versions"]) == sorted(VERSIONS)
    for version, entry in table["versions"].items():
        assert version.startswith(entry["torch"]), version


def test_the_table_agrees_with_the_wheels_source(wheel: tuple[str, Path], table: dict) -> None:
    version, root = wheel
    problems = differences(table["versions"][version], read_facts(root))
    assert not problems, f"torch-npu/transfer_to_npu.json disagrees with torch-npu {version}:\n" + "\n".join(problems)


# The test of the test: a deliberately wrong row of each kind is caught.
WRONG_ROWS = [
    ("a remap the source does not do", lambda e: e["assignments"].__setitem__("torch.Tensor.is_cpu", "x")),
    ("a remap left out", lambda e: e["assignments"].pop("torch.Tensor.is_cuda")),
    ("a changed remap", lambda e: e["assignments"].__setitem__("torch.Tensor.is_cuda", "torch.Tensor.is_cuda")),
    ("an extra wrapped function", lambda e: e["device_arguments"]["torch"].append("asarray")),
    ("a wrapped function left out", lambda e: e["device_arguments"]["torch"].remove("zeros")),
    ("a torch.cuda name torch_npu.npu lacks", lambda e: e["npu_all"]["torch_npu.npu"].append("nvtx")),
    ("a keyword it does not rewrite", lambda e: e["device_keywords"].append("device_map")),
    ("a deletion it does not do", lambda e: e["deletions"].append("torch.cuda.nvtx")),
]


@pytest.mark.parametrize("what,edit", WRONG_ROWS, ids=[w for w, _ in WRONG_ROWS])
def test_a_wrong_row_is_caught(wheel: tuple[str, Path], table: dict, what: str, edit) -> None:
    version, root = wheel
    entry = copy.deepcopy(table["versions"][version])
    edit(entry)
    assert differences(entry, read_facts(root)), f"{what} in the {version} row went unnoticed"


def test_facts_are_read_through_helpers_setattr_and_conditions(tmp_path: Path) -> None:
    """The reader on a small module shaped like transfer_to_npu.py, with every form the wheels use."""
    pkg = tmp_path / "torch_npu"
    (pkg / "contrib").mkdir(parents=True)
    (pkg / "npu" / "amp").mkdir(parents=True)
    (pkg / "npu" / "__init__.py").write_text('__all__ = ["is_available", "device_count"]\n')
    (pkg / "npu" / "amp" / "__init__.py").write_text('__all__ = ["GradScaler"]\n')
    (pkg / "npu" / "random.py").write_text('__all__ = ["manual_seed"]\n')
    (pkg / "contrib" / "apis_config.json").write_text('{"lib": {"version": "1.0", "apis": {"lib.f": "function"}}}')
    (pkg / "contrib" / "transfer_to_npu.py").write_text(
        textwrap.dedent(
            """
            torch_fn_white_list = ['zeros', 'ones']
            device_kwargs_list = ['device']
            def _wrapper_cuda(fn):
                def decorated(*args, **kwargs):
                    replace_int = fn.__name__ in ['to']
                    torch.not_a_remap = 1
                return decorated
            def _patch_cuda():
                patches = [['cuda', torch_npu.npu], ['cuda.amp', torch_npu.npu.amp]]
                _apply_patches(patches)
            def _del_map():
                del torch.distributed.Backend.default_device_backend_map['cuda']
            def _init():
                _patch_cuda()
                _device_wrapper(torch, torch_fn_white_list)
                _device_wrapper(torch.Tensor, ['to'])
                torch.Tensor.is_cuda = torch.Tensor.is_npu
                if hasattr(torch.distributed, 'init_device_mesh'):
                    _del_map()
                setattr(torch.utils._triton, 'has_triton', _patch_has_triton)
                _do_wrapper_libraries_func(_load_json_file(config_path))
            _init()
            """
        )
    )
    facts = read_facts(tmp_path)
    assert facts == {
        "cuda_check_kept": {"lib.f": "lib>=1.0"},
        "device_arguments": {"torch": ["ones", "zeros"], "torch.Tensor": ["to"]},
        "device_keywords": ["device"],
        "int_device_functions": ["to"],
        "module_patches": {"torch.cuda": "torch_npu.npu", "torch.cuda.amp": "torch_npu.npu.amp"},
        "assignments": {
            "torch.Tensor.is_cuda": "torch.Tensor.is_npu",
            "torch.utils._triton.has_triton": "_patch_has_triton",
        },
        "deletions": ["torch.distributed.Backend.default_device_backend_map['cuda']"],
        "npu_all": {
            "torch_npu.npu": ["device_count", "is_available"],
            "torch_npu.npu.amp": ["GradScaler"],
            "torch_npu.npu.random": ["manual_seed"],
        },
    }


def test_the_standin_fallback_replays_what_each_wheel_does(table: dict) -> None:
    """When no wheel is cached the stand-in's transfer_to_npu replays the effects of this table (its generated
    copy in the emulator, `cargo xtask codegen`)."""
    path = Path(__file__).resolve().parents[3] / "assets/emulator/torch_npu/contrib/transfer_table.json"
    replayed = json.loads(path.read_text(encoding="utf-8"))["versions"]
    assert sorted(replayed) == sorted(table["versions"])
    for version, entry in table["versions"].items():
        for field, value in replayed[version].items():
            assert entry[field] == value, (version, field)
        assert {"device_arguments", "module_patches", "assignments", "deletions"} <= set(replayed[version])
