"""agy-sim's server view of a conversation: a long resumed one is served at once, as agy serves it.

Counts are the measure (rows rendered, rows read again); the wall clock never is.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from agy_provider.sim import bulk
from agy_provider.sim import step_reader
from agy_provider.sim.bulk import STEPS_PER_TURN
from agy_provider.sim.bulk import write_conversation
from agy_provider.sim.step_reader import ConversationSteps

TURNS = 1500  # 6,000 earlier rows


@pytest.fixture
def rendered(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every render of a row, by its step type (the costly part: ~40 µs a row)."""
    seen: list[int] = []
    real = step_reader.render_step

    def counting(payload: bytes | None, step_type: int, status: int) -> dict[str, Any]:
        seen.append(step_type)
        return real(payload, step_type, status)

    monkeypatch.setattr(step_reader, "render_step", counting)
    return seen


def long_conversation(tmp_path: Path) -> tuple[Path, Any]:
    db = tmp_path / f"{uuid.uuid4()}.db"
    writer = write_conversation(db, str(uuid.uuid4()), turns=TURNS)
    return db, writer


def test_hosting_a_long_conversation_renders_only_what_is_asked_for(
    tmp_path: Path, rendered: list[int]
) -> None:
    db, writer = long_conversation(tmp_path)
    writer.close(checkpoint=True)
    steps = ConversationSteps(db)
    assert steps.refresh()
    assert rendered == []  # hosting it, and GetConversationMetadata, render nothing
    assert len(steps) == TURNS * STEPS_PER_TURN
    last = steps.indices()[-2:]
    assert [i for i, _ in steps.rendered(last)] == last  # a poll from a late stepOffset
    assert len(rendered) == 2
    steps.rendered(last)
    assert len(rendered) == 2  # rendered once while unchanged
    assert steps.last_user_input_index() == (TURNS - 1) * STEPS_PER_TURN
    assert steps.title() == "" and len(rendered) == 2  # no checkpoint: GetAllCascadeTrajectories
    steps.close()


def test_after_the_first_read_only_the_current_turn_is_read_again(tmp_path: Path) -> None:
    db, writer = long_conversation(tmp_path)
    steps = ConversationSteps(db)
    steps.refresh()
    versions = {i: steps.version(i) for i in steps.indices()}
    read: list[int] = []
    real = ConversationSteps._read_rows

    def counting(conn: Any, start: int = 0) -> Any:
        rows = real(conn, start)
        read.append(len(rows))
        return rows

    steps._read_rows = counting  # type: ignore[method-assign]
    for step in bulk._turn(TURNS, 200):  # one more turn, as agy appends it
        writer.append(step)
    writer.close(checkpoint=True)
    assert steps.refresh()
    # Read again: the last earlier turn (from its user input) and the new turn, not 6,000 rows.
    assert read and read[-1] <= 2 * STEPS_PER_TURN, read
    assert len(steps) == (TURNS + 1) * STEPS_PER_TURN
    replaced = [i for i, v in versions.items() if steps.version(i) is not v]
    assert replaced == []  # earlier rows keep their version object (identity answers)
    steps.close()
