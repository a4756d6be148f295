"""Errors raised by the emulated ``npu`` device."""

from __future__ import annotations


class EmulatedNPUError(RuntimeError):
    """A failure the emulator raises where a real Ascend NPU would fail.

    The message starts with the real error's text where it is known and always contains ``emulated npu`` and the
    source of the rule (NPU-FACTS.md, SKILL-seed.md or torch's own check).
    """


class EmulatedNPUTypeError(EmulatedNPUError, TypeError):
    """An emulated failure whose real counterpart is a ``TypeError`` (e.g. ``.numpy()`` on a device tensor)."""


def emulated_message(real: str, detail: str, source: str) -> str:
    """Compose ``real`` (the device's own text) with what the emulator checked and where the rule comes from."""
    return f"{real} [emulated npu: {detail}; rule source: {source}]"
