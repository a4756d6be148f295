"""Fixtures over the pinned torch-npu wheels (see ``wheels_cache``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from wheels_cache import TABLE, VERSIONS, wheel_root


@pytest.fixture(params=VERSIONS)
def wheel(request: pytest.FixtureRequest) -> tuple[str, Path]:
    """``(version, extracted wheel root)`` for each pinned torch-npu wheel."""
    return request.param, wheel_root(request.param)


@pytest.fixture(scope="session")
def table() -> dict:
    return json.loads(TABLE.read_text(encoding="utf-8"))
