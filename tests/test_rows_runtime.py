"""Rows as Google's agent runtime (localharness) writes them (AGY-FORMATS §6), decoded and rendered.

Each row is built with the real schema (`../shared/reference/schema`), independent of our
walker, in the exact shape the runtime wrote it in tests/test_real_writer.py's scenarios. These
run without the runtime's wheel; the real-writer tier proves the shapes on the runtime itself.
"""

from __future__ import annotations

import sqlite3
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from agy_provider.agy.rows import MAX_REQUESTED_TOOL_CALLS
from agy_provider.agy.rows import GeneratorRecord
from agy_provider.agy.rows import decode_generator_record
from agy_provider.agy.rows import decode_step_row
from agy_provider.agy.rows import model_of_turn
from agy_provider.agy.step import Step
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import StepStatus
from agy_provider.assembly.assembler import StepAssembler
from agy_provider.assembly.tool_runs import render_tool_run
from agy_provider.offline.replay import load_recording
from agy_provider.offline.replay import replay
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent

sim_support = pytest.importorskip("sim_support")

CID = "0123456789abcdef0123456789abcdef"  # the runtime's ids: 32 hex digits, no dashes
WS = "/work/space"


@pytest.fixture(autouse=True)
def _schema(reference: Path) -> None:
    """Every test here builds rows with the real schema, so it needs ../shared/reference."""


def step(index: int, body: dict[str, Any], **meta: Any) -> Any:
    """A gemini_coder.Step message as the runtime writes it (metadata always set)."""
    metadata = {
        "executionId": CID,
        "sourceTrajectoryStepInfo": {"trajectoryId": CID, "stepIndex": index, "cascadeId": CID},
        **meta,
    }
    message = sim_support.real_class("gemini_coder.Step")()
    json_format.ParseDict({**body, "metadata": metadata}, message)
    return message


def decode(index: int, message: Any, *, error_details: bytes | None = None) -> Step:
    type_number = message.type
    status = message.status
    return decode_step_row(
        index,
        type_number,
        status,
        message.SerializeToString(),
        metadata=message.metadata.SerializeToString(),
        error_details=error_details,
    )


def tool_call(name: str, **args: Any) -> dict[str, Any]:
    import json

    return {"id": f"call-{name}", "name": name, "argumentsJson": json.dumps(args)}


def tool_row(index: int, kind: str, field: str, value: dict[str, Any], call: dict[str, Any],
             status: str = "DONE") -> Step:
    message = step(
        index,
        {"type": f"CORTEX_STEP_TYPE_{kind}", "status": f"CORTEX_STEP_STATUS_{status}", field: value},
        toolCall=call,
    )
    return decode(index, message)


def test_list_directory_entries_are_the_result() -> None:
    s = tool_row(
        2,
        "LIST_DIRECTORY",
        "listDirectory",
        {
            "directoryPathUri": f"file://{WS}",
            "results": [
                {"name": "notes.txt", "sizeBytes": "11"},
                {"name": "src", "isDir": True, "numChildren": 1},
            ],
        },
        tool_call("list_dir", DirectoryPath=WS),
    )
    assert s.kind is StepKind.TOOL and s.result is not None
    assert s.result.output == "notes.txt (11 bytes)\nsrc/"
    assert render_tool_run(s) == f"▸ list_dir {WS}\n  notes.txt (11 bytes)\n  src/\n"


def test_code_action_shows_the_recorded_diff_once() -> None:
    lines = [
        {"text": "alpha", "type": "UNIFIED_DIFF_LINE_TYPE_UNCHANGED"},
        {"text": "beta", "type": "UNIFIED_DIFF_LINE_TYPE_DELETE"},
        {"text": "gamma", "type": "UNIFIED_DIFF_LINE_TYPE_INSERT"},
        {"type": "UNIFIED_DIFF_LINE_TYPE_UNCHANGED"},
    ]
    s = tool_row(
        8,
        "CODE_ACTION",
        "codeAction",
        {
            "actionResult": {
                "edit": {
                    "diff": {"unifiedDiff": {"lines": lines}},
                    "absoluteUri": f"file://{WS}/notes.txt",
                }
            },
            "description": "Rename beta",
        },
        tool_call(
            "replace_file_content",
            TargetFile=f"{WS}/notes.txt",
            TargetContent="beta",
            ReplacementContent="gamma",
        ),
    )
    assert s.result is not None and s.result.output == " alpha\n-beta\n+gamma"
    rendered = render_tool_run(s)
    assert rendered == f"▸ replace_file_content {WS}/notes.txt\n   alpha\n  -beta\n  +gamma\n"


def test_code_action_without_metadata_names_its_file() -> None:
    message = step(
        4,
        {
            "type": "CORTEX_STEP_TYPE_CODE_ACTION",
            "status": "CORTEX_STEP_STATUS_DONE",
            "codeAction": {"actionResult": {"edit": {"absoluteUri": f"file://{WS}/a.py"}}},
        },
    )
    s = decode(4, message)
    assert s.tool is not None and s.tool.arguments == {"TargetFile": f"{WS}/a.py"}


def test_mcp_tool_is_named_by_server_and_tool_with_its_result() -> None:
    s = tool_row(
        2,
        "MCP_TOOL",
        "mcpTool",
        {
            "serverName": "inventory",
            "toolCall": {"id": "c1", "name": "lookup", "argumentsJson": '{"key":"widgets"}'},
            "resultString": "inventory[widgets] = 42 widgets",
        },
        tool_call("mcp_inventory_lookup", key="widgets"),
    )
    assert s.tool is not None and s.tool.name == "inventory/lookup"
    assert s.tool.arguments == {"key": "widgets"}
    assert render_tool_run(s) == "▸ inventory/lookup widgets\n  inventory[widgets] = 42 widgets\n"


def test_invoke_subagent_names_the_child_conversation() -> None:
    child = "fedcba9876543210fedcba9876543210"
    s = tool_row(
        2,
        "INVOKE_SUBAGENT",
        "invokeSubagent",
        {
            "subagents": [
                {"typeName": "research", "role": "Codebase Researcher", "initialPrompt": "say hi"}
            ],
            "results": [{"conversationId": child, "logAbsoluteUri": "file:///x/transcript.jsonl"}],
        },
        tool_call(
            "invoke_subagent",
            Subagents=[{"TypeName": "research", "Role": "Codebase Researcher", "Prompt": "say hi"}],
            toolSummary="Delegating",
        ),
    )
    assert s.result is not None and s.result.output == f"child conversation {child}"
    assert render_tool_run(s) == (
        f"▸ invoke_subagent Codebase Researcher: say hi\n  child conversation {child}\n"
    )


def _any(url: str, fields: dict[int, str]) -> dict[str, Any]:
    value = b"".join(
        bytes([number << 3 | 2, len(text.encode())]) + text.encode()
        for number, text in fields.items()
    )
    return {"type_url": url, "value": value}


@pytest.mark.parametrize(
    ("response", "output", "is_error"),
    [
        ({2: '{"result": 3}'}, "3", False),
        ({2: '{"result": "three"}'}, "three", False),
        ({2: '{"words": 3}'}, '{"words": 3}', False),
        ({5: "tool raised ValueError"}, "tool raised ValueError", True),
    ],
)
def test_agency_tool_call_is_rendered_with_its_answer(
    response: dict[int, str], output: str, is_error: bool
) -> None:
    message = step(
        2,
        {
            "type": "CORTEX_STEP_TYPE_AGENCY_TOOL_CALL",
            "status": "CORTEX_STEP_STATUS_DONE",
            "agencyToolCall": {"functionName": "count_words"},
        },
        toolCall=tool_call("count_words", text="one two three"),
    )
    call = _any(
        "type.googleapis.com/antigravity.localharness.ToolCall",
        {1: "c1", 2: "count_words", 3: '{"text":"one two three"}'},
    )
    message.agency_tool_call.request_messages.add(**call)
    answer = _any("type.googleapis.com/antigravity.localharness.ToolResponse", response)
    message.agency_tool_call.response_messages.add(**answer)
    s = decode(2, message)
    assert s.kind is StepKind.TOOL and s.tool is not None and s.tool.name == "count_words"
    assert s.result is not None and (s.result.output, s.result.is_error) == (output, is_error)
    # Without metadata the call comes from the body (116.2 and the request's arguments JSON).
    message.ClearField("metadata")
    bare = decode(2, message)
    assert bare.tool is not None and bare.tool.name == "count_words"
    assert bare.tool.arguments == {"text": "one two three"}


GO_TRACE = (
    "\n(1) attached stack trace\n  -- stack trace:\n  | google3/third_party/gemini_coder/framework/"
    "executor/agentexecutor/agentexecutor.(*AgentExecutor).Run\n  | \tagentexecutor.go:353"
)
QUOTA = (
    "Error 429, Message: Resource has been exhausted (e.g. check quota)., "
    "Status: RESOURCE_EXHAUSTED, Details: []"
)


@pytest.mark.parametrize(
    ("user", "short"),
    [
        ("Encountered retryable error from model provider: Agent execution terminated due to "
         "error.", f"{QUOTA}: {QUOTA}"),
        ("Agent execution terminated due to error.",
         f"agent executor error: model unreachable: {QUOTA}: {QUOTA}"),
    ],
)
def test_provider_error_is_named_by_its_short_error(user: str, short: str) -> None:
    """Google's runtime: a generic user message, the cause in the short error, a Go trace after."""
    details = {"userErrorMessage": user, "shortError": short, "fullError": short + GO_TRACE}
    message = step(
        1,
        {
            "type": "CORTEX_STEP_TYPE_ERROR_MESSAGE",
            "status": "CORTEX_STEP_STATUS_DONE",
            "errorMessage": {"error": details, "shouldShowUser": True},
        },
        source="CORTEX_STEP_SOURCE_SYSTEM",
    )
    s = decode(1, message)
    assert s.kind is StepKind.ERROR and s.status is StepStatus.DONE
    assert s.error == (
        "Error 429, Message: Resource has been exhausted (e.g. check quota)., "
        "Status: RESOURCE_EXHAUSTED"
    )
    asm = StepAssembler(model="m", turn_start=-1)
    events = asm.feed([s])
    assert asm.has_failure() and not any(e.type.endswith("delta") for e in events)


def test_agys_own_error_message_is_kept() -> None:
    """agy words its quota error for people: no provider cause to dig out, the user message wins."""
    details = {
        "userErrorMessage": "You have exhausted your capacity. Your quota will reset after 2h.",
        "shortError": "RESOURCE_EXHAUSTED (code 429): You have exhausted your capacity.",
        "fullError": "RESOURCE_EXHAUSTED (code 429)" + GO_TRACE,
    }
    message = step(
        3,
        {"type": "CORTEX_STEP_TYPE_ERROR_MESSAGE", "status": "CORTEX_STEP_STATUS_DONE",
         "errorMessage": {"error": details}},
    )
    assert decode(3, message).error == details["userErrorMessage"]


def test_only_a_full_error_shows_its_first_line() -> None:
    message = step(
        3,
        {"type": "CORTEX_STEP_TYPE_ERROR_MESSAGE", "status": "CORTEX_STEP_STATUS_DONE",
         "errorMessage": {"error": {"fullError": "disk full" + GO_TRACE}}},
    )
    assert decode(3, message).error == "disk full"


def _denied(index: int) -> Step:
    details = {
        "userErrorMessage": "denied by the test",
        "shortError": "denied by pre-tool hook: denied by the test",
        "fullError": "denied by pre-tool hook: denied by the test",
        "isBenign": True,
    }
    message = step(
        index,
        {
            "type": "CORTEX_STEP_TYPE_ERROR_MESSAGE",
            "status": "CORTEX_STEP_STATUS_ERROR",
            "errorMessage": {"error": details, "shouldShowModel": True, "shouldShowUser": True},
            "error": details,
        },
        toolCall=tool_call("run_command", CommandLine="echo secret"),
    )
    error_details = sim_support.real_class("exa.cortex_pb.CortexErrorDetails")()
    json_format.ParseDict(details, error_details)
    return decode(index, message, error_details=error_details.SerializeToString())


def planner(index: int, text: str = "", status: str = "DONE", **extra: Any) -> Step:
    body: dict[str, Any] = {"stopReason": "STOP_REASON_STOP_PATTERN", **extra}
    if text:
        body |= {"response": text, "modifiedResponse": text}
    message = step(
        index,
        {"type": "CORTEX_STEP_TYPE_PLANNER_RESPONSE", "status": f"CORTEX_STEP_STATUS_{status}",
         "plannerResponse": body},
        source="CORTEX_STEP_SOURCE_MODEL",
    )
    return decode(index, message)


def test_benign_denied_tool_is_visible_and_the_turn_goes_on() -> None:
    denied = _denied(2)
    assert denied.kind is StepKind.TOOL and denied.status is StepStatus.ERROR
    assert denied.error == "denied by pre-tool hook: denied by the test"
    assert render_tool_run(denied) == (
        "▸ run_command echo secret\n  not run: denied by pre-tool hook: denied by the test\n"
    )
    asm = StepAssembler(model="m", turn_start=-1)
    calls = [tool_call("run_command", CommandLine="echo secret")]
    events = asm.feed([planner(1, toolCalls=calls), denied, planner(3, "Not allowed.")])
    events += asm.finish()
    assert events[-1].type == "done"
    message = events[-1].message
    assert [type(b) for b in message.content] == [ThinkingContent, TextContent]
    assert "not run: denied" in message.content[0].thinking  # type: ignore[union-attr]


def test_cancelled_command_has_no_exit_code() -> None:
    s = tool_row(
        2,
        "RUN_COMMAND",
        "runCommand",
        {"commandLine": "sleep 30", "cwd": WS, "blocking": True},
        tool_call("run_command", CommandLine="sleep 30"),
        status="CANCELED",
    )
    assert s.status is StepStatus.CANCELED and s.final
    assert s.result is not None and s.result.exit_code is None
    assert render_tool_run(s) == "▸ run_command sleep 30\n  canceled\n"


def test_command_output_with_crlf_renders_clean_lines() -> None:
    s = tool_row(
        2,
        "RUN_COMMAND",
        "runCommand",
        {"commandLine": "echo boom; exit 1", "exitCode": 1, "combinedOutput": {"full": "boom\r\n"}},
        tool_call("run_command", CommandLine="echo boom; exit 1"),
    )
    assert render_tool_run(s) == "▸ run_command echo boom; exit 1\n  exit 1\n  boom\n"


def test_planner_without_placeholder_grows_from_its_first_chunk() -> None:
    """No empty placeholder: the row appears at GENERATING with its first chunk (20.1 = 20.8)."""
    asm = StepAssembler(model="m", turn_start=-1)
    events = asm.feed([planner(1, "Hel", status="GENERATING")])
    events += asm.feed([planner(1, "Hello", status="GENERATING")])
    events += asm.feed([planner(1, "Hello", status="GENERATING")])
    events += asm.feed([planner(1, "Hello world", status="DONE")])
    deltas = [e.delta for e in events if e.type == "text_delta"]
    assert deltas == ["Hel", "lo", " world"]


def test_tool_call_only_reply_stays_open_until_done() -> None:
    """A row can sit at GENERATING with only a stop reason; it is not final until it settles."""
    generating = planner(1, status="GENERATING")
    assert generating.kind is StepKind.ASSISTANT and not generating.final
    calls = [tool_call("run_command", CommandLine="ls")]
    assert planner(1, status="DONE", toolCalls=calls).final


def test_requested_tool_calls_of_a_huge_row_cost_bounded_memory() -> None:
    """A 5 MB planner row of repeated tool calls decodes in memory far below its own size."""

    def payload(count: int) -> bytes:
        calls = [tool_call("run_command", CommandLine=f"echo {n}", Cwd=WS) for n in range(count)]
        body = {"response": "ok", "toolCalls": calls}
        message = step(1, {"type": "CORTEX_STEP_TYPE_PLANNER_RESPONSE",
                           "status": "CORTEX_STEP_STATUS_DONE", "plannerResponse": body})
        return bytes(message.SerializeToString())

    peaks = []
    for count in (12_000, 60_000):  # ~1 MB and ~5 MB
        data = payload(count)
        tracemalloc.start()
        s = decode_step_row(1, 15, 3, data)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert len(s.requested_tool_calls) == MAX_REQUESTED_TOOL_CALLS
        assert s.requested_tool_calls[0].arguments["CommandLine"] == "echo 0"
        peaks.append((len(data), peak))
    (_, small_peak), (big, big_peak) = peaks
    assert big > 4_000_000
    # Bounded: well under the row's own size, and not growing with it.
    assert big_peak < big / 10, peaks
    assert big_peak < small_peak * 2, peaks


def test_generator_record_gives_the_model_and_the_steps_it_wrote() -> None:
    record = sim_support.real_class("exa.cortex_pb.CortexStepGeneratorMetadata")()
    json_format.ParseDict(
        {
            "stepIndices": [1, 2],
            "executionId": CID,
            "chatModel": {"responseModel": "gemini-x-001", "modelDisplayName": "gemini-x"},
        },
        record,
    )
    decoded = decode_generator_record(record.SerializeToString())
    assert decoded.step_indices == (1, 2) and decoded.execution_id == CID
    assert (decoded.slug, decoded.name, decoded.model) == ("gemini-x-001", "gemini-x", "gemini-x-001")
    record.chat_model.ClearField("response_model")  # a server that names no model version
    assert decode_generator_record(record.SerializeToString()).model == "gemini-x"


def test_turns_split_by_user_rows_under_one_execution_id(tmp_path: Path) -> None:
    """The runtime writes the conversation id as every turn's execution id: turns still split."""
    db = tmp_path / f"{CID}.db"
    rows = []
    for turn, (question, answer) in enumerate([("one?", "First."), ("two?", "Second.")]):
        user = step(
            turn * 2,
            {"type": "CORTEX_STEP_TYPE_USER_INPUT", "status": "CORTEX_STEP_STATUS_DONE",
             "userInput": {"userResponse": question, "items": [{"text": question}]}},
        )
        rows.append((turn * 2, user))
        reply = step(
            turn * 2 + 1,
            {"type": "CORTEX_STEP_TYPE_PLANNER_RESPONSE", "status": "CORTEX_STEP_STATUS_DONE",
             "plannerResponse": {"response": answer, "modifiedResponse": answer}},
            modelUsage={"inputTokens": "10", "outputTokens": "5"},
        )
        rows.append((turn * 2 + 1, reply))
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE steps(idx INTEGER PRIMARY KEY, step_type INTEGER NOT NULL DEFAULT 0, "
            "status INTEGER NOT NULL DEFAULT 0, metadata BLOB, error_details BLOB, "
            "step_payload BLOB)"
        )
        conn.execute("CREATE TABLE trajectory_meta(trajectory_id TEXT PRIMARY KEY, "
                     "cascade_id TEXT, trajectory_type INTEGER, source INTEGER)")
        conn.execute("INSERT INTO trajectory_meta VALUES (?, ?, 4, 0)", (CID, CID))
        for idx, message in rows:
            conn.execute(
                "INSERT INTO steps VALUES (?, ?, ?, ?, NULL, ?)",
                (idx, message.type, message.status, message.metadata.SerializeToString(),
                 message.SerializeToString()),
            )
    conn.close()
    with load_recording(str(db)) as recording:
        assert recording.conversation_id == CID
        turns = list(replay(recording, "all"))
    answers = [
        "".join(b.text for b in t.message.content if isinstance(b, TextContent)) for t in turns
    ]
    assert answers == ["First.", "Second."]
    assert [t.message.usage.input for t in turns] == [10, 10]


def test_model_of_turn_follows_the_steps_each_call_wrote() -> None:
    records = [
        GeneratorRecord(step_indices=(1, 2), execution_id=CID, slug="a-001", name="a"),
        GeneratorRecord(step_indices=(3,), execution_id=CID, slug="", name="a"),
        GeneratorRecord(step_indices=(5,), execution_id=CID, slug="b-001", name="b"),
        GeneratorRecord(step_indices=(), execution_id=CID, slug="c-001", name="c"),
    ]
    # One execution id for every turn: only the step indices tell the turns' models apart.
    assert model_of_turn(records, after=0, before=4) == "a"
    assert model_of_turn(records, after=4) == "b-001"
    assert model_of_turn(records, after=5) == ""
