"""The project files a run executed, read from ``sys.modules`` once the program has stopped.

Every module the program imported ran its module body, so its file is on the path the launch
command takes; the entry script (run as ``__main__``, which ``runpy`` takes out of
``sys.modules`` again) is added by name. Reading ``sys.modules`` at the end costs nothing while
the program runs (no tracing); it records files, not functions.
"""

import os
import sys
import time

# Files of the port's own tooling inside the project: not the project's code.
OWN_DIRS = ("migrate_to_cloudrobo",)
SKIPPED_PARTS = ("site-packages", "dist-packages", "__pycache__")


def relative(root, path):
    """``path`` relative to ``root`` with ``/`` separators, or None when it is outside it."""
    try:
        rel = os.path.relpath(os.path.realpath(path), root)
    except ValueError:  # another drive (Windows)
        return None
    if rel == os.curdir or rel.startswith(os.pardir + os.sep) or rel == os.pardir:
        return None
    parts = rel.split(os.sep)
    if parts[0] in OWN_DIRS or any(p in SKIPPED_PARTS or p.startswith(".") for p in parts):
        return None
    return "/".join(parts)


def entry_file(launch):
    """The file the launch ran: the script, or the module's file."""
    if launch.get("kind") == "script":
        return launch.get("path")
    if launch.get("kind") == "module":
        try:
            import importlib.util

            spec = importlib.util.find_spec(launch["module"])
        except (ImportError, ValueError, AttributeError):
            return None
        if spec is not None and spec.origin and spec.submodule_search_locations:
            return os.path.join(os.path.dirname(spec.origin), "__main__.py")
        return spec.origin if spec is not None else None
    return None


def executed_files(root, launch):
    """``{"entry": ..., "files": [...], "seconds": ...}``: the entry and every imported project
    file (``.py``), relative to ``root``, sorted; and how long reading them took."""
    started = time.perf_counter()
    # A cheap prefix test first: most modules (torch's) are far from the project.
    prefixes = tuple({os.path.abspath(root) + os.sep, os.path.realpath(root) + os.sep})
    root = os.path.realpath(root)
    files = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        # A relative or missing `__file__` (frozen or built-in modules) names no file of ours.
        if not isinstance(path, str) or not path.endswith(".py") or not path.startswith(prefixes):
            continue
        rel = relative(root, path)
        if rel is not None:
            files.add(rel)
    entry = entry_file(launch)
    entry = relative(root, entry) if entry else None
    if entry is not None:
        files.add(entry)
    return {"entry": entry, "files": sorted(files), "seconds": round(time.perf_counter() - started, 6)}
