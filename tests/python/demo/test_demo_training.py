"""The demo projects run: the fixed one trains and evaluates on CPU torch, the original fails for the CUDA reason."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from demo_harness import FIXED, ORIGINAL, assert_trained, copy_tree, run_entry


@pytest.fixture(scope="module")
def fixed_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_tree(FIXED, tmp_path_factory.mktemp("demo") / "tiny-vla-fixed")


@pytest.fixture(scope="module")
def original_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_tree(ORIGINAL, tmp_path_factory.mktemp("demo") / "tiny-vla")


@pytest.fixture(scope="module")
def checkpoint(fixed_project: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ckpt")
    run = run_entry(
        fixed_project, "train.py", "--config", "configs/train.yaml", "--max-steps", "3", "--device", "cpu",
        "--log-every", "1", "--output-dir", str(out),
    )
    assert_trained(run, 3)
    assert "device cpu | world size 1" in run.stdout
    assert len(run.losses()) == 3
    return out / "policy.pt"


def test_fixed_trains_three_steps_on_cpu(checkpoint: Path) -> None:
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    assert state["step"] == 3
    assert all(t.dtype != torch.float64 for t in state["model"].values())


def test_fixed_loss_decreases_over_twenty_steps(fixed_project: Path, tmp_path: Path) -> None:
    run = run_entry(
        fixed_project, "train.py", "--config", "configs/debug.yaml", "--max-steps", "20", "--batch-size", "16",
        "--log-every", "1", "--output-dir", str(tmp_path),
    )
    assert_trained(run, 20)
    losses = run.losses()
    assert len(losses) == 20
    first, last = np.mean(losses[:5]), np.mean(losses[-5:])
    assert last < first, f"loss did not decrease: first five {losses[:5]}, last five {losses[-5:]}"


def test_fixed_hydra_entry_trains(fixed_project: Path, tmp_path: Path) -> None:
    run = run_entry(
        fixed_project, "train_hydra.py", "device=cpu", "train.max_steps=2", "train.log_every=1", "data.num_workers=0",
        f"output_dir={tmp_path / 'out'}", f"hydra.run.dir={tmp_path / 'hydra'}",
    )
    assert_trained(run, 2)
    assert "attn_implementation: npu_fusion_attention" in run.stdout  # the resolved config is printed first


def test_fixed_eval_reports_a_finite_mse(fixed_project: Path, checkpoint: Path, tmp_path: Path) -> None:
    predictions = tmp_path / "pred.npy"
    run = run_entry(
        fixed_project, "eval.py", "--config", "configs/train.yaml", "--checkpoint", str(checkpoint), "--device", "cpu",
        "--num-batches", "1", "--save-predictions", str(predictions),
    )
    assert run.returncode == 0, run.describe()
    line = next(line for line in run.stdout.splitlines() if line.startswith("eval:"))
    assert math.isfinite(float(line.rsplit(" ", 1)[1])), line
    actions = np.load(predictions)
    assert actions.shape == (32, 8, 4) and actions.dtype == np.float32


@pytest.mark.parametrize(
    ("script", "args"),
    [("train.py", ("--config", "configs/train.yaml", "--max-steps", "3")), ("train_hydra.py", ("train.max_steps=3",))],
)
def test_original_fails_for_the_cuda_reason(original_project: Path, tmp_path: Path, script: str, args: tuple) -> None:
    run = run_entry(original_project, script, *args, f"hydra.run.dir={tmp_path}" if script == "train_hydra.py" else "--log-every=1")
    assert run.returncode != 0, run.describe()
    assert "ModuleNotFoundError: No module named 'pytorch_lightning'" not in run.stderr
    if torch.cuda.is_available():
        # Past .cuda(), the unguarded flash_attn import is the next CUDA-only dependency.
        assert "flash_attn" in run.stderr, run.describe()
    else:
        assert "policy = policy.cuda()" in run.stderr, run.describe()
        assert "NVIDIA driver" in run.stderr or "CUDA" in run.stderr, run.describe()
