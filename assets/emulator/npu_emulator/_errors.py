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
