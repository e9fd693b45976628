"""The turn engine's interactions: answers over the control channel, stale answers, re-asks, cancel."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from waiting import wait_until

from agy_provider.sim import descriptors as pb
from agy_provider.sim.control import ServerLink
from agy_provider.sim.engine import Clock
from agy_provider.sim.engine import Simulator
from agy_provider.sim.engine import TurnResult
from agy_provider.sim.scenario import load_scenario
from agy_provider.sim.state import AppState


def _start(
    tmp_path: Path, scenario: str, speed: float = 1
) -> tuple[Simulator, Any, list[TurnResult], threading.Thread, list[tuple[int, Any]]]:
    sim = Simulator(load_scenario(scenario), tmp_path, clock=Clock(speed=speed))
    conversation = sim.open()
    seen: list[tuple[int, Any]] = []
    sim.listeners.append(lambda cid, index, step: seen.append((index, _copy(step))))
    results: list[TurnResult] = []
    thread = threading.Thread(target=lambda: results.append(sim.run_turn(conversation, "go")))
    thread.start()
    return sim, conversation, results, thread, seen


def _copy(step: Any) -> Any:
    clone = pb.Step()
    clone.CopyFrom(step)
    return clone


def test_permission_answered_over_the_control_channel(tmp_path: Path) -> None:
    sim, _conversation, results, thread, seen = _start(tmp_path, "permission")
    link = ServerLink(
        sim, AppState(tmp_path / "app"), csrf_token=None, log_file=None, run_message=lambda *a: None
    )
    wait_until(lambda: sim._waiting is not None, "the turn waits for an answer")
    cid, index, _kind = sim._waiting  # type: ignore[misc]
    waiting = [s for i, s in seen if i == index][-1]
    assert waiting.status == 9 and waiting.requested_interaction.permission.resource.target == "pwd"
    stale = link._dispatch(
        "interaction", {"id": cid, "stepIndex": index + 5, "permission": {"allow": True}}
    )
    assert stale == {"ok": False, "error": f"input not registered for step {index + 5}"}
    assert link._dispatch(
        "interaction", {"id": cid, "stepIndex": index, "permission": {"allow": True}}
    ) == {"ok": True}
    thread.join()
    final = [s for i, s in seen if i == index][-1]
    assert final.status == 3 and final.completed_interactions[0].response.permission.allow
    assert final.generic.result.result.startswith("\nThe command exited with code 0.")
    assert results[0].status == "SUCCESS"


def test_question_answer_is_recorded(tmp_path: Path) -> None:
    sim, _conversation, _results, thread, seen = _start(tmp_path, "question")
    wait_until(lambda: sim._waiting is not None, "the turn waits for an answer")
    cid, index, kind = sim._waiting  # type: ignore[misc]
    assert kind == "askQuestion"
    ok, _ = sim.answer(
        cid, index, {"askQuestion": {"responses": [{"question": "q", "selectedOptionIds": ["3"]}]}}
    )
    assert ok
    thread.join()
    final = [s for i, s in seen if i == index][-1]
    assert final.type == 138 and final.status == 3
    assert list(final.ask_question.questions[0].selected_option_ids) == ["3"]
    assert [o.id for o in final.requested_interaction.ask_question.questions[0].options] == [
        "1",
        "2",
        "3",
    ]


def test_timed_out_permission_is_asked_again_at_a_higher_index(tmp_path: Path) -> None:
    _sim, _conversation, _results, thread, seen = _start(tmp_path, "permission-reask", speed=10)
    thread.join()
    tool_rows = sorted({i for i, s in seen if s.type == 132})
    assert len(tool_rows) == 2
    first, second = ([s for i, s in seen if i == n][-1] for n in tool_rows)
    assert first.status == 7 and second.status == 7  # both unanswered: re-asked once, then denied
    assert any(s.status == 9 for i, s in seen if i == tool_rows[1])
    assert "user denied permission" in second.error.full_error


def test_cancel_stops_running_work_but_not_a_waiting_step(tmp_path: Path) -> None:
    sim, conversation, results, thread, seen = _start(tmp_path, "slow")
    wait_until(lambda: any(i == 2 for i, _ in seen), "step 2 was written")
    sim.cancel(conversation.id, None)
    thread.join()
    assert results[0].status == "CANCELED"
    assert [s for i, s in seen if i == 2][-1].status == 6
    sim2, conversation2, _results2, thread2, _ = _start(tmp_path / "b", "permission", speed=4)
    wait_until(lambda: sim2._waiting is not None, "the turn waits for an answer")
    sim2.cancel(conversation2.id, None)
    assert sim2._waiting is not None and not sim2._cancel
    thread2.join()
