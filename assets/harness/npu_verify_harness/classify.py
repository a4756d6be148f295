"""Turn an exception from the user's program (or from ``import torch_npu``) into a reason and a remedy.

The reasons are the NPU porting problems npu-scan's rules name (NPU-FACTS.md): CUDA still in use, CUDA-only
packages, device mismatches, float64 on the device, ``.numpy()`` on device tensors, broadcast SDPA masks, CPU
fallbacks; anything else is reported as the program's own error with the place it was raised.
"""

import os
import re
import traceback

CUDA_ONLY_PACKAGES = {
    "flash_attn": "P_FLA",
    "xformers": "P_FLA",
    "apex": "P_FLA",
    "amp_C": "P_FLA",
    "bitsandbytes": "P_FLA",
    "mamba_ssm": "P_FLA",
    "causal_conv1d": "P_FLA",
    "triton": "P_FLA",
    "deepspeed": "P_FLA",
    "pytorch_lightning": "P_LTM",
}

_CUDA_PATTERNS = (
    "Torch not compiled with CUDA enabled",
    "Found no NVIDIA driver",
    "No CUDA GPUs are available",
    "CUDA driver initialization failed",
    "CUDA error",
    "cudaGetDeviceCount",
    "doesn't have NCCL built in",
    "NCCL",
    "ProcessGroupNCCL",
    "CUDA_HOME",
)

# A distributed peer that never arrived (gloo underneath the emulated hccl; torch's own wording otherwise).
_PEER_PATTERNS = ("Timed out waiting", "Connection closed by peer", "Connection reset by peer")

NPU_SETUP = (
    "set up the NPU at the entry point (`import torch_npu`, `from torch_npu.contrib import transfer_to_npu`, "
    "`build_vla_patcher().apply()` from migrate_to_cloudrobo/runtime_patches.py) and fix what "
    "`npu-scan` reports as P_ENT, P_DEV and P_CFG (e.g. `device: cuda` or `backend: nccl` in the config)"
)


def in_project(path, project_root):
    """Whether ``path`` is the project's own code (under its root, not in migrate_to_cloudrobo/)."""
    path = os.path.abspath(path)
    return path.startswith(os.path.abspath(project_root) + os.sep) and (
        os.sep + "migrate_to_cloudrobo" + os.sep not in path)


def user_frame(tb, project_root):
    """The innermost traceback frame inside the project (not the harness, not migrate_to_cloudrobo/)."""
    found = None
    for frame, line in traceback.walk_tb(tb):
        if in_project(frame.f_code.co_filename, project_root):
            path = os.path.abspath(frame.f_code.co_filename)
            found = (os.path.relpath(path, project_root).replace(os.sep, "/"), line, frame.f_code.co_name)
    return found


def source_line(project_root, where):
    if where is None:
        return ""
    try:
        with open(os.path.join(project_root, where[0]), encoding="utf-8", errors="replace") as f:
            for number, text in enumerate(f, 1):
                if number == where[1]:
                    return text.strip()
    except OSError:
        pass
    return ""


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def worker_error(text, project_root):
    """(reason, detail, remedy) for an exception re-raised from a DataLoader worker, whose own traceback
    is only in the message text."""
    root = os.path.abspath(project_root) + os.sep
    where = None
    for path, line, func in _FRAME.findall(text):
        if os.path.abspath(path).startswith(root):
            where = (os.path.relpath(path, project_root).replace(os.sep, "/"), int(line), func)
    lines = [l for l in text.strip().splitlines() if l.strip()]
    final = lines[-1].strip() if lines else text.strip()
    place = ""
    if where is not None:
        place = " at {}:{} in {}".format(*where)
        code = source_line(project_root, where)
        if code:
            place += " (`{}`)".format(code)
    return (
        "worker-error",
        "a DataLoader worker raised{}: {}".format(place, final),
        "fix the dataset code at the place shown; `num_workers: 0` runs it in the main process for debugging",
    )


#: What every emulator fault says first (the emulator's ``LIMITATION_PHRASE``).
LIMITATION = "emulator limitation, not your code"


def emulator_fault(exc):
    """The emulator's own failure behind ``exc`` (itself or a cause), else None: an ``EmulatorLimitation``
    of the emulated device, which is neither a documented NPU restriction nor the user's error."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if any(c.__name__ == "EmulatorLimitation" for c in type(exc).__mro__) or LIMITATION in str(exc)[:200]:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def classify(exc, project_root):
    """(reason, detail, remedy) for an exception raised by the user's program."""
    if "in DataLoader worker process" in str(exc):
        return worker_error(str(exc), project_root)
    where = user_frame(exc.__traceback__, project_root)
    place = ""
    if where is not None:
        place = " at {}:{} in {}".format(*where)
        code = source_line(project_root, where)
        if code:
            place += " (`{}`)".format(code)
    fault = emulator_fault(exc)
    if fault is not None:
        op = getattr(fault, "op", None) or "an operation"
        cause = getattr(fault, "cause", None) or str(fault).strip().splitlines()[0]
        return (
            "emulator-limitation",
            "{}: {} failed inside the emulated npu device{}: {}".format(LIMITATION, op, place, cause),
            "nothing to change in your code for this: the emulator cannot run this call, so the pre-flight stops "
            "here; check this step on a real NPU, or report the op and the message to npu-patcher",
        )
    message = "{}: {}".format(type(exc).__name__, str(exc).strip().splitlines()[0] if str(exc).strip() else "")
    text = str(exc)
    emulated = type(exc).__name__ == "EmulatedNPUError"

    if isinstance(exc, ImportError) and getattr(exc, "name", None):
        top = exc.name.split(".")[0]
        if top in CUDA_ONLY_PACKAGES:
            rule = CUDA_ONLY_PACKAGES[top]
            return (
                "cuda-only-package",
                "the program imports `{}`, which has no NPU build{}: {}".format(top, place, message),
                "replace it as `{}` issues describe (fix template references/fix-templates/{}.md)".format(rule, rule),
            )
        if top == "torch_npu":
            return (
                "torch-npu-missing",
                "the program imports torch_npu, which this interpreter lacks{}: {}".format(place, message),
                "run verify with the conda env that has torch_npu (--conda-env NAME or --python PATH), "
                "or pass --emulate-npu to pre-flight on a machine without an NPU",
            )
        return (
            "missing-package",
            "a package the program imports is missing{}: {}".format(place, message),
            "install `{}` in this interpreter, or point verify at the right one (--python / --conda-env)".format(top),
        )
    if "Expected all tensors to be on the same device" in text or "device mismatch" in text.lower():
        return (
            "device-mismatch",
            "tensors on different devices meet{}: {}".format(place, message),
            "create the tensor on the device of the tensors it meets (`device=x.device`); "
            "npu-scan reports these as P_RND (references/fix-templates/P_RND.md)",
        )
    if "to numpy" in text and "npu" in text:
        return (
            "numpy-on-device",
            "`.numpy()` on a device tensor{}: {}".format(place, message),
            "call `.cpu()` first, or apply the runtime patcher (TensorNumpySafe)",
        )
    if "Double" in text or "float64" in text:
        return (
            "float64-on-device",
            "float64 compute on the device{}: {}".format(place, message),
            "use float32 (NPU-FACTS.md: float64 is partial on Ascend); npu-scan reports the float64 written in the "
            "code as P_F64, and the runtime patcher's Float64To32 converts most at run time",
        )
    if "561103" in text or "atten_mask" in text:
        return (
            "sdpa-mask-shape",
            "an attention mask shape the NPU kernel rejects{}: {}".format(place, message),
            "expand broadcast masks to (B,N,Sq,Skv) or (B,1,Sq,Skv), or apply the runtime patcher "
            "(SdpaMaskBroadcast)",
        )
    if isinstance(exc, RuntimeError) and any(p in text for p in _PEER_PATTERNS):
        return (
            "collective-timeout",
            "a collective waited for a rank that did not join it{}: {}".format(place, message),
            "every rank must run the same collectives in the same order: another rank skipped this step, waits "
            "elsewhere or died; pipeline.ranks shows each rank's last output",
        )
    # Last of the device reasons: emulated and NPU messages say "as on CUDA" in other contexts.
    if not emulated and (
        any(p in text for p in _CUDA_PATTERNS)
        or (isinstance(exc, (AssertionError, RuntimeError)) and re.search(r"\bcuda\b", text, re.IGNORECASE))
    ):
        return ("cuda-in-use", "the program still uses CUDA{}: {}".format(place, message), NPU_SETUP)
    if isinstance(exc, FileNotFoundError):
        return (
            "file-not-found",
            "a file the program opens is missing{}: {}".format(place, message),
            "check the config path (--config) and the paths the config names; verify runs the entry in the "
            "project root",
        )
    if emulated:
        return (
            "emulated-npu-error",
            "the emulated NPU rejected an operation{}: {}".format(place, message),
            "the message names the NPU rule it follows; change the code as it says",
        )
    return (
        "program-error",
        "the program raised{}: {}".format(place, message),
        "fix the error at the place shown (its traceback is in the report, under the check)",
    )


def classify_torch_npu_import(exc):
    """(reason, detail, remedy) for a failed ``import torch_npu``."""
    text = "{}: {}".format(type(exc).__name__, exc)
    if isinstance(exc, ImportError) and getattr(exc, "name", None) == "torch_npu":
        return (
            "not-installed",
            "torch_npu is not installed in this interpreter ({})".format(text),
            "install the torch_npu wheel whose base version equals torch's (NPU-FACTS.md: 2.6.0.post5 goes with "
            "torch 2.6.0), or run verify with the conda env that has it (--conda-env NAME / --python PATH); "
            "pass --emulate-npu to pre-flight without an NPU",
        )
    shared = re.search(r"(lib[\w.+-]+\.so[\w.]*)", text)
    if "undefined symbol" in text or re.search(r"version", text, re.IGNORECASE) and "torch" in text:
        return (
            "version-mismatch",
            "torch_npu does not match this torch build ({})".format(text),
            "install the torch_npu release built for this torch (same X.Y.Z) and its paired CANN release",
        )
    if shared or "cannot open shared object file" in text:
        if not os.environ.get("ASCEND_HOME_PATH") or not os.environ.get("ASCEND_OPP_PATH"):
            return (
                "cann-not-sourced",
                "the CANN environment is not loaded: {} ({})".format(
                    "ASCEND_HOME_PATH/ASCEND_OPP_PATH unset", text
                ),
                "source the CANN set_env.sh first: `source migrate_to_cloudrobo/env_npu.sh` (train.sh does it), "
                "or `source /usr/local/Ascend/ascend-toolkit/set_env.sh`",
            )
        name = shared.group(1) if shared else "a shared library"
        return (
            "missing-library",
            "{} cannot be loaded although CANN is sourced ({})".format(name, text),
            "check that the CANN toolkit under ASCEND_HOME_PATH={} is complete and matches torch_npu, "
            "and that LD_LIBRARY_PATH contains its lib64".format(os.environ.get("ASCEND_HOME_PATH")),
        )
    return (
        "import-error",
        "import torch_npu failed ({})".format(text),
        "read the error; a clean `python -c 'import torch_npu'` in the training env must work first",
    )
