"""The results file: one JSON object per line, flushed as soon as it is known.

Record types: ``hello`` (the harness started; interpreter facts), ``check`` (one named result), ``fact`` (data
the Rust side turns into checks, e.g. the device count), ``done`` (the harness reached its end normally).
"""

import json
import math
import os

PASS = "pass"
WARN = "warn"
FAIL = "fail"
SKIP = "skip"


def _finite(value):
    """JSON has no NaN or Infinity: write them as the strings "nan", "inf", "-inf"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


class Results:
    def __init__(self, path, emulated):
        self._file = open(path, "a", encoding="utf-8")
        self.emulated = emulated

    def _write(self, record):
        self._file.write(json.dumps(_finite(record), default=str, sort_keys=True, allow_nan=False) + "\n")
        self._file.flush()
        try:
            os.fsync(self._file.fileno())
        except OSError:
            pass

    def hello(self, **facts):
        self._write(dict(facts, type="hello"))

    def fact(self, name, value):
        self._write({"type": "fact", "name": name, "value": value})

    def check(self, name, status, detail, remedy=None, data=None, emulated=None):
        self._write(
            {
                "type": "check",
                "name": name,
                "status": status,
                "detail": detail,
                "remedy": remedy,
                "data": data,
                "emulated": self.emulated if emulated is None else emulated,
            }
        )

    def done(self):
        self._write({"type": "done"})
        self._file.close()
