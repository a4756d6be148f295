"""A small transformer policy trains on the accelerator with the patcher and matches the CPU run."""

from __future__ import annotations

import json

TRAIN_SCRIPT = r"""
import json, sys
import torch
sys.path.insert(0, HERE)
import patch_policy
import runtime_patches as rp

device = DEVICE
if device == "npu":
    import torch_npu  # the stand-in: installs the emulated device
    from npu_emulator import EmulatedNPUError
else:
    EmulatedNPUError = ()

data = patch_policy.make_data()
model = patch_policy.make_policy()
out = {"cpu": patch_policy.train(model, data, "cpu")}
out["cpu"]["params"] = [p.tolist() for p in out["cpu"]["params"]]
failures = []
if device == "npu":
    try:
        patch_policy.train(model, data, device)
    except EmulatedNPUError as err:
        failures.append(str(err).splitlines()[0][:300])
out["unpatched_failure"] = failures
for name, options in (("patched", {}), ("fused", {"fused_adamw": True})):
    patcher = rp.build_vla_patcher(**options).apply()
    result = patch_policy.train(model, data, device)
    patcher.remove()
    result["params"] = [p.tolist() for p in result["params"]]
    result["report"] = {row.name: [row.state, row.fires] for row in patcher.report()}
    out[name] = result
print(json.dumps(out))
"""


def test_policy_trains_on_the_device_with_the_patcher_and_matches_cpu(run_fresh, accel):
    import torch

    here = str(__import__("pathlib").Path(__file__).parent)
    script = TRAIN_SCRIPT.replace("HERE", repr(here)).replace("DEVICE", repr(accel.type))
    out = json.loads(run_fresh(script, emulator=accel.type == "npu").stdout)
    if accel.type == "npu":
        assert out["unpatched_failure"], "the unpatched run should fail on the emulated device"
        assert "emulated npu" in out["unpatched_failure"][0]
    cpu = out["cpu"]
    assert len(cpu["losses"]) == 5 and cpu["losses"][-1] < cpu["losses"][0]
    for name in ("patched", "fused"):
        run = out[name]
        torch.testing.assert_close(torch.tensor(run["losses"]), torch.tensor(cpu["losses"]), rtol=1e-4, atol=1e-5)
        # Float64 vs float32 targets and different attention kernels differ in the last bits; AdamW divides by
        # the gradient's running RMS, so entries with near-zero gradients turn that into up to ~1/5 of one lr
        # step (lr=3e-3 here; torch 2.6's kernels reach ~0.3 of a step). Every parameter moves by up to 5 steps.
        for got, want in zip(run["params"], cpu["params"], strict=True):
            torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-3, atol=1e-3)
        fired = {patch for patch, (state, fires) in run["report"].items() if fires}
        assert {"Float64To32", "TensorIndexDevice", "TensorNumpySafe", "SdpaMaskBroadcast", "PowFloatSafe"} <= fired
        assert {"NanToNumSafe", "BuiltinMinMaxNPU"} <= fired
    assert out["patched"]["optimizer"] == "AdamW"
    if accel.type == "npu":
        assert out["fused"]["optimizer"] == "FusedAdamW" and out["fused"]["report"]["AdamWFused"] == ["removed", 1]
