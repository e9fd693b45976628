"""Shared fixtures: where ../shared/reference is, skipping cleanly when it is absent, the opt-in
soak tests, and Hypothesis settings that hold on a busy machine."""

from __future__ import annotations

import compileall
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT.parent / "shared" / "reference"
FIXTURES = ROOT / "fixtures"

# Hypothesis's default 200 ms deadline per example is a wall-clock assertion: on a busy machine an
# example can take longer without anything being wrong. Examples are bounded by count instead.
settings.register_profile("agy-provider", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "agy-provider"))


def pytest_configure(config: pytest.Config) -> None:
    # As llm's tests do: plugins installed in this environment load under the tests only when
    # AGY_PROVIDER_PLUGINS names them (plugin_manager.load_plugins reads this flag).
    sys._called_from_test = True  # type: ignore[attr-defined]
    if not hasattr(config, "workerinput"):  # once, in the process that starts the workers
        # The package's bytecode, as a regular (non-editable) install has it: where
        # PYTHONDONTWRITEBYTECODE is set, every agy-sim and child Python the tests start would
        # otherwise compile it again. Files already compiled cost a stat each.
        for folder in ("agy_provider", "plugins"):
            compileall.compile_dir(ROOT / folder, quiet=1)


@pytest.fixture
def reference() -> Path:
    if not REFERENCE.is_dir():
        pytest.skip("../shared/reference is not beside this checkout")
    return REFERENCE


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Soak tests (many repetitions of a live turn) run only when asked for: `-m soak`, or
    `AGY_PROVIDER_SOAK=1` beside any other selection."""
    markexpr = config.getoption("markexpr", "") or ""
    wanted = os.environ.get("AGY_PROVIDER_SOAK") == "1" or re.search(r"(?<!not )\bsoak\b", markexpr)
    if wanted:
        return
    skip = pytest.mark.skip(reason="soak test: run with -m soak or AGY_PROVIDER_SOAK=1")
    for item in items:
        if item.get_closest_marker("soak") is not None:
            item.add_marker(skip)


# agy-sim as one process for many turns starts in 2.5 s like real agy (AGY_SIM_COLD_START_MS);
# here it starts as fast as its one-turn form unless a test or a scenario says otherwise.
os.environ.setdefault("AGY_SIM_COLD_START_MS", "150")


@pytest.fixture(autouse=True)
def _no_warm_agy_left() -> Iterator[None]:
    """Each test ends the warm agys its turns left idle in this process's pool (a host's would
    live on until idle or exit): a test's processes never meet the next test's."""
    yield
    warm = sys.modules.get("agy_provider.live.warm.pool")
    if warm is not None:
        warm.POOL.shutdown()


# End-to-end fixtures (agy-sim as agy, a private state folder, a throwaway observing plugin).
from live_helpers import live_env  # noqa: E402, F401
from live_helpers import recorder  # noqa: E402, F401
