"""A fault of the emulator is never blamed on the program.

When an op fails inside the emulator for a reason that is neither a documented NPU restriction nor the program's
own error, the emulator says "emulator limitation, not your code", names the op, records the fault
(``npu_emulator.faults()``, and ``NPU_EMULATOR_FAULTS_FILE``), and carries on where it can (a CPU kernel missing
for float16/bfloat16: the op runs in float32 and is cast back). The program's own errors stay exactly what the
CPU says, and restrictions stay :class:`EmulatedNPUError`.
"""

from __future__ import annotations

import json
from pathlib import Path

import npu_emulator
import pytest
import torch
from npu_emulator import _errors

# Two operators for the test: one whose CPU kernel lacks float16/bfloat16 (as CPU torch 2.1 lacks float16 matmul,
# which an Ascend NPU has), one without a CPU kernel at all.
_LIB = torch.library.Library("npu_emulator_faults", "DEF")
_LIB.define("twice(Tensor x) -> Tensor")
_LIB.define("nowhere(Tensor x) -> Tensor")


def _twice(x: torch.Tensor) -> torch.Tensor:
    if x.dtype in (torch.float16, torch.bfloat16):
        name = "Half" if x.dtype == torch.float16 else "BFloat16"
        msg = f'"twice_cpu" not implemented for \'{name}\''
        raise RuntimeError(msg)
    return x * 2


_LIB.impl("twice", _twice, "CPU")
ops = torch.ops.npu_emulator_faults


@pytest.fixture
def no_faults(npu: torch.device) -> torch.device:
    npu_emulator.clear_faults()
    yield npu
    npu_emulator.clear_faults()


def test_a_missing_half_kernel_runs_in_float32_and_is_recorded(no_faults: torch.device) -> None:
    x = torch.tensor([1.5, -2.0], dtype=torch.float16, device=no_faults)
    with pytest.warns(npu_emulator.EmulatorLimitationWarning, match="emulator limitation, not your code"):
        out = ops.twice(x)
    assert out.device == no_faults
    assert out.dtype == torch.float16
    assert out.tolist() == [3.0, -4.0]
    (fault,) = npu_emulator.faults()
    assert fault["op"] == "npu_emulator_faults.twice.default"
    assert "not implemented for 'Half'" in str(fault["error"])
    assert "float32" in str(fault["action"])
    ops.twice(x)  # the same fault again: counted, not recorded twice
    assert [f["count"] for f in npu_emulator.faults()] == [2]


def test_a_missing_cpu_kernel_is_an_emulator_limitation_naming_the_op(no_faults: torch.device) -> None:
    with pytest.raises(npu_emulator.EmulatorLimitation) as raised:
        ops.nowhere(torch.ones(2, device=no_faults))
    error = raised.value
    assert str(error).startswith("emulator limitation, not your code: npu_emulator_faults.nowhere.default")
    assert error.op == "npu_emulator_faults.nowhere.default"
    assert not isinstance(error, npu_emulator.EmulatedNPUError)  # not a documented restriction
    assert npu_emulator.is_emulator_fault(error)
    assert [f["op"] for f in npu_emulator.faults()] == ["npu_emulator_faults.nowhere.default"]


def test_the_programs_own_errors_are_what_the_cpu_says(no_faults: torch.device) -> None:
    a = torch.ones(2, 3)
    with pytest.raises(RuntimeError) as on_cpu:
        a @ a
    with pytest.raises(RuntimeError) as on_npu:
        a.to(no_faults) @ a.to(no_faults)
    assert str(on_npu.value) == str(on_cpu.value)
    assert type(on_npu.value) is type(on_cpu.value)
    assert not npu_emulator.is_emulator_fault(on_npu.value)
    assert npu_emulator.faults() == []


def test_a_documented_restriction_is_not_an_emulator_fault(no_faults: torch.device) -> None:
    with pytest.raises(npu_emulator.EmulatedNPUError) as raised:
        torch.ones(2, 2, dtype=torch.float64, device=no_faults).mm(torch.ones(2, 2, dtype=torch.float64).to(no_faults))
    assert raised.value.group == "float64"
    assert not npu_emulator.is_emulator_fault(raised.value)
    assert npu_emulator.faults() == []


def test_torch_refusing_the_emulated_backend_is_an_emulator_fault() -> None:
    refused = NotImplementedError("... implement `getNewGenerator` at the same time for PrivateUse1.")
    assert npu_emulator.is_emulator_fault(refused)
    try:
        raise ValueError("bad config") from npu_emulator.EmulatorLimitation("aten.mm.default", "RuntimeError: x")
    except ValueError as error:
        assert npu_emulator.is_emulator_fault(error)  # raised from an emulator fault
    assert not npu_emulator.is_emulator_fault(ValueError("bad config"))
    assert not npu_emulator.is_emulator_fault(None)


def test_faults_are_appended_to_the_faults_file(
    no_faults: torch.device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "faults.jsonl"
    monkeypatch.setenv(_errors.FAULTS_FILE_ENV, str(path))
    with pytest.warns(npu_emulator.EmulatorLimitationWarning):
        ops.twice(torch.ones(1, dtype=torch.bfloat16, device=no_faults))
    with pytest.raises(npu_emulator.EmulatorLimitation):
        ops.nowhere(torch.ones(1, device=no_faults))
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [line["op"] for line in lines] == ["npu_emulator_faults.twice.default", "npu_emulator_faults.nowhere.default"]
    assert all(set(line) == {"op", "error", "action"} for line in lines)


def test_an_emulator_limitation_survives_pickling() -> None:
    import pickle

    error = npu_emulator.EmulatorLimitation("Tensor.__repr__", "TypeError: boom")
    copied = pickle.loads(pickle.dumps(error))
    assert (copied.op, copied.cause, str(copied)) == (error.op, error.cause, str(error))
