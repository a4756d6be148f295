"""The emulated device's native part: ``npu_device.cpp``, built on first use.

torch releases before 2.10 cannot register a PrivateUse1 device guard from Python, and without one torch's C++
core refuses indexing and ``backward()`` on the device. ``npu_device.cpp`` (beside this file) registers the guard
there and, on every torch, the PrivateUse1 hooks (with a pinned-memory allocator, which torch >= 2.10's Python
hooks lack and DDP's reducer needs). It is compiled once per torch version, Python version and source with
``torch.utils.cpp_extension`` (ninja and the machine's C++ compiler; without ninja, one compiler call with the
same flags) into a cache folder: ``$NPU_PATCHER_EMULATOR_BUILD_DIR``, else
``$XDG_CACHE_HOME/npu-patcher/emulator-ext``, else ``~/.cache/npu-patcher/emulator-ext``. A file lock makes
parallel processes build it once. Everything else (tensors, ops, restrictions) stays in Python and is the same on
every torch version.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from npu_emulator._errors import EmulatedNPUError, emulated_message

SOURCE = Path(__file__).with_name("npu_device.cpp")
BUILD_DIR_ENV = "NPU_PATCHER_EMULATOR_BUILD_DIR"

_loaded: dict[str, ModuleType] = {}


def cache_root() -> Path:
    """Where built extensions are kept (one folder per torch version and source hash)."""
    explicit = os.environ.get(BUILD_DIR_ENV)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "npu-patcher" / "emulator-ext"


def _fail(detail: str, fix: str) -> EmulatedNPUError:
    return EmulatedNPUError(emulated_message("cannot install the emulated npu device", detail, fix))


def _find_ninja() -> str | None:
    """ninja on PATH, else the one of the PyPI ``ninja`` package or the interpreter's scripts folder."""
    found = shutil.which("ninja")
    if found:
        return found
    candidates = [Path(sysconfig.get_path("scripts")) / "ninja", Path(sys.executable).with_name("ninja")]
    if importlib.util.find_spec("ninja") is not None:
        import ninja  # type: ignore[import-not-found]

        candidates.insert(0, Path(ninja.BIN_DIR) / "ninja")
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _find_compiler() -> str | None:
    wanted = os.environ.get("CXX") or "c++"
    return shutil.which(wanted) or (shutil.which("g++") if "CXX" not in os.environ else None)


@contextlib.contextmanager
def _locked(path: Path) -> Any:
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _tag() -> str:
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    version = torch.__version__.replace("+", "_").replace(".", "_")
    # The extension uses the CPython C API: one build per interpreter version too.
    return f"torch{version}_py{sys.version_info[0]}{sys.version_info[1]}_{digest}"


def build() -> Path:
    """Build the extension into the cache unless it is there, without loading it (loading registers the device
    guard on torch < 2.10); returns the library. EmulatedNPUError says what is missing."""
    if not SOURCE.is_file():
        raise _fail(f"{SOURCE} is missing", "reinstall the emulator folder (npu-assets init PROJECT --emulator)")
    tag = _tag()
    build_dir = cache_root() / tag
    library = build_dir / f"npu_emulator_device_{tag}.so"
    if not library.is_file():
        _build(library.stem, build_dir)
    return library


def load() -> ModuleType:
    """Build (once per torch version and source) and import the extension; EmulatedNPUError says what is missing."""
    if "module" in _loaded:
        return _loaded["module"]
    library = build()
    name, build_dir = library.stem, library.parent
    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise _fail(f"cannot load {library}", f"delete {build_dir} and run again to rebuild it")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as error:
        raise _fail(f"cannot load {library}: {error}", f"delete {build_dir} and run again to rebuild it") from None
    _loaded["module"] = module
    return module


def _build(name: str, build_dir: Path) -> None:
    compiler = _find_compiler()
    if compiler is None:
        raise _fail(
            f"torch {torch.__version__} needs a small C++ extension for the npu device guard and hooks, and no C++ "
            f"compiler was found ({os.environ.get('CXX') or 'c++'} is not on PATH)",
            "install one (apt-get install g++, or conda install gxx_linux-64) or set CXX",
        )
    ninja = _find_ninja()
    if ninja is None:
        # One source file: the compiler alone builds it (the default test environment of torch >= 2.10 has no ninja).
        build_dir.mkdir(parents=True, exist_ok=True)
        with _locked(build_dir / "build.lock"):
            if not (build_dir / f"{name}.so").is_file():
                _compile_directly(compiler, name, build_dir)
        return
    try:
        from torch.utils import cpp_extension
    except ImportError as error:  # torch 2.1's cpp_extension imports setuptools / pkg_resources
        raise _fail(
            f"torch.utils.cpp_extension cannot be imported ({error})",
            "install setuptools into this environment: python -m pip install 'setuptools<70'",
        ) from None
    os.environ["PATH"] = os.pathsep.join([str(Path(ninja).parent), os.environ.get("PATH", "")])
    build_dir.mkdir(parents=True, exist_ok=True)
    with _locked(build_dir / "build.lock"):
        if (build_dir / f"{name}.so").is_file():
            return  # another process built it while this one waited
        log = build_dir / "build.log"
        try:
            # is_python_module=False: the library is loaded (its static guard registration runs) and load()
            # imports it as a module afterwards.
            cpp_extension.load(
                name=name,
                sources=[str(SOURCE)],
                build_directory=str(build_dir),
                extra_cflags=["-O1"],
                with_cuda=False,
                is_python_module=False,
                verbose=False,
            )
        except (RuntimeError, OSError, ImportError, subprocess.SubprocessError) as error:
            log.write_text(str(error), encoding="utf-8")
            raise _fail(
                f"building {SOURCE.name} with torch {torch.__version__} failed; the compiler's output is in {log}",
                "fix what the log names (compiler, headers), then run again",
            ) from None


def _compile_directly(compiler: str, name: str, build_dir: Path) -> None:
    """Build the extension with one compiler call (no ninja), with the flags torch.utils.cpp_extension uses."""
    try:
        from torch.utils import cpp_extension
    except ImportError as error:
        raise _fail(
            f"torch.utils.cpp_extension cannot be imported ({error})",
            "install setuptools into this environment: python -m pip install 'setuptools<70'",
        ) from None
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    includes = [*cpp_extension.include_paths(), sysconfig.get_path("include")]
    library = build_dir / f"{name}.so"
    partial = build_dir / f"{name}.so.{os.getpid()}.tmp"
    command = [compiler, "-shared", "-fPIC", "-O1", "-std=c++20" if (major, minor) >= (2, 10) else "-std=c++17"]
    command += [f"-DTORCH_EXTENSION_NAME={name}", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    command += [f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    command += [f"-isystem{include}" for include in includes]
    command += [str(SOURCE), "-o", str(partial), f"-L{cpp_extension.TORCH_LIB_PATH}"]
    command += ["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"]
    log = build_dir / "build.log"
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=900)
    except (OSError, subprocess.SubprocessError) as error:
        log.write_text(f"{' '.join(command)}\n{error}\n", encoding="utf-8")
        detail = f"building {SOURCE.name} failed; the compiler's output is in {log}"
        raise _fail(detail, "fix what the log names") from None
    log.write_text(f"{' '.join(command)}\n{done.stdout}{done.stderr}", encoding="utf-8")
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise _fail(
            f"building {SOURCE.name} with torch {torch.__version__} failed; the compiler's output is in {log}",
            "fix what the log names (compiler, headers), then run again",
        )
    os.replace(partial, library)
