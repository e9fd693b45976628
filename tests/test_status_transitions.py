"""The step status transition table against what agy really recorded and what agy-sim writes.

Each step records every status it went through (metadata 5.26.1, `statusTransitions` in JSON);
consecutive entries must be moves the table in `agy.step` allows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES

from agy_provider.agy.step import STATUS_BY_NUMBER
from agy_provider.agy.step import STATUS_TRANSITIONS
from agy_provider.agy.step import StepStatus
from agy_provider.sim.descriptors import Step as SimStep


def illegal(statuses: list[StepStatus]) -> list[tuple[StepStatus, StepStatus]]:
    pairs = zip([StepStatus.UNSPECIFIED, *statuses], statuses, strict=False)
    return [(a, b) for a, b in pairs if b not in STATUS_TRANSITIONS.get(a, frozenset())]


def test_agys_real_recorded_transitions_are_in_the_table(reference: Path) -> None:
    checked = 0
    for path in sorted((reference / "rpc-steps").glob("*.json")):
        step = json.loads(path.read_text())
        moves = step.get("metadata", {}).get("internalMetadata", {}).get("statusTransitions", [])
        statuses = [
            StepStatus(m["updatedStatus"].removeprefix("CORTEX_STEP_STATUS_").lower())
            for m in moves
        ]
        assert not illegal(statuses), (path.name, statuses)
        checked += len(statuses)
    assert checked >= 10


@pytest.mark.parametrize("db", sorted((FIXTURES / "db").glob("*.db")), ids=lambda p: p.stem)
def test_the_simulators_transitions_are_in_the_table(db: Path) -> None:
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?immutable=1", uri=True)
    try:
        rows = conn.execute("SELECT idx, step_payload FROM steps ORDER BY idx").fetchall()
    finally:
        conn.close()
    for idx, payload in rows:
        step = SimStep()
        try:
            step.ParseFromString(payload)
        except Exception:
            continue  # the corrupt-row fixture's garbage row
        statuses = [
            STATUS_BY_NUMBER[t.updated_status]
            for t in step.metadata.internal_metadata.status_transitions
        ]
        assert not illegal(statuses), (db.stem, idx, statuses)
        if statuses:
            assert statuses[-1] is STATUS_BY_NUMBER[step.status], (db.stem, idx)


def test_the_table_rejects_what_agy_never_does() -> None:
    assert illegal([StepStatus.DONE, StepStatus.RUNNING]) == [(StepStatus.DONE, StepStatus.RUNNING)]
    assert illegal([StepStatus.PENDING, StepStatus.RUNNING, StepStatus.DONE]) == []
