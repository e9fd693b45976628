"""agy's stream-json `result`: one reading (agy/result.py), the same words live and in replay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agy_provider.agy.result import AgyResult
from agy_provider.agy.result import read_result
from agy_provider.agy.step import StepUsage
from agy_provider.agy.step import TurnOutcome
from agy_provider.agy.streamjson import StreamJsonDecoder
from agy_provider.agy.verdict import exit_verdict
from agy_provider.offline.replay import load_recording
from agy_provider.offline.replay import replay
from agy_provider.pi.events import ErrorEvent

CID = "c3b66b04-872b-4fbe-a3a4-058a026ef20a"
QUOTA_WORDS = "Individual quota reached. Upgrade your plan for more. Resets in 120h9m43s."
DENIED = [{"action": "command", "display_name": "RunCommand"}]


def replayed_error(tmp_path: Path, result: dict[str, Any]) -> str:
    """The error a replay of a stream-json capture ending in `result` gives the host."""
    lines = [
        {"event": "init", "conversation_id": CID, "init": {"permission_mode": "default"}},
        {"event": "step_update", "step_update": {"step_index": 0, "step_type": "user_input"}},
        {"event": "result", "result": {"conversation_id": CID, **result}},
    ]
    path = tmp_path / "turn.ndjson"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    with load_recording(path) as recording:
        [turn] = list(replay(recording))
    final = turn.events[-1]
    assert isinstance(final, ErrorEvent)
    return final.error.error_message or ""


@pytest.mark.parametrize(
    "result",
    [
        {"status": "SUCCESS", "response": "", "num_turns": 1, "denied_actions": DENIED},
        {"status": "ERROR", "response": "", "error": QUOTA_WORDS, "num_turns": 0},
        {
            "status": "RESOURCE_EXHAUSTED",
            "error": {"type": "QUOTA", "message": QUOTA_WORDS},
            "num_turns": 0,
        },
        {"status": "ERROR", "response": "", "num_turns": 1},
        {"status": "CANCELED", "response": "", "num_turns": 1},
    ],
    ids=["denied", "quota", "quota-object", "bare-error", "canceled-without-stderr"],
)
def test_the_live_verdict_and_replay_word_a_result_alike(
    tmp_path: Path, result: dict[str, Any]
) -> None:
    live = exit_verdict(0, stderr="", stdout="", result=result)
    assert not live.ok and live.error
    assert replayed_error(tmp_path, result) == live.error
    [decoded] = [i for i in StreamJsonDecoder().feed_event(result) if isinstance(i, TurnOutcome)]
    assert (decoded.ok, decoded.error, decoded.quota) == (live.ok, live.error, live.quota)


def test_the_wording_is_the_live_paths() -> None:
    denied = exit_verdict(
        0, stderr="", stdout="", result={"status": "SUCCESS", "denied_actions": DENIED}
    )
    assert denied.error.startswith("agy was denied permission to act: RunCommand. Allow it")
    quota = exit_verdict(0, stderr="", stdout="", result={"status": "ERROR", "error": QUOTA_WORDS})
    assert (
        quota.error == f"agy ended the turn with ERROR: {QUOTA_WORDS} (the quota resets in 120h09m)"
    )
    assert quota.quota is not None


def test_a_canceled_turn_names_agys_stderr_reason_alike() -> None:
    stderr = "run_command was auto-denied: no permission in print mode"
    result = {"status": "CANCELED", "response": "", "num_turns": 1}
    live = exit_verdict(0, stderr=stderr, stdout="", result=result)
    decoder = StreamJsonDecoder()
    decoder.note_stderr(stderr)
    [replayed] = [i for i in decoder.feed_event(result) if isinstance(i, TurnOutcome)]
    assert replayed.error == live.error == f"agy ended the turn with CANCELED: CANCELED: {stderr}"


def test_a_successful_result_is_a_success_both_ways(tmp_path: Path) -> None:
    result = {"status": "SUCCESS", "response": "Hello.", "num_turns": 1}
    assert exit_verdict(0, stderr="", stdout="", result=result) == TurnOutcome()
    [decoded] = [i for i in StreamJsonDecoder().feed_event(result) if isinstance(i, TurnOutcome)]
    assert decoded.ok and not decoded.error


def test_read_result_reads_every_field_leniently() -> None:
    body = {
        "conversation_id": CID,
        "status": "success",
        "response": "Hi.",
        "error": None,
        "num_turns": 2,
        "duration_seconds": 1.5,
        "usage": {"input_tokens": 10, "output_tokens": 3},
        "denied_actions": [*DENIED, {"action": "edit"}, "raw"],
    }
    read = read_result(body)
    assert (read.status, read.response, read.error, read.num_turns) == ("SUCCESS", "Hi.", "", 2)
    assert read.duration_seconds == 1.5 and read.conversation_id == CID
    assert isinstance(read.total_usage, StepUsage) and read.total_usage.input == 10
    assert read.denied_actions == ("RunCommand", "edit", "raw")
    assert read.succeeded and not read.canceled
    odd = read_result({"status": ["x"], "num_turns": "3", "duration_seconds": float("nan")})
    assert odd == AgyResult()
