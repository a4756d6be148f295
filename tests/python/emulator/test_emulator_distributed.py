"""Several emulated devices and the emulated ``hccl`` backend, each run in fresh processes (the device count is
read once per process, and torchrun starts one process per rank)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch.utils.backend_registration

EMULATOR = Path(__file__).resolve().parents[3] / "assets" / "emulator"

PRELUDE = f"""
import os, sys
sys.path.insert(0, {str(EMULATOR)!r})
import torch, npu_emulator
npu_emulator.install()
import torch.distributed as dist
"""


# torch >= 2.10 registers the device from Python; older torch through the emulator's C++ extension.
PYTHON_BACKEND = hasattr(torch.utils.backend_registration, "_setup_privateuseone_for_python_backend")
needs_fsdp2_on_npu = pytest.mark.skipif(
    not PYTHON_BACKEND,
    reason="torch < 2.10's FSDP2 registers its copy-in kernel (all_gather_copy_in) for CUDA and CPU only, not npu",
)


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"CUDA_VISIBLE_DEVICES": "", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "GLOO_SOCKET_IFNAME": "lo"})
    env.update(extra)
    return env


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=_env(**env),
    )


def _torchrun(tmp_path: Path, code: str, nproc: int = 2, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "rank.py"
    script.write_text(PRELUDE + textwrap.dedent(code))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1"]
    command += ["--nproc_per_node", str(nproc), str(script)]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=_env(NPU_EMULATOR_DEVICE_COUNT=str(nproc), **env),
        cwd=tmp_path,
    )


def test_devices_are_counted_and_selected() -> None:
    done = _python(
        """
        assert torch.npu.device_count() == 3
        assert torch.npu.current_device() == 0
        assert torch.zeros(1, device="npu").device == torch.device("npu:0")
        torch.npu.set_device(2)
        x = torch.ones(2, device="npu")
        assert x.device == torch.device("npu:2"), x.device
        with torch.npu.device(1):
            assert torch.zeros(1, device="npu").device.index == 1
        assert torch.npu.current_device() == 2
        model = torch.nn.Linear(2, 1).to("npu:1")
        model(torch.ones(4, 2).to("npu:1")).sum().backward()
        assert model.weight.grad.device == torch.device("npu:1")
        assert x.to("npu:0").device.index == 0 and x.cpu().device.type == "cpu"
        assert "npu:2" in repr(x)
        try:
            torch.zeros(1, device="npu:3")
        except npu_emulator.EmulatedNPUError as error:
            assert "npu:0 to npu:2" in str(error), error
        else:
            raise AssertionError("npu:3 does not exist")
        print("ok")
        """,
        NPU_EMULATOR_DEVICE_COUNT="3",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_two_devices_in_one_op_fail_like_torch() -> None:
    done = _python(
        """
        a = torch.ones(2, device="npu:0")
        b = torch.ones(2, device="npu:1")
        try:
            a + b
        except npu_emulator.EmulatedNPUError as error:
            assert error.group == "device_mismatch"
            print(str(error).split(" [")[0])
        a.copy_(b)  # copies between devices are allowed
        """,
        NPU_EMULATOR_DEVICE_COUNT="2",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "Expected all tensors to be on the same device, but found at least two devices, npu:0 and npu:1!"
    )


def test_nccl_is_not_built_in_without_transfer_to_npu() -> None:
    done = _python(
        """
        import tempfile
        assert not dist.is_nccl_available() and dist.is_hccl_available()
        try:
            dist.init_process_group("nccl", rank=0, world_size=1, init_method="file://" + tempfile.mktemp())
        except RuntimeError as error:
            print(error)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Distributed package doesn't have NCCL built in"


def test_ddp_on_two_ranks_all_reduces_gradients(tmp_path: Path) -> None:
    done = _torchrun(
        tmp_path,
        """
        rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("hccl")
        torch.npu.set_device(rank)
        torch.manual_seed(rank)  # different initial weights: DDP's broadcast makes them equal
        model = torch.nn.Linear(4, 2).to("npu")
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        for _ in range(2):
            ddp(torch.randn(8, 4, device="npu")).pow(2).mean().backward()  # different data per rank
            opt.step()
            opt.zero_grad()
        gathered = [torch.zeros(2, 4, device="npu") for _ in range(2)]
        dist.all_gather(gathered, model.weight.detach())
        total = torch.tensor([float(rank + 1)], device="npu")
        dist.all_reduce(total)
        dist.barrier()
        with open(f"rank{rank}.txt", "w") as out:  # the ranks share stdout: their lines may interleave
            out.write(f"rank {rank} {dist.get_backend()} {model.weight.device} "
                      f"{torch.equal(gathered[0].cpu(), gathered[1].cpu())} {total.item()}")
        dist.destroy_process_group()
        """,
    )
    assert done.returncode == 0, done.stderr
    lines = [(tmp_path / f"rank{rank}.txt").read_text() for rank in (0, 1)]
    assert lines == ["rank 0 hccl npu:0 True 3.0", "rank 1 hccl npu:1 True 3.0"], done.stdout


def test_a_rank_that_skips_a_collective_times_out(tmp_path: Path) -> None:
    started = time.monotonic()
    done = _torchrun(
        tmp_path,
        """
        import datetime, time
        rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("hccl", timeout=datetime.timedelta(minutes=30))
        torch.npu.set_device(rank)
        if rank == 0:
            dist.all_reduce(torch.ones(1, device="npu"))
        else:
            time.sleep(60)  # never joins the all_reduce
        """,
        timeout=90,
        NPU_EMULATOR_COLLECTIVE_TIMEOUT="3",
    )
    assert done.returncode != 0
    assert time.monotonic() - started < 45
    assert "Timed out" in done.stderr or "timed out" in done.stderr.lower(), done.stderr[-3000:]


@needs_fsdp2_on_npu
def test_fsdp2_shards_over_a_device_mesh_of_two_ranks(tmp_path: Path) -> None:
    done = _torchrun(
        tmp_path,
        """
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("hccl")
        torch.npu.set_device(rank)
        mesh = init_device_mesh("npu", (2,))
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("npu")
        fully_shard(model, mesh=mesh)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            model(torch.randn(8, 4, device="npu")).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        full = model[0].weight.full_tensor()
        with open(f"rank{rank}.txt", "w") as out:
            out.write(f"rank {rank} {mesh.device_type} {model[0].weight.to_local().device} {tuple(full.shape)}")
        """,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [(tmp_path / f"rank{rank}.txt").read_text() for rank in (0, 1)]
    assert lines == ["rank 0 npu npu:0 (8, 4)", "rank 1 npu npu:1 (8, 4)"], done.stdout


DDP_OPTIONS = """
rank = int(os.environ["LOCAL_RANK"])
device = os.environ["DDP_DEVICE"]
dist.init_process_group("hccl" if device == "npu" else "gloo")
if device == "npu":
    torch.npu.set_device(rank)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2)).to(device)
ddp = torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True, broadcast_buffers=False)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
generator = torch.Generator().manual_seed(rank)
for _ in range(3):
    ddp(torch.randn(8, 4, generator=generator).to(device)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
state = {k: v.cpu().tolist() for k, v in model.state_dict().items()}
with open(f"{device}{rank}.json", "w") as out:
    import json
    json.dump(state, out)
dist.destroy_process_group()
"""


def test_ddp_options_train_on_two_emulated_ranks_as_on_two_cpu_ranks(tmp_path: Path) -> None:
    import json

    for device in ("cpu", "npu"):
        done = _torchrun(tmp_path, DDP_OPTIONS, DDP_DEVICE=device)
        assert done.returncode == 0, done.stderr
    for rank in (0, 1):
        cpu = json.loads((tmp_path / f"cpu{rank}.json").read_text())
        npu = json.loads((tmp_path / f"npu{rank}.json").read_text())
        assert cpu.keys() == npu.keys()
        for key in cpu:
            assert torch.allclose(torch.tensor(cpu[key]), torch.tensor(npu[key]), atol=1e-6), key


# A module with a layer that no step uses: DDP must be told (find_unused_parameters=True), or be given a static
# graph, and both make its reducer copy its map of used parameters through pinned host memory.
UNUSED_LAYER = """
import json
rank = int(os.environ["LOCAL_RANK"])
device, option = os.environ["DDP_DEVICE"], os.environ["DDP_OPTION"]
dist.init_process_group("hccl" if device == "npu" else "gloo")
if device == "npu":
    torch.npu.set_device(rank)
torch.manual_seed(0)


class WithUnusedLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.second = torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)
        self.unused = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


model = WithUnusedLayer().to(device)
ddp = torch.nn.parallel.DistributedDataParallel(model, **{option: True})
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
generator = torch.Generator().manual_seed(rank)
losses = []
for _ in range(3):
    loss = ddp(torch.randn(8, 4, generator=generator).to(device)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    losses.append(loss.item())
state = {k: v.cpu().tolist() for k, v in model.state_dict().items()}
with open(f"{device}{rank}.json", "w") as out:
    json.dump({"losses": losses, "state": state}, out)
dist.destroy_process_group()
"""


@pytest.mark.parametrize("option", ["find_unused_parameters", "static_graph"])
def test_ddp_with_an_unused_layer_trains_on_two_emulated_ranks_as_on_two_cpu_ranks(tmp_path: Path, option: str) -> None:
    import json

    for device in ("cpu", "npu"):
        done = _torchrun(tmp_path, UNUSED_LAYER, DDP_DEVICE=device, DDP_OPTION=option)
        assert done.returncode == 0, done.stderr[-4000:]
    for rank in (0, 1):
        cpu = json.loads((tmp_path / f"cpu{rank}.json").read_text())
        npu = json.loads((tmp_path / f"npu{rank}.json").read_text())
        assert npu["losses"] == cpu["losses"], (rank, npu["losses"], cpu["losses"])
        assert npu["state"] == cpu["state"], rank
    # DDP reduced the gradients: both ranks hold the same weights after steps on different data.
    first, second = (json.loads((tmp_path / f"npu{rank}.json").read_text()) for rank in (0, 1))
    assert first["state"] == second["state"] and first["losses"] != second["losses"]


@pytest.mark.skipif(not PYTHON_BACKEND, reason="torch < 2.10 needs the C++ extension for the device itself")
def test_without_a_compiler_ddp_that_needs_pinned_host_memory_is_an_emulator_limitation_naming_the_option(
    tmp_path: Path,
) -> None:
    done = _python(
        """
        from npu_emulator._errors import EmulatorLimitation
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29531", RANK="0", WORLD_SIZE="1")
        dist.init_process_group("hccl")
        model = torch.nn.Linear(4, 2).to("npu")
        for option in ("find_unused_parameters", "static_graph"):
            try:
                torch.nn.parallel.DistributedDataParallel(model, **{option: True})
            except EmulatorLimitation as error:
                assert f"DistributedDataParallel({option}=True)" in str(error), error
                assert "pinned" in str(error) and f"{option}=False" in str(error), error
                assert "no-such-compiler" in str(error) and "install a C++ compiler" in str(error), error
            else:
                raise AssertionError(f"{option}=True was accepted")
        cpu = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2), find_unused_parameters=True)
        print("ok", type(cpu).__name__)
        dist.destroy_process_group()
        """,
        CXX="no-such-compiler",
        NPU_PATCHER_EMULATOR_BUILD_DIR=str(tmp_path / "empty"),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok", "DistributedDataParallel"]
