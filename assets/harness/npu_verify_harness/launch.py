"""Run the project's entry point in this process, as `python script.py args` or `python -m module args` would."""

import os
import runpy
import sys

from .observe import HarnessStop


TORCHRUN_FLAGS = {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path", "--module", "-m"}
TORCHRUN_MODULES = {"torch.distributed.run", "torch.distributed.launch"}


def parse_python_args(args):
    """The launch a `python ARGS` command line asks for, or None for `-c`, stdin and the REPL."""
    index = 0
    while index < len(args):
        word = args[index]
        if word == "-m":
            if index + 1 >= len(args):
                return None
            module, rest = args[index + 1], list(args[index + 2:])
            if module in TORCHRUN_MODULES:
                return parse_torchrun_args(rest)
            return {"kind": "module", "module": module, "argv": rest}
        if word in ("-c", "-"):
            return None
        if word in ("-W", "-X", "--check-hash-based-pycs"):
            index += 2
            continue
        if word.startswith("-"):
            index += 1
            continue
        return {"kind": "script", "path": os.path.abspath(word), "argv": list(args[index + 1:])}
    return None


def parse_torchrun_args(args):
    """torchrun's program after its own options; the harness runs it as one process."""
    index, module, no_python = 0, False, False
    while index < len(args) and args[index].startswith("-"):
        word = args[index]
        if word in ("--no-python", "--no_python"):
            no_python = True
        if word in ("-m", "--module"):
            module = True
        if word in TORCHRUN_FLAGS or "=" in word:
            index += 1
        else:
            index += 2
    if no_python or index >= len(args):
        return None
    if module:
        return {"kind": "module", "module": args[index], "argv": list(args[index + 1:])}
    return {"kind": "script", "path": os.path.abspath(args[index]), "argv": list(args[index + 1:])}


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
