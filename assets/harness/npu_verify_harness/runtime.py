"""`--runtime`: is this interpreter ready to train on the NPU?

Python version, torch and torch_npu imports (failures classified), version pairing, the CANN environment, a
matmul with backward on every visible device, bf16, and the runtime patches' self-tests. The device list from
ASCEND_RT_VISIBLE_DEVICES is checked on the Rust side against the device count reported here.
"""

import json
import os
import sys
import time

from .classify import classify_torch_npu_import
from .protocol import FAIL, PASS, SKIP, WARN


def base_version(version):
    """`2.6.0` of `2.6.0+cpu`, `2.6.0.post5`, `2.6.0rc1`."""
    head = version.split("+")[0]
    parts = []
    for piece in head.split(".")[:3]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(digits)
    return ".".join(parts)


RELEASES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_npu_releases.json")


def paired_torch_versions(path=RELEASES_FILE):
    """The torch base versions some torch_npu release pairs with (from torch_npu_releases.json), or None."""
    try:
        with open(path, encoding="utf-8") as handle:
            releases = json.load(handle)["releases"]
        return sorted({base_version(str(v)) for v in releases} - {""}, key=_version_key)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _version_key(version):
    return [int(part) for part in version.split(".")]


def check_pair(torch_version, npu_version, results):
    """runtime.versions: torch and torch_npu share a base version, and some torch_npu release pairs with it."""
    torch_base, npu_base = base_version(torch_version), base_version(str(npu_version))
    paired = paired_torch_versions()
    data = {"torch": torch_version, "torch_npu": str(npu_version), "torch_base": torch_base,
            "torch_npu_base": npu_base}
    if paired is not None:
        data["torch_has_torch_npu_release"] = torch_base in paired
    if not npu_base or npu_base != torch_base:
        results.check(
            "runtime.versions",
            FAIL,
            "torch_npu {} does not pair with torch {} (base versions {} and {})".format(
                npu_version, torch_version, npu_base or "?", torch_base),
            "install torch_npu {}.postN for this torch, or the torch {} that this torch_npu was built for "
            "(NPU-FACTS.md: torch_npu's X.Y.Z must equal torch's)".format(torch_base, npu_base or "?"),
            data=data,
        )
    elif paired is not None and torch_base not in paired:
        results.check(
            "runtime.versions",
            FAIL,
            "torch {} has no torch_npu release (torch_npu pairs with torch {}); torch {} with torch_npu {}".format(
                torch_base, ", ".join(paired), torch_version, npu_version),
            "install a torch that a torch_npu release pairs with (e.g. torch=={} with torch_npu=={}.postN), as on "
            "the NPU machine".format(paired[-1], paired[-1]),
            data=data,
        )
    else:
        results.check(
            "runtime.versions", PASS, "torch {} and torch_npu {} share base version {}".format(
                torch_version, npu_version, torch_base),
            data=data,
        )


def run(request, results, setup_torch):
    emulated = bool(request.get("emulate"))
    ok = sys.version_info >= (3, 10)
    results.check(
        "runtime.python",
        PASS if ok else FAIL,
        "Python {} at {}".format(".".join(map(str, sys.version_info[:3])), sys.executable),
        None if ok else "use Python >= 3.10: the conda env's interpreter (--conda-env NAME or --python PATH)",
        emulated=False,
    )
    torch = setup_torch(request, results)
    if torch is None:
        return 1
    results.check("runtime.torch", PASS, "torch {} imported".format(torch.__version__), emulated=False)

    t0 = time.perf_counter()
    try:
        import torch_npu
    except BaseException as exc:
        reason, detail, remedy = classify_torch_npu_import(exc)
        results.check("runtime.torch_npu", FAIL, detail, remedy, data={"reason": reason})
        return 1
    results.fact("timing", {"torch_npu_import_s": time.perf_counter() - t0})
    npu_version = getattr(torch_npu, "__version__", "unknown")
    results.check(
        "runtime.torch_npu",
        PASS,
        "torch_npu {} imported{}".format(npu_version, " (the emulator's stand-in)" if emulated else ""),
    )

    check_pair(torch.__version__, npu_version, results)

    check_cann_env(results, emulated)

    npu = getattr(torch, "npu", None)
    count = 0
    try:
        count = int(npu.device_count()) if npu is not None else 0
    except BaseException as exc:
        results.check("runtime.devices", FAIL, "torch.npu.device_count() failed: {}".format(exc),
                      "check `npu-smi info` and the driver installation")
        return 1
    results.fact("device_count", count)
    if count == 0:
        results.check(
            "runtime.devices",
            FAIL,
            "torch_npu sees no NPU",
            "check `npu-smi info`, the driver, and ASCEND_RT_VISIBLE_DEVICES",
        )
        return 1

    check_device_ops(torch, count, results)
    check_bf16(torch, results)
    check_patches(request, results)
    return 0


def check_cann_env(results, emulated):
    if emulated:
        results.check(
            "runtime.cann_env",
            SKIP,
            "not checked under --emulate-npu (the emulated device needs no CANN)",
        )
        return
    problems = []
    for name in ("ASCEND_HOME_PATH", "ASCEND_OPP_PATH"):
        value = os.environ.get(name)
        if not value:
            problems.append("{} is not set".format(name))
        elif not os.path.isdir(value):
            problems.append("{}={} is not a directory".format(name, value))
    if problems:
        results.check(
            "runtime.cann_env",
            FAIL,
            "; ".join(problems),
            "source CANN's set_env.sh (`source migrate_to_cloudrobo/env_npu.sh` does it; NPU-FACTS.md: "
            "/usr/local/Ascend/ascend-toolkit/set_env.sh or /usr/local/Ascend/cann/set_env.sh)",
            emulated=False,
        )
    else:
        results.check(
            "runtime.cann_env",
            PASS,
            "ASCEND_HOME_PATH={} ASCEND_OPP_PATH={}".format(
                os.environ["ASCEND_HOME_PATH"], os.environ["ASCEND_OPP_PATH"]),
            emulated=False,
        )


def check_device_ops(torch, count, results):
    failures, times = [], []
    for index in range(count):
        device = "npu:{}".format(index)
        t0 = time.perf_counter()
        try:
            a = torch.randn(64, 64, device=device, requires_grad=True)
            b = torch.randn(64, 64, device=device)
            loss = (a @ b).square().mean()
            loss.backward()
            ok = a.grad is not None and a.grad.device == a.device and bool(torch.isfinite(a.grad).all().cpu())
            if hasattr(torch.npu, "synchronize"):
                torch.npu.synchronize(index)
            if not ok:
                failures.append("{}: the gradient is missing, misplaced or not finite".format(device))
        except BaseException as exc:
            failures.append("{}: {}: {}".format(device, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else ""))
        times.append(round((time.perf_counter() - t0) * 1000, 2))
    if failures:
        results.check(
            "runtime.device_ops",
            FAIL,
            "matmul + backward failed on {} of {} devices: {}".format(len(failures), count, "; ".join(failures)),
            "check the device's health with `npu-smi info` and that CANN matches torch_npu",
            data={"ms": times},
        )
    else:
        results.check(
            "runtime.device_ops",
            PASS,
            "matmul + backward ran on {} device(s) ({} ms)".format(count, ", ".join(str(t) for t in times)),
            data={"ms": times},
        )


def check_bf16(torch, results):
    supported = None
    try:
        supported = bool(torch.npu.is_bf16_supported())
    except BaseException:
        pass
    try:
        x = torch.randn(16, 16, device="npu:0", dtype=torch.bfloat16)
        y = (x @ x).float()
        ran = bool(torch.isfinite(y).all().cpu())
        error = None
    except BaseException as exc:
        ran, error = False, "{}: {}".format(type(exc).__name__, exc)
    name = ""
    try:
        name = " on " + torch.npu.get_device_name(0)
    except BaseException:
        pass
    if ran and supported is not False:
        results.check("runtime.bf16", PASS, "bf16 matmul runs{}".format(name))
    else:
        results.check(
            "runtime.bf16",
            WARN,
            "bf16 is not usable{} (is_bf16_supported={}{})".format(name, supported, "; " + error if error else ""),
            "train in fp16 (autocast with a GradScaler) or fp32: NPU-FACTS.md: the 910A has no bf16, 910B/910_93 do",
        )


def check_patches(request, results):
    path = request.get("patches_file")
    if not path:
        results.check("runtime.patches", SKIP, "no runtime_patches.py to test")
        return
    from .patcher import PatcherWatch, jsonable

    watch = PatcherWatch()
    module = watch.load(path)
    if module is None:
        results.check(
            "runtime.patches",
            FAIL,
            "{} cannot be imported: {}".format(path, watch.error),
            "restore the shipped runtime_patches.py (`npu-assets init PROJECT --force`, or the cp line in SKILL.md)",
        )
        return
    self_test = getattr(module, "self_test", None)
    if self_test is None:
        results.check(
            "runtime.patches",
            WARN,
            "{} has no self_test(); this copy is older than the shipped one".format(path),
            "copy the shipped runtime_patches.py again",
        )
        return
    try:
        try:
            outcome = self_test(device="npu")
        except TypeError:
            outcome = self_test()
    except BaseException as exc:
        results.check(
            "runtime.patches",
            FAIL,
            "self_test() raised {}: {}".format(type(exc).__name__, exc),
            "compare migrate_to_cloudrobo/runtime_patches.py with the shipped one (npu-verify's static check says "
            "which patches differ)",
        )
        return
    for name, ok, detail in self_test_entries(outcome):
        results.check(
            "runtime.patch." + name,
            PASS if ok else FAIL,
            detail,
            None if ok else "this patch does not work in this environment; disable it with "
            "build_vla_patcher({}=False) and fix the code it covered, or report the failure".format(name),
            data=jsonable(outcome) if not ok else None,
        )


def self_test_entries(outcome):
    """[(name, ok, detail)] from what self_test() returned: a mapping, a list of records, or a report object."""
    entries = []
    if hasattr(outcome, "results"):
        outcome = outcome.results
    if isinstance(outcome, dict):
        items = outcome.items()
    elif isinstance(outcome, (list, tuple)):
        items = []
        for record in outcome:
            if isinstance(record, (tuple, list)) and len(record) >= 2 and isinstance(record[0], str):
                items.append((record[0], tuple(record[1:])))
            elif isinstance(record, dict):
                items.append((record.get("name") or record.get("patch"), record))
            else:
                items.append((getattr(record, "name", None) or getattr(record, "patch", None), record))
    else:
        return [("all", bool(outcome), "self_test() returned {!r}".format(outcome))]
    for name, value in items:
        if isinstance(value, bool):
            ok, detail = value, "ok" if value else "failed"
        elif isinstance(value, dict):
            status = value.get("ok", value.get("passed", value.get("status")))
            ok = status is True or status in ("ok", "pass", "passed", "skipped", "skip")
            detail = str(value.get("detail") or value.get("message") or value.get("reason") or status)
        elif isinstance(value, (tuple, list)) and value:
            ok, detail = bool(value[0]), " ".join(str(v) for v in value[1:]) or ("ok" if value[0] else "failed")
        else:
            status = getattr(value, "ok", getattr(value, "passed", getattr(value, "status", value)))
            ok = status is True or status in ("ok", "pass", "passed", "skipped", "skip")
            detail = str(getattr(value, "detail", None) or getattr(value, "message", None) or status)
        entries.append((str(name), ok, detail))
    return entries
