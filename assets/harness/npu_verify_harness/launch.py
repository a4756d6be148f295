"""Run the project's entry point in this process, as `python script.py args` or `python -m module args` would."""

import os
import runpy
import sys

from .observe import HarnessStop


class Outcome:
    """How the program ended: stopped by the harness, returned, exited, or raised."""

    def __init__(self, kind, exc=None, code=None):
        self.kind = kind  # "stopped" | "returned" | "exit" | "raised"
        self.exc = exc
        self.code = code


def run(launch):
    kind = launch["kind"]
    argv = list(launch.get("argv", []))
    if kind == "script":
        path = launch["path"]
        sys.argv = [path] + argv
        sys.path[0:0] = [os.path.dirname(os.path.abspath(path))]
        target = lambda: runpy.run_path(path, run_name="__main__")  # noqa: E731
    elif kind == "module":
        module = launch["module"]
        sys.argv = [module] + argv
        sys.path[0:0] = [os.getcwd()]
        target = lambda: runpy.run_module(module, run_name="__main__", alter_sys=True)  # noqa: E731
    else:
        raise ValueError("unknown launch kind {!r}".format(kind))
    try:
        target()
    except HarnessStop as stop:
        return Outcome("stopped", exc=stop)
    except SystemExit as exit_:
        code = exit_.code
        if isinstance(exit_.__context__, HarnessStop):
            return Outcome("stopped", exc=exit_.__context__)
        return Outcome("exit", exc=exit_, code=code)
    except KeyboardInterrupt as exc:
        return Outcome("raised", exc=exc)
    except Exception as exc:
        if isinstance(exc.__context__, HarnessStop):
            return Outcome("stopped", exc=exc.__context__)
        return Outcome("raised", exc=exc)
    return Outcome("returned")
