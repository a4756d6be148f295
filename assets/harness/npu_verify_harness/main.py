"""Entry of the harness: read the request, set up torch (and the emulated NPU), run one mode, write results."""

import json
import os
import platform
import sys
import time
import traceback

from .protocol import FAIL, PASS, SKIP, WARN, Results

STARTED = time.perf_counter()
STARTED_UNIX = time.time()


def _exit_now(code):
    """Leave at once: the results are on disk, and the program's threads, atexit handlers and worker
    processes must not keep the interpreter alive (npu-verify ends the whole process group next)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _dump_stacks_on_sigterm():
    """npu-verify sends SIGTERM at the timeout: print where every thread was, then die as usual."""
    try:
        import faulthandler
        import signal

        faulthandler.register(signal.SIGTERM, file=sys.stderr, all_threads=True, chain=True)
    except (ImportError, AttributeError, RuntimeError, ValueError):
        pass


def main(args):
    if args and args[0] == "--shim":
        request = shim(args[1], args[2:])
    elif len(args) == 2 and args[0] == "--torchrun":
        torchrun(args[1])
    elif len(args) == 1:
        with open(args[0], encoding="utf-8") as f:
            request = json.load(f)
    else:
        sys.stderr.write(
            "usage: run_harness.py REQUEST.json | run_harness.py --torchrun REQUEST.json | "
            "run_harness.py --shim REQUEST.json PYTHON-ARGS...\n"
        )
        sys.exit(2)
    if request.get("distributed") and os.environ.get("RANK") is not None:
        request = as_rank(request)
    _dump_stacks_on_sigterm()
    results = Results(request["results"], bool(request.get("emulate")))
    results.hello(
        python=platform.python_version(),
        executable=sys.executable,
        platform=platform.platform(),
        mode=request["mode"],
        unix_time=STARTED_UNIX,
    )
    code = 0
    try:
        code = run_mode(request, results)
    except BaseException as exc:  # a harness bug must still end in a result, with its traceback
        traceback.print_exc()
        results.check(
            "harness",
            FAIL,
            "the harness itself failed: {}: {}".format(type(exc).__name__, exc),
            "report this with the harness output shown above",
        )
        code = 3
    results.fact("versions", versions())
    results.fact("timing", {"harness_total_s": time.perf_counter() - STARTED})
    results.done()
    _exit_now(code)


def versions():
    """``{"torch", "torch_npu"}``: the versions this run used (None for one that was not imported; emulated, the
    torch-npu release whose operator table the emulated device follows); part of the configuration
    verify-report.json keeps each result under."""
    found = {}
    for name in ("torch", "torch_npu"):
        module = sys.modules.get(name)
        version = getattr(module, "__version__", None) if module is not None else None
        found[name] = str(version) if version is not None else None
    kernels = sys.modules.get("npu_emulator._kernels")
    if kernels is not None:
        # Emulated: the torch-npu release whose operator table the emulated device follows.
        try:
            found["torch_npu"] = kernels.table_info().get("torch_npu") or found["torch_npu"]
        except Exception:  # noqa: BLE001 - a version is a label; the run's results stand without it
            pass
    return found


CLAIMED = "NPU_VERIFY_HARNESS_CLAIMED"
LAUNCH = "NPU_VERIFY_HARNESS_LAUNCH"
RUN_HARNESS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "run_harness.py")


def torchrun(request_path, launch=None):
    """Replace this process with torchrun (this interpreter's ``torch.distributed.run``) starting one harness per
    rank: ``request["distributed"]`` gives ``nproc_per_node`` and ``nnodes``; ``launch`` (from a shim) is the
    program each rank runs."""
    with open(request_path, encoding="utf-8") as f:
        request = json.load(f)
    dist = request["distributed"]
    nnodes = int(dist.get("nnodes", 1))
    command = [sys.executable, "-u", "-m", "torch.distributed.run", "--nnodes", str(nnodes)]
    command += ["--nproc_per_node", str(int(dist["nproc_per_node"])), "--max_restarts", "0"]
    if nnodes == 1:
        command.append("--standalone")
    command += [RUN_HARNESS, request_path]
    if launch is not None:
        os.environ[LAUNCH] = json.dumps(launch)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)


def as_rank(request):
    """One rank of a distributed run: its own results file and log (torchrun sets RANK), and the program a shim
    saw when the launch command started torchrun or python itself."""
    rank = int(os.environ["RANK"])
    request = dict(request)
    request["results"] = request["rank_results"].format(rank=rank)
    log = request.get("rank_output")
    if log:
        fd = os.open(log.format(rank=rank), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    if os.environ.get(LAUNCH):
        request["launch"] = json.loads(os.environ[LAUNCH])
    return request


def shim(request_path, pyargs):
    """Called as `python` by the user's launch command: the first Python program it starts runs under the
    harness; every other Python invocation (helpers, `python -c`, workers) runs as plain Python."""
    from .launch import parse_python_args

    launch = None if os.environ.get(CLAIMED) else parse_python_args(pyargs)
    if launch is None:
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable] + list(pyargs))
    os.environ[CLAIMED] = "1"
    with open(request_path, encoding="utf-8") as f:
        request = json.load(f)
    if request.get("distributed") and os.environ.get("RANK") is None:
        torchrun(request_path, launch)
    request["launch"] = launch
    return request


def setup_torch(request, results):
    """Import torch and, with --emulate-npu, install the emulated npu device. None when torch is unusable."""
    t0 = time.perf_counter()
    try:
        import torch
    except BaseException as exc:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        if "torch_npu" in text and getattr(exc, "name", None) != "torch":
            # torch >= 2.5 imports installed device backends (torch_npu) while it is imported itself.
            from .classify import classify_torch_npu_import

            reason, detail, remedy = classify_torch_npu_import(exc)
            results.check(
                "runtime.torch_npu",
                FAIL,
                "import torch failed while it loaded torch_npu: " + detail,
                remedy + " (TORCH_DEVICE_BACKEND_AUTOLOAD=0 imports torch without torch_npu)",
                data={"reason": reason},
                emulated=False,
            )
            return None
        results.check(
            "runtime.torch",
            FAIL,
            "import torch failed: {}: {}".format(type(exc).__name__, exc),
            "install torch in this interpreter, or point verify at the env that has it (--python / --conda-env)",
            emulated=False,
        )
        return None
    results.fact("timing", {"torch_import_s": time.perf_counter() - t0})
    results.fact("versions", {"torch": str(getattr(torch, "__version__", None))})
    if request.get("emulate"):
        emulator_dir = request["emulator_dir"]
        sys.path.insert(0, emulator_dir)
        # The emulator's faults in DataLoader workers and other child processes come back through this file.
        os.environ.setdefault("NPU_EMULATOR_FAULTS_FILE", request["results"] + ".faults.jsonl")
        if request.get("shapes_only") and request.get("mode") == "pipeline":
            os.environ["NPU_EMULATOR_SHAPES_ONLY"] = "1"  # the steps keep shapes only; --runtime and --data data
        try:
            import npu_emulator

            npu_emulator.install()
        except BaseException as exc:
            results.check(
                "emulator",
                FAIL,
                "the emulated npu device could not be installed: {}: {}".format(type(exc).__name__, exc),
                "the emulator needs CPU torch >= 2.10 and no real torch_npu in the same process",
            )
            return None
    return torch


def run_mode(request, results):
    mode = request["mode"]
    if mode == "runtime":
        from . import runtime

        return runtime.run(request, results, setup_torch)
    if mode in ("pipeline", "data", "parity"):
        from . import program

        return program.run(request, results, setup_torch)
    raise ValueError("unknown mode {!r}".format(mode))


__all__ = ["main", "PASS", "WARN", "FAIL", "SKIP"]
