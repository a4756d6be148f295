"""`--pipeline` and `--data`: run the project's own training entry under observation.

Pipeline: apply the runtime patcher (the program's own, or ours when the entry point does not apply one),
count optimizer steps and stop after N; report step times, the loss (the tensor ``backward()`` was called on),
where the parameters live, float64 tensors on the device, CPU fallbacks, and which patches fired where.

Data: the first DataLoader the program iterates is drained for N batches by the harness, then the program is
stopped; if the program fails before iterating one, the first DataLoader it built is drained instead.
"""

import json
import os
import sys
import time
import traceback
import weakref

from .classify import classify, in_project
from .launch import run as launch_run
from .observe import HarnessStop, Observer, describe_batch
from .patcher import PatcherWatch
from .protocol import FAIL, PASS, SKIP, WARN


def run(request, results, setup_torch):
    torch = setup_torch(request, results)
    if torch is None:
        return 1
    root = request["project_root"]
    mode = request["mode"]
    device_type = request.get("device_type", "npu")
    emulated = bool(request.get("emulate"))

    parity = request.get("parity")
    if parity and parity.get("threads"):
        torch.set_num_threads(int(parity["threads"]))
    if parity and parity.get("no_patches"):
        from .parity import install_no_patches

        install_no_patches()
    watch = PatcherWatch()
    if request.get("patches_file"):
        if watch.load(request["patches_file"]) is None:
            results.check(
                mode + ".patcher",
                FAIL,
                "{} cannot be imported: {}".format(request["patches_file"], watch.error),
                "restore the shipped runtime_patches.py (`npu-assets init PROJECT --force`)",
            )
    fires = None
    if mode == "parity" and watch.module is not None:
        from .parity import PatchFires

        fires = PatchFires(watch.module)  # before any patch installs: they bind the counting method then
    if request.get("apply_patcher") and watch.module is not None:
        try:
            watch.apply_ourselves()
        except BaseException as exc:
            results.check(mode + ".patcher", FAIL, "applying the runtime patcher failed: {}: {}".format(
                type(exc).__name__, exc), "compare runtime_patches.py with the shipped copy")

    observer = Observer(torch, root, device_type, steps=request.get("steps"))
    profile = None
    recorder = None
    if mode == "parity":
        from .parity import Recorder

        batches_in = torch.load(parity["batches_in"], weights_only=False) if parity.get("batches_in") else None
        recorder = Recorder(torch, observer, batches_in=batches_in,
                            batches_out=parity.get("batches_out"), max_batches=int(request.get("steps", 2)) + 2)
        recorder.watch = watch
        if fires is not None:
            fires.recorder = recorder
            recorder.fires = fires
        recorder.install()  # before the observer: its step hook stops the program after the last step
        observer.install()
    if mode == "pipeline":
        observer.install()
        if request.get("profile", True):
            profile = start_profile(torch, root, device_type, observer, emulated)
    loaders = DataWatch(torch, request.get("batches", 3), observer, request["project_root"]) if mode == "data" else None
    if loaders is not None:
        loaders.install()
    memory = None
    if mode == "pipeline" and emulated:
        from .memory import MemoryWatch

        memory = MemoryWatch(torch)
        if not memory.install():
            memory = None
    ranks = None
    if request.get("distributed") and mode == "pipeline":
        from .ranks import DistWatch

        ranks = DistWatch(torch, root, observer)
        ranks.install()

    asked = InputWatch(root)
    asked.install()
    results.fact("timing", {"program_start_s": time.perf_counter() - _started()})
    program_t0 = time.perf_counter()
    try:
        outcome = launch_run(request["launch"])
    finally:
        asked.uninstall()
    program_s = time.perf_counter() - program_t0
    outcome.asked = asked.asked
    if mode == "pipeline":
        from .executed import executed_files

        results.fact("executed", executed_files(root, request["launch"]))
    if profile is not None:
        profile.uninstall()
    observer.uninstall()
    if loaders is not None:
        loaders.uninstall()
    if ranks is not None:
        ranks.uninstall()
        results.fact("rank", ranks.fact())
    if outcome.exc is not None and outcome.kind == "raised":
        sys.stderr.write("npu-verify harness: the program raised:\n")
        traceback.print_exception(type(outcome.exc), outcome.exc, outcome.exc.__traceback__)
    results.fact("timing", {"program_s": program_s, "first_step_s": observer.step_times[0] if observer.step_times else None})

    if recorder is not None:
        recorder.uninstall()
    if memory is not None:
        memory.uninstall()
    if mode == "parity":
        from .parity import report as report_parity

        code = report_parity(request, results, observer, recorder, outcome, ending(outcome, root)
                             if outcome.kind != "stopped" else None)
    elif mode == "pipeline":
        code = report_pipeline(request, results, observer, watch, outcome, emulated, profile)
        from .memory import report as report_memory
        from .memory import report_shapes

        report_memory(results, memory, request)
        report_shapes(results)
    else:
        code = report_data(request, results, loaders, outcome)
    watch.remove_all()
    if fires is not None:
        fires.uninstall()
    return code


def _started():
    from .main import STARTED

    return STARTED


def project_site(root, frame):
    """``file:line in function`` of the innermost frame at or above ``frame`` that is the project's own code,
    else None."""
    while frame is not None:
        if in_project(frame.f_code.co_filename, root):
            path = os.path.abspath(frame.f_code.co_filename)
            return "{}:{} in {}".format(
                os.path.relpath(path, root).replace(os.sep, "/"), frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return None


class _WatchedStdin:
    """``sys.stdin`` while the program runs: every read is noted (verify gives the program no input, so each
    read gets end-of-file), then done on the real stream."""

    def __init__(self, stream, watch):
        self._stream = stream
        self._watch = watch

    def _noted(self, name):
        method = getattr(self._stream, name)

        def read(*args, **kwargs):
            self._watch.note("", "sys.stdin." + name + "()", sys._getframe(1))
            return method(*args, **kwargs)

        return read

    def __getattr__(self, name):
        if name in ("read", "readline", "readlines", "buffer"):
            if name == "buffer":
                return getattr(self._stream, name)
            return self._noted(name)
        return getattr(self._stream, name)

    def __iter__(self):
        self._watch.note("", "iterating sys.stdin", sys._getframe(1))
        return iter(self._stream)


class InputWatch:
    """The program's first read from its standard input. verify starts the program with stdin closed (it reads
    from /dev/null), so a prompt such as ``input("overwrite? (y/n)")`` gets end-of-file at once; what the
    program then does (raise EOFError, or catch it and exit) hides why it stopped unless the read is reported."""

    def __init__(self, root):
        self.root = root
        #: ``{"prompt", "call", "site"}`` of the first read, else None.
        self.asked = None
        self._undo = []

    def install(self):
        import builtins

        original_input, original_stdin = builtins.input, sys.stdin
        watch = self

        def input(prompt=""):  # noqa: A001 - stands in for the builtin
            watch.note(str(prompt), "input()", sys._getframe(1))
            return original_input(prompt)

        builtins.input = input
        self._undo.append(lambda: setattr(builtins, "input", original_input))
        if original_stdin is not None:
            sys.stdin = _WatchedStdin(original_stdin, self)
            self._undo.append(lambda: setattr(sys, "stdin", original_stdin))

    def uninstall(self):
        while self._undo:
            self._undo.pop()()

    def note(self, prompt, call, frame):
        if self.asked is None:
            self.asked = {"prompt": prompt.strip(), "call": call, "site": project_site(self.root, frame)}


def asked_text(asked):
    """The plain-words line for a read from stdin (``InputWatch.asked``)."""
    prompt = asked.get("prompt")
    what = "the program asked for input: {!r}".format(prompt) if prompt else "the program asked for input ({})".format(
        asked.get("call"))
    if asked.get("site"):
        what += " at " + asked["site"]
    return what + "; verify runs it with no input (stdin closed), so the read got end-of-file"


#: The remedy for a program that stopped at a prompt.
ASKED_REMEDY = (
    "make the run need no answer: pass the option that answers the prompt (an overwrite or resume flag in the "
    "config), or remove what it asks about (e.g. the output folder of an earlier run)"
)


def with_asked(outcome, status, detail, remedy, data):
    """``(detail, remedy, data)`` with the program's read from stdin put first, when it read one."""
    asked = getattr(outcome, "asked", None)
    if asked is None:
        return detail, remedy, data
    data = dict(data or {}, input=asked)
    return "{}; {}".format(asked_text(asked), detail), ASKED_REMEDY + ("; then: " + remedy if remedy else ""), data


#: How the program ended, in words, by ``Outcome.kind``.
ENDED_WORDS = {
    "returned": "the program returned normally",
    "exit": "the program exited",
    "raised": "the program raised an exception",
    "stopped": "the harness stopped the program",
}


def before_first(steps, want):
    return "before its first optimizer step" if steps == 0 else "after {} of {} optimizer steps".format(steps, want)


def ending(outcome, root):
    """(status, detail, remedy, reason) of how the program ended, when it did not end by our stop."""
    if outcome.kind == "raised":
        reason, detail, remedy = classify(outcome.exc, root)
        return FAIL, detail, remedy, reason
    if outcome.kind == "exit" and outcome.code in (0, None):
        return (
            FAIL,
            "the program exited with status 0 (success): it finished without training, or caught its own error "
            "and exited (its last output says which)",
            "run the same command by hand and read its output; a program that catches every exception hides the "
            "cause there",
            "exit",
        )
    if outcome.kind == "exit":
        return (
            FAIL,
            "the program exited with status {!r} before the harness stopped it".format(outcome.code),
            "run the same command by hand; an argument error means the config flag or path is wrong (--config, "
            "--entry, or `-- <launch command>`)",
            "exit",
        )
    return None


def emulated_group(exc):
    """The restriction group of the emulated-device error behind ``exc`` (itself or a cause), else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        group = getattr(exc, "group", None)
        if isinstance(group, str) and any(c.__name__ == "EmulatedNPUError" for c in type(exc).__mro__):
            return group
        exc = exc.__cause__ or exc.__context__
    return None


#: The most traceback lines a report keeps (the innermost: where the error arose and what it says).
TRACEBACK_LINES = 60


def traceback_text(exc):
    """The formatted traceback of ``exc`` (with its causes), its last :data:`TRACEBACK_LINES` lines."""
    lines = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).splitlines()
    if len(lines) > TRACEBACK_LINES:
        lines = ["... ({} earlier lines)".format(len(lines) - TRACEBACK_LINES)] + lines[-TRACEBACK_LINES:]
    return "\n".join(lines)


def failure_data(exc, reason, **data):
    """``data`` of a failed run check: the reason, the traceback when the program raised ``exc``, and the
    emulator's restriction group when that came from the emulated device."""
    data["reason"] = reason
    if exc is not None:
        data["traceback"] = traceback_text(exc)
    group = emulated_group(exc)
    if group is not None:
        data["group"] = group
    return data


def raised(outcome):
    """The exception the program raised, if that is how it ended."""
    return outcome.exc if outcome.kind == "raised" else None


def start_profile(torch, root, device_type, observer, emulated):
    """The step profile of this run (``profile.StepProfile``), installed; its fallback verdicts come from the
    emulator's kernel table when emulated, else from torch_npu's registrations in the dispatcher."""
    from .profile import StepProfile, real_verdict

    if emulated and "npu_emulator._kernels" in sys.modules:
        kernels = sys.modules["npu_emulator._kernels"]
        verdict = kernels.verdict
        info = dict(kernels.table_info(), source="the emulator's table of the torch-npu wheel")
    else:
        verdict = real_verdict(torch)
        version = getattr(sys.modules.get("torch_npu"), "__version__", None)
        info = {"torch_npu": version, "reason": "the installed torch_npu", "source": "torch_npu's dispatcher"}
    os.environ.setdefault("NPU_EMULATOR_PROJECT_ROOT", os.path.abspath(root))  # the emulator's fallback sites
    profile = StepProfile(torch, root, device_type, observer, verdict, info)
    observer.profile = profile
    profile.install()
    return profile


def report_pipeline(request, results, observer, watch, outcome, emulated, profile=None):
    root, want = request["project_root"], request["steps"]
    steps = observer.steps
    times = [round(t, 4) for t in observer.step_times]
    ended = ending(outcome, root) if outcome.kind != "stopped" else None
    data = {"steps": steps, "step_times_s": times, "outcome": outcome.kind}
    # npu-scan's facts: the entry (or a project file it imports) builds no optimizer it steps.
    no_optimizer = steps == 0 and request.get("entry_trains") is False
    no_optimizer_text = "the program ran no optimizer step: npu-scan found no optimizer that it builds and steps"
    if request.get("entry_named"):
        no_optimizer_remedy = (
            "the command you named does not train as run: give it the arguments or config that train "
            "(not an evaluation or inference mode)"
        )
    else:
        no_optimizer_remedy = (
            "point verify at the training entry (--entry FILE or `-- <launch command>`); this one does not train"
        )
    def run_check(status, detail, remedy, data):
        detail, remedy, data = with_asked(outcome, status, detail, remedy, data)
        results.check("pipeline.run", status, detail, remedy, data=data)

    if ended is not None:
        status, detail, remedy, reason = ended
        data = failure_data(raised(outcome), reason, **data)
        if reason == "emulator-limitation":
            # The emulator's own limit: not a failure of the user's code (and no verdict on it either).
            status = WARN
            detail = "after {} of {} optimizer steps, {}".format(steps, want, detail)
        elif no_optimizer:
            detail = "{} (in the entry or the project files it imports), and {}".format(no_optimizer_text, detail)
            remedy = "{}; {}".format(no_optimizer_remedy, remedy)
        else:
            detail = "{}, {}".format(before_first(steps, want), detail)
        run_check(status, detail, remedy, data)
    elif no_optimizer:
        run_check(
            FAIL,
            "{} in the entry or the project files it imports".format(no_optimizer_text),
            no_optimizer_remedy,
            dict(data, reason="no-optimizer"),
        )
    elif steps < want:
        run_check(
            FAIL,
            "the program returned normally {} (the harness stops it after {})".format(before_first(steps, want), want)
            if outcome.kind == "returned" else
            "the program ended {}".format(before_first(steps, want)),
            ("give the command a config that trains at least {} steps".format(want) if request.get("entry_named")
             else "point verify at the training entry (--entry FILE or `-- <launch command>`) and a config that "
             "trains at least {} steps".format(want)),
            dict(data, reason="too-few-steps"),
        )
    else:
        detail = "{} optimizer steps ran and the harness stopped the program; step times {} s".format(
            steps, ", ".join("{:.3f}".format(t) for t in times))
        results.check("pipeline.run", PASS, detail, data=data)

    if steps == 0:
        for name in ("pipeline.loss", "pipeline.params_device", "pipeline.float64", "pipeline.cpu_fallback"):
            results.check(name, SKIP, "no optimizer step was reached")
    else:
        report_loss(results, observer)
        report_params(results, observer, request, emulated)
        report_float64(results, observer, "pipeline")
        if profile is None:
            report_fallbacks(results, observer, "pipeline")
    if profile is not None:
        from .profile import report as report_profile

        report_profile(results, profile, observer, want)
    report_patches(results, watch, steps)
    report_faults(results, "pipeline")
    report_transfer(results, emulated)
    return 0


def emulator_faults():
    """The emulator's own faults in this run, with those of its worker processes (``NPU_EMULATOR_FAULTS_FILE``):
    ``[{"op", "error", "action", "count"}]``; empty when the run is not emulated."""
    emulator = sys.modules.get("npu_emulator")
    if emulator is None or not hasattr(emulator, "faults"):
        return []
    found = {}
    for entry in emulator.faults():
        found[(entry.get("op"), entry.get("error"))] = dict(entry)
    path = os.environ.get("NPU_EMULATOR_FAULTS_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(entry, dict):
                        found.setdefault((entry.get("op"), entry.get("error")), entry)
        except OSError:
            pass
    return list(found.values())


def report_faults(results, group):
    """``<group>.emulator``: ops the emulator could not run itself and how it carried on (its limits, not the
    program's)."""
    faults = emulator_faults()
    if not faults:
        return
    listed = "; ".join(
        "{} ({}x): {}; {}".format(f.get("op"), f.get("count", 1), f.get("error"), f.get("action")) for f in faults[:8])
    if len(faults) > 8:
        listed += "; and {} more".format(len(faults) - 8)
    results.check(
        "{}.emulator".format(group),
        WARN,
        "emulator limitation, not your code: the emulated device could not run {} op(s) itself and carried on: {}"
        .format(len(faults), listed),
        "nothing to change in your code for these; results that depend on them are checked on a real NPU only",
        data={"faults": faults},
    )


def report_transfer(results, emulated):
    """Which transfer_to_npu the program imported: on an NPU, torch_npu's; emulated, the real
    ``contrib/transfer_to_npu.py`` of the pinned torch-npu wheel that pairs with this torch, or the stand-in."""
    module = sys.modules.get("torch_npu.contrib.transfer_to_npu")
    if module is None:
        return
    source = getattr(module, "SOURCE", None)
    if not emulated or source is None:
        version = getattr(sys.modules.get("torch_npu"), "__version__", "?")
        results.check("pipeline.transfer_to_npu", PASS, "torch_npu {}'s transfer_to_npu remapped cuda to npu".format(
            version), data={"source": "torch_npu"}, emulated=False)
    elif source == "stand-in":
        results.check(
            "pipeline.transfer_to_npu",
            PASS,
            "the emulator's stand-in transfer_to_npu ran: {}".format(getattr(module, "STANDIN_REASON", "?")),
            data={"source": "stand-in"},
        )
    else:
        results.check(
            "pipeline.transfer_to_npu",
            PASS,
            "the real {} ran over the emulated device".format(source),
            data={"source": source},
        )


def report_loss(results, observer):
    losses = observer.losses
    if not losses:
        results.check(
            "pipeline.loss",
            WARN,
            "no `.backward()` call was seen before the optimizer steps (a custom backward path?)",
            "nothing to fix if the loss is produced elsewhere; the finite-loss check could not run",
        )
        return
    bad = [l for l in losses if l.get("finite") is False]
    values = [l.get("value") for l in losses]
    summary = "loss {} ({}, {})".format(
        ", ".join("{:.4g}".format(v) if isinstance(v, float) else "?" for v in values),
        losses[-1]["dtype"], losses[-1]["device"])
    if bad:
        results.check(
            "pipeline.loss",
            FAIL,
            "the loss is not finite at step {} ({}); {}".format(bad[0]["step"], bad[0].get("site"), summary),
            "look for float16 overflow, log/sqrt of non-positive values or nan_to_num on half precision "
            "(NanToNumSafe); run with ASCEND_LAUNCH_BLOCKING=1 to find the first bad op",
            data={"losses": losses},
        )
    elif any("error" in l for l in losses):
        results.check("pipeline.loss", WARN, "the loss value could not be read: {}".format(losses[0].get("error")),
                      "check that the loss is a tensor on the device", data={"losses": losses})
    else:
        results.check("pipeline.loss", PASS, summary + ", finite", data={"losses": losses})


def report_params(results, observer, request, emulated):
    params = observer.params or {}
    want = request.get("device_type", "npu")
    devices = params.get("devices", {})
    on_device = sum(n for d, n in devices.items() if d.split(":")[0] == want)
    total = params.get("count", 0)
    detail = "{} of {} parameters of {} on {} ({})".format(
        on_device, total, params.get("optimizer", "the optimizer"), want,
        ", ".join("{}: {}".format(d, n) for d, n in sorted(devices.items())))
    if total and on_device == total:
        results.check("pipeline.params_device", PASS, detail, data=params)
    else:
        where = ", ".join(sorted(devices))
        results.check(
            "pipeline.params_device",
            FAIL,
            detail,
            "move the model with `.to(device)` where device is `npu` (parameters are on {}); check the config's "
            "device entry and that the entry point imports torch_npu{}".format(
                where, "" if emulated else " (or pass --emulate-npu on a machine without an NPU)"),
            data=params,
        )


def report_float64(results, observer, prefix):
    if observer.float64_count == 0:
        results.check(prefix + ".float64", PASS, "no float64 tensor was created on the device")
        return
    sites = sorted(observer.float64_sites.items(), key=lambda kv: -kv[1])[:5]
    results.check(
        prefix + ".float64",
        WARN,
        "{} float64 tensors were created on the device, e.g. at {}".format(
            observer.float64_count, ", ".join("{} ({}x)".format(s, n) for s, n in sites)),
        "use float32 at the places shown (NPU-FACTS.md: float64 is partial on Ascend; `Tensor.double()` of a device "
        "tensor gives fp32); npu-scan reports as P_F64 only the float64 written in the code (a dtype that comes from "
        "data files or numpy arrays shows here only)",
        data={"count": observer.float64_count, "sites": dict(sites)},
    )


def report_fallbacks(results, observer, prefix):
    if not observer.fallbacks:
        results.check(prefix + ".cpu_fallback", PASS, "no CPU-fallback warning was seen")
        return
    ops = ", ".join("aten::{} ({}x)".format(op, n) for op, n in sorted(observer.fallbacks.items()))
    results.check(
        prefix + ".cpu_fallback",
        WARN,
        "operators fell back to the CPU: " + ops,
        "each fallback copies tensors to the host and back every step; replace the op (see NPU-FACTS.md) or set "
        "TORCH_NPU_FALLBACK_CPU_DISABLE=1 to find where it is called",
        data=observer.fallbacks,
    )


def report_patches(results, watch, steps):
    if watch.module is None:
        results.check("pipeline.patches", SKIP, "no runtime_patches.py was loaded")
        return
    reports = watch.reports()
    if not watch.patchers:
        if "torch_npu" not in sys.modules:
            results.check(
                "pipeline.patches",
                WARN,
                "the program built no runtime patcher in this run, and torch_npu was never imported (entry points "
                "often apply the patcher only when torch_npu imports)",
                "run on the NPU environment (--conda-env / --python) or with --emulate-npu to see the patches at work",
            )
            return
        results.check(
            "pipeline.patches",
            FAIL,
            "the program never built a runtime patcher (build_vla_patcher was not called)",
            "apply it at the entry point: `from runtime_patches import build_vla_patcher; build_vla_patcher().apply()`",
        )
        return
    fired = summarize_fires(reports)
    skipped = sorted(
        {
            "{} ({})".format(e.get("name"), e.get("reason") or e.get("state"))
            for r in reports if isinstance(r, list)
            for e in r if isinstance(e, dict) and e.get("state") == "skipped"
        }
    )
    who = "the harness (the entry point applies none)" if watch.applied_by_harness else "the program"
    if fired:
        detail = "patcher applied by {}; fired: {}".format(
            who, "; ".join("{} {}x, first at {}".format(n, c, s or "?") for n, c, s in fired))
    else:
        detail = "patcher applied by {}; no patch fired".format(who)
    if skipped:
        detail += "; skipped: " + ", ".join(skipped)
    status = WARN if watch.applied_by_harness else PASS
    remedy = (
        "the entry point must apply the patcher itself: `build_vla_patcher().apply()` (P_ENT)"
        if watch.applied_by_harness else None
    )
    results.check("pipeline.patches", status, detail, remedy, data={"reports": reports})


def summarize_fires(reports):
    """[(patch, count, first site)] of patches that fired, from whatever shape report() returned."""
    out = []
    for report in reports:
        entries = report
        if isinstance(report, dict):
            for key in ("patches", "fired", "fires", "applied"):
                if isinstance(report.get(key), (list, dict)):
                    entries = report[key]
                    break
        if isinstance(entries, dict):
            entries = [dict(v, name=k) if isinstance(v, dict) else {"name": k, "count": v} for k, v in entries.items()]
        if not isinstance(entries, list):
            continue
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            count = entry.get("fires", entry.get("fired", entry.get("fire_count", entry.get("count", 0))))
            if isinstance(count, (int, float)) and count > 0:
                site = entry.get("first_call_site") or entry.get("first_site") or entry.get("site")
                out.append((entry.get("name") or entry.get("patch"), int(count), site))
    return out


class DataWatch:
    """Find the program's DataLoaders; drain the first one it iterates."""

    def __init__(self, torch, batches, observer, project_root):
        self.torch = torch
        self.want = batches
        self.observer = observer
        self.root = project_root
        self.built = []
        #: Where each DataLoader was built (``file:line`` in the project), by ``id`` of the loader.
        self.sites = {}
        self.drained = None
        self._undo = []

    def install(self):
        DataLoader = self.torch.utils.data.DataLoader
        original_init, original_iter = DataLoader.__init__, DataLoader.__iter__
        watch = self

        def __init__(self, *args, **kwargs):
            original_init(self, *args, **kwargs)
            watch.built.append(weakref.ref(self))
            watch.sites[id(self)] = watch.caller_site()

        def __iter__(self):
            if watch.drained is None:
                watch.drain(self, original_iter)
                raise HarnessStop("{} batches drawn".format(len(watch.drained["batches"])))
            return original_iter(self)

        DataLoader.__init__, DataLoader.__iter__ = __init__, __iter__
        self._original_iter = original_iter
        self._undo.append(lambda: setattr(DataLoader, "__init__", original_init))
        self._undo.append(lambda: setattr(DataLoader, "__iter__", original_iter))

    def uninstall(self):
        while self._undo:
            self._undo.pop()()

    def caller_site(self):
        """``file:line`` of the innermost project frame that is building a DataLoader, else None."""
        frame = sys._getframe(2)
        while frame is not None:
            if in_project(frame.f_code.co_filename, self.root):
                path = os.path.abspath(frame.f_code.co_filename)
                return "{}:{}".format(os.path.relpath(path, self.root).replace(os.sep, "/"), frame.f_lineno)
            frame = frame.f_back
        return None

    def drain(self, loader, original_iter):
        try:
            import numpy as np
        except ImportError:
            np = None
        info = {
            "batches": [],
            "num_workers": getattr(loader, "num_workers", None),
            "batch_size": getattr(loader, "batch_size", None),
            "dataset": type(getattr(loader, "dataset", None)).__name__,
            "site": self.sites.get(id(loader)),
            "built": len(self.built),
            "error": None,
            "times_s": [],
        }
        self.drained = info
        t0 = time.perf_counter()
        iterator = None
        try:
            iterator = original_iter(loader)
            last = t0
            for _ in range(self.want):
                try:
                    batch = next(iterator)
                except StopIteration:
                    break
                now = time.perf_counter()
                info["times_s"].append(now - last)
                last = now
                info["batches"].append(describe_batch(batch, self.torch, np))
        except HarnessStop:
            raise
        except BaseException as exc:
            info["error"] = exc
        finally:
            iterator = None
        info["total_s"] = time.perf_counter() - t0

    def drain_leftover(self):
        """Drain the first DataLoader the program built, when it never iterated one."""
        for ref in self.built:
            loader = ref()
            if loader is not None:
                self.drain(loader, self._original_iter)
                return True
        return False


def report_data(request, results, loaders, outcome):
    code = _report_data(request, results, loaders, outcome)
    report_faults(results, "data")
    return code


def _report_data(request, results, loaders, outcome):
    root, want = request["project_root"], request["batches"]
    early = None
    if loaders.drained is None:
        if outcome.kind != "stopped":
            early = ending(outcome, root)
        if not loaders.drain_leftover():
            if early is not None:
                status, detail, remedy, reason = early
                detail, remedy, data = with_asked(
                    outcome, FAIL, "no DataLoader was iterated; " + detail, remedy, failure_data(raised(outcome), reason))
                results.check("data.run", FAIL, detail, remedy, data=data)
            else:
                detail, remedy, data = with_asked(
                    outcome,
                    FAIL,
                    "the program built no torch DataLoader ({})".format(ENDED_WORDS.get(outcome.kind, outcome.kind)),
                    ("the command you named builds no DataLoader as run: give it the arguments or config that "
                     "train" if request.get("entry_named")
                     else "point verify at the training entry (--entry FILE or `-- <launch command>`)"),
                    {"reason": "no-dataloader"},
                )
                results.check("data.run", FAIL, detail, remedy, data=data)
            return 0
    info = loaders.drained
    error = info["error"]
    got = len(info["batches"])
    if error is not None:
        reason, detail, remedy = classify(error, root)
        results.check(
            "data.workers" if reason == "worker-error" else "data.run",
            WARN if reason == "emulator-limitation" else FAIL,
            "after {} of {} batches, {}".format(got, want, detail),
            remedy,
            data=failure_data(error, reason),
        )
    elif got < want:
        results.check("data.run", FAIL, "the DataLoader ended after {} of {} batches".format(got, want),
                      "use a dataset with at least {} batches (or --batches {})".format(want, max(got, 1)))
    else:
        note = ""
        if early is not None:
            note = "; the program itself failed before iterating it ({})".format(early[1])
        which = "the program's DataLoader"
        if info["site"] is not None:
            which = "the DataLoader built at {}".format(info["site"])
        more = ""
        if info["built"] > 1:
            more = "; the first one iterated, of {} built so far".format(info["built"])
        data = {"dataset": info["dataset"], "site": info["site"], "loaders_built": info["built"]}
        if early is not None:
            data["reason"] = early[3]
        results.check(
            "data.run",
            WARN if early is not None else PASS,
            "{} batches from {} ({}, batch_size={}, num_workers={}{}){}".format(
                got, which, info["dataset"], info["batch_size"], info["num_workers"], more, note),
            early[2] if early is not None else None,
            data=data,
        )
    if error is None and info["num_workers"]:
        results.check("data.workers", PASS, "{} worker processes delivered batches".format(info["num_workers"]))
    if not info["batches"]:
        return 0

    fields = {}
    for batch in info["batches"]:
        for name, entry in batch.items():
            agg = fields.setdefault(name, {"shapes": [], "dtypes": [], "nan": 0, "inf": 0})
            if "shape" in entry and entry["shape"] not in agg["shapes"]:
                agg["shapes"].append(entry["shape"])
            dtype = entry.get("dtype", entry.get("type"))
            if dtype not in agg["dtypes"]:
                agg["dtypes"].append(dtype)
            agg["nan"] += entry.get("nan", 0)
            agg["inf"] += entry.get("inf", 0)
    layout = "; ".join(
        "{} {} {}".format(name, "/".join(str(d) for d in agg["dtypes"]), " | ".join(str(s) for s in agg["shapes"]))
        for name, agg in sorted(fields.items()))
    results.check("data.batches", PASS, layout, data=fields)

    bad = {n: (a["nan"], a["inf"]) for n, a in fields.items() if a["nan"] or a["inf"]}
    if bad:
        results.check(
            "data.nan_inf",
            FAIL,
            "non-finite values: " + ", ".join("{} ({} NaN, {} Inf)".format(n, v[0], v[1]) for n, v in sorted(bad.items())),
            "clean or mask these fields in the dataset; NaN inputs make the loss NaN on any device",
        )
    else:
        results.check("data.nan_inf", PASS, "no NaN or Inf in {} floating-point fields".format(
            sum(1 for a in fields.values() if any(str(d).startswith(("float", "complex")) for d in a["dtypes"]))))

    f64 = sorted(n for n, a in fields.items() if "float64" in a["dtypes"])
    if f64:
        results.check(
            "data.float64",
            WARN,
            "float64 fields: {}".format(", ".join(f64)),
            "produce float32 in the dataset (`.astype(np.float32)` where it reads or converts these fields); "
            "float64 is partial on Ascend (NPU-FACTS.md) and costs host-device bandwidth; the dtype comes from the "
            "data, so npu-scan, which reads only the code, does not report it",
        )
    else:
        results.check("data.float64", PASS, "no float64 field")

    times = info["times_s"]
    if times:
        total = sum(times)
        steady = times[1:]
        rate = got / total if total > 0 else float("inf")
        steady_rate = len(steady) / sum(steady) if steady and sum(steady) > 0 else None
        results.check(
            "data.throughput",
            PASS,
            "{:.1f} batches/s over {} batches (first batch {:.3f} s{})".format(
                rate, got, times[0], ", then {:.1f} batches/s".format(steady_rate) if steady_rate else ""),
            data={"batches_per_s": rate, "steady_batches_per_s": steady_rate, "times_s": times},
        )
    return 0
