"""The project's ``runtime_patches.py``: load it once, see which patchers the program builds and applies,
and read their reports.

The module is registered as ``runtime_patches`` (and ``migrate_to_cloudrobo.runtime_patches``) before the
program runs, so the program's own import returns this same module, whose ``build_vla_patcher`` /
``build_npu_patcher`` are wrapped to remember every patcher they return.
"""

import importlib.util
import os
import sys
import types

BUILDERS = ("build_vla_patcher", "build_npu_patcher")


class PatcherWatch:
    def __init__(self):
        self.module = None
        self.path = None
        self.patchers = []
        self.applied_by_harness = False
        self.error = None

    def load(self, path):
        """Import the file at `path` as `runtime_patches`; remember an import error instead of raising."""
        self.path = path
        try:
            spec = importlib.util.spec_from_file_location("runtime_patches", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules["runtime_patches"] = module
            spec.loader.exec_module(module)
        except BaseException as exc:
            sys.modules.pop("runtime_patches", None)
            self.error = "{}: {}".format(type(exc).__name__, exc)
            return None
        self.module = module
        package = types.ModuleType("migrate_to_cloudrobo")
        package.__path__ = [os.path.dirname(path)]
        package.runtime_patches = module
        sys.modules.setdefault("migrate_to_cloudrobo", package)
        sys.modules.setdefault("migrate_to_cloudrobo.runtime_patches", module)
        for name in BUILDERS:
            original = getattr(module, name, None)
            if callable(original):
                setattr(module, name, self._wrap(original))
        return module

    def _wrap(self, builder):
        watch = self

        def build(*args, **kwargs):
            patcher = builder(*args, **kwargs)
            watch.patchers.append(patcher)
            return patcher

        build.__wrapped__ = builder
        build.__name__ = builder.__name__
        build.__doc__ = builder.__doc__
        return build

    def apply_ourselves(self):
        """Build and apply a patcher as the entry point would (used when the entry point does not)."""
        builder = getattr(self.module, "build_vla_patcher", None) or getattr(self.module, "build_npu_patcher", None)
        if builder is None:
            raise RuntimeError("{} defines neither build_vla_patcher nor build_npu_patcher".format(self.path))
        patcher = builder()
        patcher.apply()
        self.applied_by_harness = True
        return patcher

    def reports(self):
        """The JSON-able report of every patcher built (or found active) in this process."""
        active = getattr(self.module, "active_patcher", None)
        if callable(active):
            try:
                found = active()
            except BaseException:
                found = None
            if found is not None and all(found is not p for p in self.patchers):
                self.patchers.append(found)
        out = []
        for index, patcher in enumerate(self.patchers):
            report = getattr(patcher, "report", None)
            if report is None:
                continue
            try:
                out.append(jsonable(report()))
            except BaseException as exc:
                out.append({"error": "{}: {}".format(type(exc).__name__, exc)})
        return out

    def remove_all(self):
        for patcher in reversed(self.patchers):
            try:
                patcher.remove()
            except BaseException:
                pass


def jsonable(value, depth=0):
    if depth > 6:
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v, depth + 1) for v in value]
    if hasattr(value, "_asdict"):
        return jsonable(value._asdict(), depth + 1)
    if hasattr(value, "__dataclass_fields__"):
        return {k: jsonable(getattr(value, k), depth + 1) for k in value.__dataclass_fields__}
    if hasattr(value, "__dict__"):
        return {k: jsonable(v, depth + 1) for k, v in vars(value).items() if not k.startswith("_")}
    return repr(value)
