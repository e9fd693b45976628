"""Row, RPC JSON and stream-json decoders against the real captures in ../shared/reference."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from agy_provider.agy.rows import decode_step_row
from agy_provider.agy.rpcjson import decode_json_step
from agy_provider.agy.step import InteractionKind
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import StepStatus
from agy_provider.agy.step import StepUsage
from agy_provider.agy.step import TurnOutcome
from agy_provider.agy.streamjson import StreamJsonDecoder
from agy_provider.errors import DecodeError


def payload(reference: Path, name: str) -> bytes:
    return (reference / "sqlite-payloads" / name).read_bytes()


def test_real_user_and_assistant_pong(reference: Path) -> None:
    user = decode_step_row(
        0, 14, 3, payload(reference, "agy-1.1.23_witness_step14_user_PONG.step_payload.bin")
    )
    assert user.kind is StepKind.USER
    assert user.text == "Reply with exactly: PONG"
    assert user.conversation_id == "8724cd98-6b07-4080-82d3-1c617be236bf"
    answer = decode_step_row(
        1, 15, 3, payload(reference, "agy-1.1.23_witness_step15_assistant_PONG.step_payload.bin")
    )
    assert answer.kind is StepKind.ASSISTANT
    assert answer.status is StepStatus.DONE
    assert answer.text == "PONG"
    assert answer.thinking == ""
    assert answer.usage == StepUsage(input=13901, output=2)
    assert answer.stop_reason == "stop_pattern"
    assert answer.conversation_id == user.conversation_id
    assert answer.final


def test_real_generic_run_command(reference: Path) -> None:
    step = decode_step_row(
        2, 132, 3, payload(reference, "agy-1.1.23_witness_step132_run_command.step_payload.bin")
    )
    assert step.kind is StepKind.TOOL
    assert step.tool is not None
    assert step.tool.name == "run_command"
    assert step.tool.arguments["CommandLine"] == "printenv ANTIGRAVITY_SESSION_ID"
    assert step.result is not None
    assert step.result.exit_code == 0
    assert step.result.output.strip() == "witness-session-abc123"
    assert not step.result.is_error


def test_real_1_0_16_user(reference: Path) -> None:
    step = decode_step_row(
        0, 14, 3, payload(reference, "agy-1.0.16_txcript_step14_user.step_payload.bin")
    )
    assert step.kind is StepKind.USER
    assert step.text == "Fix the flaky test"


def test_prefix_only_blob_is_a_clean_decode_error(reference: Path) -> None:
    blob = payload(reference, "agy-1.1.9_transcript_step15_planner.PREFIX_ONLY.bin")
    with pytest.raises(DecodeError, match="truncated"):
        decode_step_row(27, 15, 3, blob)
    for cut in range(1, len(blob)):
        with contextlib.suppress(DecodeError):
            decode_step_row(27, 15, 3, blob[:cut])


def test_empty_planner_placeholder_is_not_final() -> None:
    step = decode_step_row(5, 15, 3, None)
    assert step.kind is StepKind.ASSISTANT
    assert not step.final


def rpc(reference: Path, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((reference / "rpc-steps" / name).read_text())
    return data


def test_every_rpc_step_maps(reference: Path) -> None:
    files = sorted((reference / "rpc-steps").glob("*.json"))
    assert files
    for path in files:
        step = decode_json_step(json.loads(path.read_text()))
        assert step.kind is not StepKind.UNKNOWN, path.name


def test_rpc_planner_text(reference: Path) -> None:
    step = decode_json_step(rpc(reference, "planner_response_text.json"))
    assert step.kind is StepKind.ASSISTANT
    assert step.index == 2
    assert step.text.startswith("Hello! I am Antigravity")
    assert step.usage == StepUsage(input=17161, output=65)


def test_rpc_run_command_done(reference: Path) -> None:
    step = decode_json_step(rpc(reference, "run_command_done.json"))
    assert step.kind is StepKind.TOOL
    assert step.index == 6
    assert step.tool is not None and step.tool.name == "run_command"
    assert step.tool.arguments["CommandLine"] == "pwd"
    assert step.result is not None
    assert step.result.exit_code == 0
    assert step.result.output == "/Users/bryanli/.gemini/antigravity-cli/scratch\n"
    assert step.interaction is None  # only meaningful while WAITING


def test_rpc_waiting_permission(reference: Path) -> None:
    step = decode_json_step(rpc(reference, "run_command_waiting.json"))
    assert step.status is StepStatus.WAITING
    assert step.interaction is not None
    assert step.interaction.kind is InteractionKind.PERMISSION
    assert step.interaction.permission is not None
    assert step.interaction.permission.action == "command"
    assert step.interaction.permission.target == "pwd"
    assert step.result is None


def test_rpc_waiting_question(reference: Path) -> None:
    step = decode_json_step(rpc(reference, "ask_question_waiting.json"))
    assert step.interaction is not None
    assert step.interaction.kind is InteractionKind.QUESTION
    (question,) = step.interaction.questions
    assert question.question.startswith("What type of project")
    assert [o.id for o in question.options] == ["1", "2", "3", "4"]


def test_rpc_error_step(reference: Path) -> None:
    step = decode_json_step(rpc(reference, "run_command_error.json"))
    assert step.status is StepStatus.ERROR
    assert step.result is not None and step.result.is_error


def test_rpc_stream_shapes_without_tool_calls(reference: Path) -> None:
    run = decode_json_step(rpc(reference, "stream_run_command_done.json"))
    assert run.tool is not None and run.tool.name == "run_command"
    assert run.tool.arguments["CommandLine"] == "git status && git log -n 5 --oneline"
    assert run.result is not None and run.result.exit_code == 0
    view = decode_json_step(rpc(reference, "stream_view_file_done.json"))
    assert view.tool is not None and view.tool.name == "view_file"
    assert view.tool.arguments["AbsolutePath"].endswith("/package.json")
    listing = decode_json_step(rpc(reference, "stream_list_directory_done.json"))
    assert listing.tool is not None and listing.tool.name == "list_dir"
    assert ".gitignore" in listing.result.output  # type: ignore[union-attr]
    planner = decode_json_step(rpc(reference, "stream_planner_tool_call.json"))
    assert planner.kind is StepKind.ASSISTANT and planner.requested_tool_calls == ()
    generic = decode_json_step(rpc(reference, "stream_generic_done.json"))
    assert generic.tool is not None and generic.tool.name == "manage_subagents"
    assert generic.tool.arguments == {"Action": "list"}


def test_rpc_checkpoint_and_history(reference: Path) -> None:
    checkpoint = decode_json_step(rpc(reference, "checkpoint.json"))
    assert checkpoint.kind is StepKind.CHECKPOINT
    assert checkpoint.title == "Friendly Greeting Request"
    history = decode_json_step(rpc(reference, "conversation_history.json"))
    assert history.kind is StepKind.HISTORY
    user = decode_json_step(rpc(reference, "user_input.json"))
    assert user.kind is StepKind.USER and user.index == 0
    assert user.text == "Say hello in one short sentence."


def test_stream_json_capture(reference: Path) -> None:
    decoder = StreamJsonDecoder()
    results = []
    for line in (
        (reference / "stream-json" / "agy-1.1.17-print-denied-command.ndjson")
        .read_text()
        .splitlines()
    ):
        results.append(decoder.feed(json.loads(line)))
    assert decoder.conversation_id == "4df4b685-e326-4498-b423-4732961ac2e4"
    outcome = results[-1]
    assert isinstance(outcome, TurnOutcome)
    assert not outcome.ok
    assert "user denied permission" in outcome.error
    assert outcome.usage == StepUsage(input=44909, output=610)


def test_stream_json_text_deltas_accumulate() -> None:
    decoder = StreamJsonDecoder()
    decoder.feed({"event": "init", "conversation_id": "c"})
    first = decoder.feed(
        {
            "event": "step_update",
            "step_update": {
                "step_index": 1,
                "state": "ACTIVE",
                "step_type": "agent_response",
                "text_delta": "Hel",
            },
        }
    )
    second = decoder.feed(
        {
            "event": "step_update",
            "step_update": {
                "step_index": 1,
                "state": "DONE",
                "step_type": "agent_response",
                "text_delta": "lo",
            },
        }
    )
    assert first.text == "Hel" and first.status is StepStatus.GENERATING  # type: ignore[union-attr]
    assert second.text == "Hello" and second.status is StepStatus.DONE  # type: ignore[union-attr]
    with pytest.raises(DecodeError):
        decoder.feed({"event": "step_update", "step_update": {"state": "DONE"}})
    with pytest.raises(DecodeError):
        decoder.feed({"event": "mystery"})
