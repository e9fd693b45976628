"""Shared fixtures: where ../shared/reference is, and skipping cleanly when it is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT.parent / "shared" / "reference"
FIXTURES = ROOT / "fixtures"


@pytest.fixture
def reference() -> Path:
    if not REFERENCE.is_dir():
        pytest.skip("../shared/reference is not beside this checkout")
    return REFERENCE


# End-to-end fixtures (agy-sim as agy, a private state folder, a throwaway observing plugin).
from live_helpers import live_env, recorder  # noqa: E402, F401
