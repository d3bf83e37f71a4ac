"""The shared data folder the tests on real data read (``WNEURONS_SHARED_DATA`` overrides its location)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(os.environ.get("WNEURONS_SHARED_DATA", "/work/shared/data"))


def shared(relative: str) -> Path:
    """A path inside the shared data folder; skips the test when it is absent."""
    path = SHARED_DATA / relative
    if not path.exists():
        pytest.skip(f"shared data not available: {path}")
    return path
