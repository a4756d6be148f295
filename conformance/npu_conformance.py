"""pytest plugin of `cargo xtask conformance`: record every test's outcome, on the CPU or on the emulated npu.

Loaded with ``-p npu_conformance`` (this folder on ``PYTHONPATH``). Environment:

- ``NPU_CONFORMANCE_MODE``: ``cpu`` (nothing is set up) or ``npu``: at ``pytest_configure`` the emulator
  folder ``NPU_CONFORMANCE_EMULATOR_DIR`` goes first on ``sys.path``, ``npu_emulator.install()`` adds the
  emulated device (as the verify harness does), then ``import torch_npu`` and
  ``from torch_npu.contrib import transfer_to_npu`` run the real ``transfer_to_npu.py`` of the torch-npu wheel
  under ``NPU_PATCHER_TORCH_NPU_DIR``, so that code choosing ``cuda`` runs on the npu. The stand-in is refused:
  a measurement over it would not be one of the real module, unless ``NPU_CONFORMANCE_TRANSFER=standin`` asks
  for it (then the stand-in must be what ran).
- ``NPU_CONFORMANCE_TORCH_NPU_TESTING``: a torch-npu wheel root (``~/.cache/npu-patcher/torch-npu/<version>``);
  its ``torch_npu/testing`` package (torch_npu's own test harness: ``testing.testcase.TestCase``) becomes
  importable as ``torch_npu.testing`` on top of the emulator's ``torch_npu`` (imported before
  ``transfer_to_npu``, in the order torch_npu's own tests import them), for torch_npu's own tests.
- ``NPU_CONFORMANCE_RESTRICTIONS``: ``off`` switches every restriction group of the emulator off (float64,
  numpy, ...), so that the run shows how the emulated device computes where a real NPU would refuse.
- ``NPU_CONFORMANCE_DEFAULT_DEVICE``: when set (``npu``), ``torch.set_default_device`` of it, for suites that
  never choose a device.
- ``NPU_CONFORMANCE_TIMEOUT``: seconds one test may run (setup, call and teardown each); past it the test
  fails with ``TestTimeout`` and the run goes on (``SIGALRM``: the test must run in the main thread).
- Every test starts seeded: before its setup, Python's ``random``, numpy's global generator (when numpy is
  imported) and ``torch.manual_seed`` get a seed derived from the test's node id, the same in the CPU and the
  npu run, so a test that draws random inputs has one outcome per side rather than one that varies by run.
- ``NPU_CONFORMANCE_RESULTS``: the JSON-lines file written as the run goes: one ``start`` line per test before it
  runs (so a crash of the interpreter names its test), one ``outcome`` line per test, a ``session`` line first
  (mode, torch, which transfer_to_npu ran) and a ``finish`` line last.

Outcomes: ``passed``, ``failed``, ``skipped``, ``error`` (setup, teardown or collection failed),
``xfailed``, ``xpassed``.
"""

import json
import os
import signal
import sys
import zlib

import pytest

_FILE = None
_SEEN = {}


def _write(record):
    if _FILE is None:
        return
    _FILE.write(json.dumps(record, sort_keys=True) + "\n")
    _FILE.flush()


def _setup_npu():
    emulator_dir = os.environ.get("NPU_CONFORMANCE_EMULATOR_DIR")
    if not emulator_dir or not os.path.isdir(emulator_dir):
        raise pytest.UsageError(
            "NPU_CONFORMANCE_EMULATOR_DIR={!r} is not the emulator folder (assets/emulator)".format(emulator_dir)
        )
    sys.path.insert(0, emulator_dir)
    standin = os.environ.get("NPU_CONFORMANCE_TRANSFER", "real") == "standin"
    if standin:
        os.environ["NPU_EMULATOR_TRANSFER"] = "standin"
    import npu_emulator

    npu_emulator.install()
    if os.environ.get("NPU_CONFORMANCE_RESTRICTIONS") == "off":
        for name in npu_emulator.enabled_restrictions():
            npu_emulator.set_restriction(name, False)
    import torch_npu  # noqa: F401  (the emulator's torch_npu package)

    testing = os.environ.get("NPU_CONFORMANCE_TORCH_NPU_TESTING")
    if testing:
        # Before transfer_to_npu, as torch_npu's own tests import it.
        _import_testing(testing)
    from torch_npu.contrib import transfer_to_npu

    source = getattr(transfer_to_npu, "SOURCE", None)
    if standin:
        if source != "stand-in":
            raise pytest.UsageError("NPU_CONFORMANCE_TRANSFER=standin, but {} ran".format(source))
    elif source in (None, "stand-in"):
        raise pytest.UsageError(
            "the stand-in transfer_to_npu ran ({}); run `cargo xtask torch-npu` and point "
            "NPU_PATCHER_TORCH_NPU_DIR at its directory".format(getattr(transfer_to_npu, "STANDIN_REASON", "?"))
        )
    return source


def _import_testing(wheel_root):
    """Import ``<wheel_root>/torch_npu/testing`` as ``torch_npu.testing``, then its ``testcase``.

    The harness reaches a few pure-Python helpers of the wheel (``torch_npu.utils._path_manager`` and what it
    imports): ``torch_npu.utils``, ``torch_npu._init`` and ``torch_npu._init.common`` become packages over the
    wheel's folders without running their ``__init__.py`` (which load torch_npu's C extension).
    """
    import importlib
    import importlib.util
    import types

    import torch_npu

    folder = os.path.join(wheel_root, "torch_npu", "testing")
    init = os.path.join(folder, "__init__.py")
    if not os.path.isfile(init):
        raise pytest.UsageError(
            "NPU_CONFORMANCE_TORCH_NPU_TESTING={!r} has no torch_npu/testing/__init__.py; run "
            "`cargo xtask torch-npu`".format(wheel_root)
        )
    for name in ("torch_npu.utils", "torch_npu._init", "torch_npu._init.common"):
        path = os.path.join(wheel_root, *name.split("."))
        module = sys.modules.get(name)
        if module is None:
            module = types.ModuleType(name, "{} of the torch-npu wheel (its __init__ not run)".format(name))
            sys.modules[name] = module
            parent, _, child = name.rpartition(".")
            setattr(sys.modules[parent], child, module)
        if not hasattr(module, "__path__"):
            module.__path__ = []
        if path not in module.__path__:
            module.__path__.append(path)
    spec = importlib.util.spec_from_file_location("torch_npu.testing", init, submodule_search_locations=[folder])
    module = importlib.util.module_from_spec(spec)
    sys.modules["torch_npu.testing"] = module
    torch_npu.testing = module
    spec.loader.exec_module(module)
    importlib.import_module("torch_npu.testing.testcase")


def pytest_configure(config):
    global _FILE
    path = os.environ.get("NPU_CONFORMANCE_RESULTS")
    if path:
        _FILE = open(path, "w", encoding="utf-8")
    mode = os.environ.get("NPU_CONFORMANCE_MODE", "cpu")
    source = None
    restrictions = None
    if mode == "npu":
        source = _setup_npu()
        import npu_emulator

        restrictions = sorted(npu_emulator.enabled_restrictions())
    elif mode != "cpu":
        raise pytest.UsageError("NPU_CONFORMANCE_MODE={!r}: expected cpu or npu".format(mode))
    import torch

    device = os.environ.get("NPU_CONFORMANCE_DEFAULT_DEVICE")
    if device:
        torch.set_default_device(device)
    _write(
        {
            "kind": "session",
            "mode": mode,
            "torch": torch.__version__,
            "transfer_to_npu": source,
            "default_device": device or None,
            "restrictions": restrictions,
            "cuda_available": bool(torch.cuda.is_available()),
        }
    )


def _message(report):
    if not report.failed:
        if report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
            return str(report.longrepr[2])[:300]
        return None
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return "{} ({}:{})".format(crash.message, os.path.basename(crash.path), crash.lineno)[:600]
    return str(report.longrepr).strip().splitlines()[-1][:600] if report.longrepr else None


def _outcome(report):
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    if report.when == "call":
        return report.outcome
    if report.failed:
        return "error"
    if report.skipped:
        return "skipped"
    return None  # a passed setup or teardown says nothing yet


class TestTimeout(Exception):
    """A test ran past ``NPU_CONFORMANCE_TIMEOUT``."""


def _on_alarm(signum, frame):
    raise TestTimeout("the test ran past NPU_CONFORMANCE_TIMEOUT={}s".format(os.environ.get("NPU_CONFORMANCE_TIMEOUT")))


def _timed():
    seconds = float(os.environ.get("NPU_CONFORMANCE_TIMEOUT") or 0)
    if seconds <= 0 or not hasattr(signal, "setitimer"):
        return None
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    return previous


def _untimed(previous):
    if previous is not None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _seed(nodeid):
    """Seed Python's, numpy's and torch's generators from the test's node id.

    Both runs of a test (CPU and npu) then draw the same numbers, and every run of it the same ones: a test that
    draws unseeded random inputs and misses its tolerance on some draws has one outcome, not a varying one.
    """
    import random

    import torch

    seed = zlib.crc32(nodeid.encode("utf-8")) & 0x7FFFFFFF
    random.seed(seed)
    torch.manual_seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed)


def _timed_phase(seeded=False):
    """A hook wrapper that runs one phase of a test (setup, call, teardown) under the per-test time limit.

    ``seeded``: the phase starts by seeding the generators (the setup phase, before any fixture draws).
    """

    @pytest.hookimpl(hookwrapper=True)
    def hook(item):
        if seeded:
            _seed(item.nodeid)
        previous = _timed()
        try:
            yield
        finally:
            _untimed(previous)

    return hook


pytest_runtest_setup = _timed_phase(seeded=True)
pytest_runtest_call = _timed_phase()
pytest_runtest_teardown = _timed_phase()


def pytest_runtest_logstart(nodeid, location):
    _write({"kind": "start", "nodeid": nodeid})


def _record(report, outcome):
    """Keep ``outcome`` as the outcome of the report's node and write it to the results."""
    _SEEN[report.nodeid] = outcome
    _write({"kind": "outcome", "nodeid": report.nodeid, "outcome": outcome, "message": _message(report)})


def pytest_runtest_logreport(report):
    outcome = _outcome(report)
    if outcome is None:
        return
    previous = _SEEN.get(report.nodeid)
    if previous is not None and previous != "passed":
        return  # the first bad outcome stands (a failed call then a failed teardown is "failed")
    if previous == "passed" and outcome != "error":
        return
    _record(report, outcome)


def pytest_collectreport(report):
    if report.failed:
        _record(report, "error")


def pytest_sessionfinish(session, exitstatus):
    _write({"kind": "finish", "exitstatus": int(exitstatus)})
    if _FILE is not None:
        _FILE.close()
