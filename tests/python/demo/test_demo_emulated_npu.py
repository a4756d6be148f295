"""The demo projects on the emulated npu device (assets/emulator), each run in its own interpreter.

The fixed project trains with its entry-point setup (stand-in torch_npu, transfer_to_npu, the runtime patcher from
migrate_to_cloudrobo/). The original project, given what the entry-point fix adds, still fails where a real NPU would: at a CPU index
tensor (transfer_to_npu alone) and, with the runtime patcher too, at the unguarded flash_attn import.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from demo_harness import FIXED, ORIGINAL, assert_trained, copy_tree, install_runtime_patches, run_entry


@pytest.fixture(scope="module")
def fixed_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = copy_tree(FIXED, tmp_path_factory.mktemp("demo-npu") / "tiny-vla-fixed")
    install_runtime_patches(project)
    return project


def test_fixed_trains_on_the_emulated_npu_with_the_runtime_patcher(fixed_project: Path, tmp_path: Path) -> None:
    run = run_entry(
        fixed_project, "train.py", "--config", "configs/train.yaml", "--max-steps", "3", "--log-every", "1",
        "--output-dir", str(tmp_path), mode="emulate",
    )
    assert_trained(run, 3)
    assert "device npu:0 | world size 1" in run.stdout, run.describe()  # device auto picked the (emulated) NPU
    assert "entry patcher: Patcher" in run.stdout, run.describe()
    # The fixed code no longer leans on runtime patching: no patch had anything to fix.
    assert "patch fires: 0" in run.stdout, run.describe()


def test_fixed_hydra_entry_trains_on_the_emulated_npu(fixed_project: Path, tmp_path: Path) -> None:
    run = run_entry(
        fixed_project, "train_hydra.py", "train.max_steps=2", "train.log_every=1", "data.num_workers=0",
        f"output_dir={tmp_path / 'out'}", f"hydra.run.dir={tmp_path / 'hydra'}", mode="emulate",
    )
    assert_trained(run, 2)
    assert "device npu:0" in run.stdout, run.describe()


def test_fused_attention_matches_sdpa_on_the_emulated_npu(fixed_project: Path) -> None:
    script = fixed_project / "check_attention.py"
    script.write_text(
        "import torch\n"
        "from tiny_vla.attention import npu_fusion_attention, sdpa_attention\n"
        "torch.manual_seed(0)\n"
        "q, k, v = (torch.randn(2, 7, 4, 16) for _ in range(3))\n"
        "for causal in (False, True):\n"
        "    ref = sdpa_attention(q, k, v, causal=causal)\n"
        "    out = npu_fusion_attention(q.to('npu'), k.to('npu'), v.to('npu'), causal=causal)\n"
        "    assert out.device.type == 'npu', out.device\n"
        "    print('max abs diff', causal, (out.cpu() - ref).abs().max().item())\n",
        encoding="utf-8",
    )
    run = run_entry(fixed_project, script.name, mode="emulate")
    assert run.returncode == 0, run.describe()
    diffs = [float(line.split()[-1]) for line in run.stdout.splitlines() if line.startswith("max abs diff")]
    assert len(diffs) == 2 and max(diffs) < 1e-5, run.describe()


def test_original_with_transfer_to_npu_only_fails_at_a_cpu_index(tmp_path: Path) -> None:
    """cuda -> npu remapping alone: the patch-dropout indices made on the CPU index an npu tensor (P_RND)."""
    project = copy_tree(ORIGINAL, tmp_path / "tiny-vla")
    run = run_entry(
        project, "train.py", "--config", "configs/train.yaml", "--max-steps", "2", "--output-dir", str(tmp_path / "out"),
        mode="emulate+transfer",
    )
    assert run.returncode != 0, run.describe()
    assert "Expected all tensors to be on the same device" in run.stderr, run.describe()
    assert "x = x[:, keep]" in run.stderr, run.describe()


def test_original_with_the_entry_setup_fails_at_flash_attn(tmp_path: Path) -> None:
    """torch_npu, transfer_to_npu and the runtime patcher cover the index and float64 issues, not flash_attn (P_FLA)."""
    project = copy_tree(ORIGINAL, tmp_path / "tiny-vla")
    install_runtime_patches(project)
    run = run_entry(
        project, "train.py", "--config", "configs/train.yaml", "--max-steps", "2", "--output-dir", str(tmp_path / "out"),
        mode="emulate+setup",
    )
    assert run.returncode != 0, run.describe()
    assert "No module named 'flash_attn'" in run.stderr, run.describe()
    assert "from flash_attn import flash_attn_func" in run.stderr, run.describe()
