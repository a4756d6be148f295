"""Errors raised by the emulated ``npu`` device."""

from __future__ import annotations

from npu_emulator._rules import RESTRICTIONS


class EmulatedNPUError(RuntimeError):
    """A failure the emulator raises where a real Ascend NPU would fail.

    The message starts with the real error's text where it is known and always contains ``emulated npu`` and the
    source of the rule (NPU-FACTS.md, SKILL.md or torch's own check). ``group`` is the restriction group of
    :data:`npu_emulator._rules.RESTRICTIONS` that raised it (``"device_mismatch"``, ``"numpy"``, ``"float64"``,
    ``"sdpa_mask"``...; the message says ``restriction group: NAME``), or ``None`` for a failure outside those
    groups (a device index the emulator does not have, an unsupported call of the stand-in ``torch_npu``).
    """

    def __init__(self, message: str, group: str | None = None) -> None:
        super().__init__(message)
        self.group = group

    def __reduce__(self):  # noqa: ANN204 - the pickle protocol's own shape
        # Keep the group across pickling (DataLoader workers, multiprocessing).
        return (type(self), (str(self), self.group))


class EmulatedNPUTypeError(EmulatedNPUError, TypeError):
    """An emulated failure whose real counterpart is a ``TypeError`` (e.g. ``.numpy()`` on a device tensor)."""


def emulated_message(real: str, detail: str, source: str) -> str:
    """Compose ``real`` (the device's own text) with what the emulator checked and where the rule comes from."""
    return f"{real} [emulated npu: {detail}; rule source: {source}]"


def restriction_error(
    group: str, real: str, detail: str, cls: type[EmulatedNPUError] = EmulatedNPUError
) -> EmulatedNPUError:
    """The error of restriction ``group``: its message names the group and the group's rule source."""
    source = RESTRICTIONS[group][1]
    return cls(f"{real} [emulated npu: {detail}; restriction group: {group}; rule source: {source}]", group)


# -- emulator faults: an exception inside the emulator that is neither a documented restriction nor the user's code --

#: The phrase every emulator fault starts with; npu-verify's harness and users can search for it.
LIMITATION_PHRASE = "emulator limitation, not your code"

#: ``NPU_EMULATOR_FAULTS_FILE``: when set, each new fault is appended to that file as one JSON line.
FAULTS_FILE_ENV = "NPU_EMULATOR_FAULTS_FILE"


class EmulatorLimitation(RuntimeError):
    """The emulated device, not the program, failed at ``op``: the same code may run on a real Ascend NPU.

    Not an :class:`EmulatedNPUError` (those are documented NPU restrictions) and not a subclass of it, so that a
    check ``isinstance(exc, EmulatedNPUError)`` never mistakes one for the other. ``op`` names the operation
    (``aten.mm.default``, ``Tensor.__format__``, ``torch.load``...); ``cause`` is the original error's text.
    """

    def __init__(self, op: str, cause: str, hint: str = "") -> None:
        tail = f"; {hint}" if hint else ""
        super().__init__(
            f"{LIMITATION_PHRASE}: {op} failed inside the emulated npu device ({cause}){tail} "
            "[emulated npu: the emulator cannot run this call; it is not a documented NPU restriction and the same "
            "code may run on a real NPU]"
        )
        self.op = op
        self.cause = cause

    def __reduce__(self):  # noqa: ANN204 - the pickle protocol's own shape
        return (_rebuild_limitation, (self.op, self.cause, str(self)))


def _rebuild_limitation(op: str, cause: str, message: str) -> EmulatorLimitation:
    error = EmulatorLimitation.__new__(EmulatorLimitation)
    RuntimeError.__init__(error, message)
    error.op = op
    error.cause = cause
    return error


class EmulatorLimitationWarning(UserWarning):
    """The emulator hit one of its own limits at an op and carried on (e.g. computed the op in float32 on CPU)."""


_RAISED = "raised EmulatorLimitation"

#: Every fault of this process, in order of first occurrence: {"op", "error", "action", "count"}.
_FAULTS: list[dict[str, object]] = []
_FAULT_INDEX: dict[tuple[str, str], dict[str, object]] = {}


def record_fault(op: str, error: str, action: str) -> dict[str, object]:
    """Record that the emulator failed at ``op`` with ``error``; ``action`` is what it did ("fell back ...",
    "raised EmulatorLimitation"). Once per (op, error): writes the faults file, and warns
    (:class:`EmulatorLimitationWarning`) unless the fault is raised."""
    import warnings

    key = (op, error)
    found = _FAULT_INDEX.get(key)
    if found is not None:
        found["count"] = int(found["count"]) + 1  # type: ignore[call-overload]
        return found
    entry: dict[str, object] = {"op": op, "error": error, "action": action, "count": 1}
    _FAULTS.append(entry)
    _FAULT_INDEX[key] = entry
    if action != _RAISED:  # a raised EmulatorLimitation says it itself
        warnings.warn(f"{LIMITATION_PHRASE}: {op}: {error}; {action}", EmulatorLimitationWarning, stacklevel=3)
    _append_to_file(entry)
    return entry


def _append_to_file(entry: dict[str, object]) -> None:
    import json
    import os

    path = os.environ.get(FAULTS_FILE_ENV)
    if not path:
        return
    line = json.dumps({"op": entry["op"], "error": entry["error"], "action": entry["action"]}) + "\n"
    try:
        # One write of one line with O_APPEND: lines of parallel processes (DataLoader workers, ranks) never mix.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)
    except OSError:
        pass  # the in-process record (faults()) still has it


def faults() -> list[dict[str, object]]:
    """The emulator faults of this process so far (copies): each ``{"op", "error", "action", "count"}``."""
    return [dict(entry) for entry in _FAULTS]


def clear_faults() -> None:
    """Forget the recorded faults (the faults file is left as it is)."""
    _FAULTS.clear()
    _FAULT_INDEX.clear()


def limitation(op: str, error: BaseException, hint: str = "") -> EmulatorLimitation:
    """Record ``error`` (raised inside the emulator at ``op``) and return the :class:`EmulatorLimitation` to raise."""
    cause = f"{type(error).__name__}: {error}".strip()
    record_fault(op, cause, _RAISED)
    return EmulatorLimitation(op, cause, hint)


# Messages torch gives when it meets a limit of the emulated backend rather than of the program.
_BACKEND_SIGNATURES = (
    "NPUTensor",
    "PyTorch is not linked with support for npu devices",
    "getNewGenerator",
    "getDefaultGenerator",
    "PrivateUse1HooksInterface",
    "_make_wrapper_subclass",
    "npu_emulator",
)


def is_emulator_fault(error: BaseException | None) -> bool:
    """True when ``error`` (or an exception it was raised from) is the emulator's fault, not the program's.

    That is: an :class:`EmulatorLimitation`; or an exception that is not a documented restriction
    (:class:`EmulatedNPUError`) and was raised inside the ``npu_emulator`` package or carries a message by which
    torch refuses the emulated backend (``NPUTensor``, ``getNewGenerator``...).
    """
    import os

    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, EmulatorLimitation):
            return True
        if isinstance(error, EmulatedNPUError) or getattr(error, "_npu_emulator_program_error", False):
            return False  # a restriction, or what the CPU says about the program's op
        text = str(error)
        if any(signature in text for signature in _BACKEND_SIGNATURES):
            return True
        tb = error.__traceback__
        last = None
        while tb is not None:
            last = tb
            tb = tb.tb_next
        if last is not None and os.path.abspath(last.tb_frame.f_code.co_filename).startswith(package):
            return True
        error = error.__cause__ or error.__context__
    return False
