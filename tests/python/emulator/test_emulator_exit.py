"""The emulated npu leaves no thread behind that could end a finished program with an abort at exit.

A worker thread of autograd's engine for the npu would run device backward ops in Python and take the GIL after a
backward pass has returned; if the interpreter is finalizing by then, CPython ends the thread inside torch's
``noexcept`` code and the process aborts ("terminate called without an active exception"). These tests check the
cause deterministically (no such thread exists, backward runs on its calling thread); `cargo xtask stress-exit`
counts aborts over many fresh interpreters.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EMULATOR = Path(__file__).resolve().parents[3] / "assets" / "emulator"

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc to list threads")


def _run(body: str) -> subprocess.CompletedProcess[str]:
    code = f"import sys\nsys.path.insert(0, {str(EMULATOR)!r})\n" + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, check=False)


THREADS = """
import os
def threads():
    return sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task"))
"""


def test_install_and_device_backward_start_no_autograd_worker_thread() -> None:
    done = _run(
        THREADS
        + textwrap.dedent(
            """
        import torch
        import npu_emulator
        before = threads()
        npu_emulator.install()
        model = torch.nn.Linear(4, 2).to("npu")
        model(torch.randn(3, 4, device="npu")).sum().backward()
        torch.autograd.grad((model.weight * 2).sum(), model.weight)
        after = threads()
        assert after == before, (before, after)
        print("ok")
        """
        )
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_backward_runs_on_any_calling_thread() -> None:
    done = _run(
        """
        import threading
        import torch
        import npu_emulator
        npu_emulator.install()
        seen = []
        def step():
            x = torch.ones(2, device="npu", requires_grad=True)
            (x * 3).sum().backward()
            seen.append((x.grad.device.type, x.grad.tolist()))
        worker = threading.Thread(target=step)
        worker.start()
        worker.join()
        step()
        assert seen == [("npu", [3.0, 3.0])] * 2, seen
        print("ok")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_output_atexit_and_exit_status_survive_a_device_step() -> None:
    done = _run(
        """
        import atexit
        import torch
        import npu_emulator
        npu_emulator.install()
        model = torch.nn.Linear(4, 2).to("npu")
        model(torch.randn(3, 4, device="npu")).sum().backward()
        atexit.register(lambda: print("atexit", flush=True))
        sys.stdout.write("buffered\\n")
        sys.exit(3)
        """
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout.split() == ["buffered", "atexit"]


def test_the_end_of_the_program_is_marked_for_npu_train(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "NPU_PATCHER_EXIT_MARKER": str(tmp_path)}
    code = textwrap.dedent(
        f"""
        import atexit, os, sys
        sys.path.insert(0, {str(EMULATOR)!r})
        atexit.register(os.abort)  # runs after the emulator's marker (atexit is last in, first out)
        import npu_emulator
        npu_emulator.install()
        print(os.getpid(), flush=True)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env, check=False)
    assert done.returncode == -6, done.stderr
    assert [p.name for p in tmp_path.iterdir()] == [done.stdout.strip()]
