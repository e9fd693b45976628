"""The real-writer tier: Google's own agent runtime (localharness) writes the database.

Every scenario in `realwriter/scenarios.py` runs once (the whole module shares the runs): the
SDK's `Agent` drives localharness against our scripted Gemini server on loopback. Then replay of
the database it wrote must give the scenario's answer, tool blocks and outcome, and the live
sqlite source — which read the same database while the runtime was writing it — must have
streamed exactly what replay gives, nothing lost and nothing repeated.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Iterator

import pytest
from realwriter.gemini_server import ScriptedGemini
from realwriter.harness import RunResult
from realwriter.harness import harness_unavailable
from realwriter.harness import read_steps
from realwriter.harness import run_scenario
from realwriter.scenarios import SCENARIOS
from realwriter.scenarios import Expect

from agy_provider.agy.database import iter_generator_rows
from agy_provider.agy.database import open_conversation_db
from agy_provider.agy.rows import decode_generator_record
from agy_provider.agy.rows import model_of_turn
from agy_provider.agy.step import STATUS_TRANSITIONS
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import StepStatus
from agy_provider.offline.replay import ReplayedTurn
from agy_provider.offline.replay import load_recording
from agy_provider.offline.replay import replay
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.wire.protowire import Message

pytestmark = pytest.mark.slow

_UNAVAILABLE = harness_unavailable()
if _UNAVAILABLE:
    pytest.skip(f"real-writer tier skipped: {_UNAVAILABLE}", allow_module_level=True)

NAMES = [scenario.name for scenario, _ in SCENARIOS]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, RunResult]]:
    """Every scenario, run once against one scripted model server."""
    root = tmp_path_factory.mktemp("realwriter")
    server = ScriptedGemini().start()
    results: dict[str, RunResult] = {}

    async def run_all() -> None:
        for scenario, _ in SCENARIOS:
            try:
                results[scenario.name] = await run_scenario(scenario, server, root)
            except Exception as exc:  # recorded; the scenario's own tests report it
                results[scenario.name] = exc  # type: ignore[assignment]

    try:
        asyncio.run(run_all())
        yield results
    finally:
        server.close()


def _run(runs: dict[str, RunResult], name: str) -> RunResult:
    result = runs[name]
    if isinstance(result, BaseException):
        raise AssertionError(f"scenario {name} did not run: {result!r}") from result
    return result


def _expectations(name: str) -> list[Expect]:
    return next(expect for scenario, expect in SCENARIOS if scenario.name == name)


def _replayed(run: RunResult) -> list[ReplayedTurn]:
    with load_recording(str(run.db)) as recording:
        return list(replay(recording, "all"))


def _final(events: list[AssistantMessageEvent]) -> AssistantMessage:
    last = events[-1]
    if isinstance(last, DoneEvent):
        return last.message
    assert isinstance(last, ErrorEvent), f"a turn must end with done or error, not {last.type}"
    return last.error


def _texts(message: AssistantMessage) -> str:
    return "".join(b.text for b in message.content if isinstance(b, TextContent))


def _thinking(message: AssistantMessage) -> str:
    return "".join(b.thinking for b in message.content if isinstance(b, ThinkingContent))


def _fill(lines: list[str] | tuple[str, ...], run: RunResult) -> list[str]:
    return [line.replace("{ws}", str(run.workspace)) for line in lines]


@pytest.mark.parametrize("name", NAMES)
def test_replay_of_the_runtimes_database(runs: dict[str, RunResult], name: str) -> None:
    run = _run(runs, name)
    turns = _replayed(run)
    expect = _expectations(name)
    assert len(turns) == len(expect), f"{name}: turns in the database"
    for n, (turn, wanted) in enumerate(zip(turns, expect, strict=True), 1):
        message = _final(list(turn.events))
        assert _texts(message) == wanted.text, f"{name} turn {n}: answer"
        thinking = _thinking(message)
        assert wanted.thinking in thinking, f"{name} turn {n}: model thinking"
        position = 0
        for line in _fill(list(wanted.tools), run):
            found = thinking.find(line, position)
            assert found >= 0, f"{name} turn {n}: {line!r} (in order) not in:\n{thinking}"
            position = found + len(line)
        if wanted.error:
            assert message.stop_reason == "error", f"{name} turn {n}: must end in error"
            assert wanted.error in (message.error_message or "")
            for bad in wanted.not_in_error:
                assert bad not in (message.error_message or ""), f"{name}: {bad!r} shown"
        elif name != "rw-cancel":
            assert message.stop_reason == "stop", f"{name} turn {n}: {message.error_message}"


@pytest.mark.parametrize("name", NAMES)
def test_live_sqlite_source_streamed_what_replay_gives(
    runs: dict[str, RunResult], name: str
) -> None:
    run = _run(runs, name)
    turns = _replayed(run)
    assert len(run.live) == len(turns)
    for n, (live, turn) in enumerate(zip(run.live, turns, strict=True), 1):
        assert live.skipped == [], f"{name} turn {n}: rows skipped while live"
        streamed = _final(live.events)
        replayed = _final(list(turn.events))
        # The same blocks with the same text: nothing lost, nothing repeated.
        assert streamed.content == replayed.content, f"{name} turn {n}"
        assert streamed.stop_reason == replayed.stop_reason
        assert streamed.error_message == replayed.error_message
        assert streamed.usage == replayed.usage
        # The deltas add up to the blocks (a repeated or lost delta would not).
        deltas: dict[int, str] = {}
        for event in live.events:
            if event.type in ("text_delta", "thinking_delta"):
                deltas[event.content_index] = deltas.get(event.content_index, "") + event.delta
        for index, block in enumerate(streamed.content):
            assert isinstance(block, TextContent | ThinkingContent), block
            text = block.text if isinstance(block, TextContent) else block.thinking
            assert deltas.get(index, "") == text, f"{name} turn {n} block {index}"


def test_streaming_answer_arrives_in_several_deltas_while_written(
    runs: dict[str, RunResult],
) -> None:
    live = _run(runs, "rw-streaming").live[0]
    deltas = [e.delta for e in live.events if e.type == "text_delta"]
    assert len(deltas) >= 2, f"the answer grew in place over 5 chunks, the source saw {deltas}"
    assert live.polls_with_changes >= 3


def test_usage_is_the_providers_usage_metadata(runs: dict[str, RunResult]) -> None:
    message = _final(list(_replayed(_run(runs, "rw-streaming"))[0].events))
    # promptTokenCount 120 of which 20 cached; 30 answer + 12 thinking tokens.
    assert (message.usage.input, message.usage.cache_read, message.usage.output) == (100, 20, 42)


def _same_metadata(a: bytes, b: bytes) -> bool:
    """Equal as messages: Go writes map entries (modelInfo's MIME types) in random order."""
    sim_support = pytest.importorskip("sim_support")
    try:
        metadata = sim_support.real_class("exa.cortex_pb.CortexStepMetadata")
    except Exception:  # ../shared/reference is not beside this checkout
        return a == b or len(a) == len(b)
    return bool(metadata.FromString(a) == metadata.FromString(b))


def _reachable(start: StepStatus) -> set[StepStatus]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in STATUS_TRANSITIONS.get(todo.pop(), frozenset()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_rows_seen_live_have_no_placeholders_and_legal_status_moves(
    runs: dict[str, RunResult],
) -> None:
    """§6: a planner row appears with its first chunk (never empty); statuses only move on."""
    for name in NAMES:
        for live in _run(runs, name).live:
            last: dict[int, StepStatus] = {}
            for snap in live.snapshots:
                if snap.kind is StepKind.ASSISTANT:
                    assert (
                        snap.text or snap.thinking or snap.stop_reason or snap.requested_tool_calls
                    ), f"{name}: empty planner row {snap.index} ({snap.status})"
                before = last.get(snap.index)
                if before is not None and before is not snap.status:
                    assert snap.status in _reachable(before), (
                        f"{name}: step {snap.index} moved {before} -> {snap.status}"
                    )
                last[snap.index] = snap.status


def test_replay_reports_the_model_that_answered(runs: dict[str, RunResult]) -> None:
    run = _run(runs, "rw-multiturn")
    for turn in _replayed(run):
        assert _final(list(turn.events)).model == "rw-multiturn-001"
    conn = open_conversation_db(run.db, snapshot=True)
    try:
        records = [decode_generator_record(data) for _, data in iter_generator_rows(conn)]
    finally:
        conn.close()
    users = [s.index for s in read_steps(run.db) if s.kind is StepKind.USER]
    bounds = zip(users, [*users[1:], None], strict=True)
    assert [model_of_turn(records, a, b) for a, b in bounds] == ["rw-multiturn-001"] * 3


def test_writer_shapes_of_section_6(runs: dict[str, RunResult]) -> None:
    """What AGY-FORMATS §6 says about how the runtime writes, held on every database it wrote."""
    for name in NAMES:
        run = _run(runs, name)
        with sqlite3.connect(f"file:{run.db}?mode=ro", uri=True) as conn:
            rows = conn.execute("SELECT idx, metadata, step_payload FROM steps").fetchall()
            sources = conn.execute("SELECT source FROM trajectory_meta").fetchall()
        assert len(run.db.stem) == 32 and all(c in "0123456789abcdef" for c in run.db.stem)
        assert all(payload for _, _, payload in rows), f"{name}: a row without payload"
        assert all(meta for _, meta, _ in rows), f"{name}: a row without the metadata column"
        for idx, meta, payload in rows:  # the column is the payload's field 5 (map order aside)
            inner = Message(payload).message(5)
            assert inner is not None and _same_metadata(bytes(inner.raw), meta), f"{name} {idx}"
        assert sources == [(0,)]
        steps = read_steps(run.db)
        executions = {s.execution_id for s in steps if s.execution_id}
        assert executions == {run.db.stem}, f"{name}: one execution id, the conversation's"
        assert not any(s.step_type in (132, 23, 98, 90, 138) for s in steps), name
        assert not any(s.status is StepStatus.WAITING for s in steps), name


def test_model_name_comes_from_gen_metadata(runs: dict[str, RunResult]) -> None:
    run = _run(runs, "rw-commands")
    conn = open_conversation_db(run.db, snapshot=True)
    try:
        records = [decode_generator_record(data) for _, data in iter_generator_rows(conn)]
    finally:
        conn.close()
    assert [r.model for r in records] == ["rw-commands-001"] * 3  # the server's modelVersion
    assert {r.name for r in records} == {"rw-commands"}  # the configured model
    # Each model call lists the steps it wrote: its planner step and the tool step it called.
    written = [s.index for s in read_steps(run.db) if s.kind in (StepKind.ASSISTANT, StepKind.TOOL)]
    assert [i for r in records for i in r.step_indices] == written


def test_denied_tool_is_a_tool_step_and_the_turn_goes_on(runs: dict[str, RunResult]) -> None:
    steps = read_steps(_run(runs, "rw-denied").db)
    denied = [s for s in steps if s.step_type == 17]
    assert len(denied) == 1 and denied[0].status is StepStatus.ERROR
    assert denied[0].kind is StepKind.TOOL and denied[0].tool is not None
    assert denied[0].tool.name == "run_command"
    assert "denied" in denied[0].error


def test_a_retried_invalid_output_does_not_fail_the_turn(runs: dict[str, RunResult]) -> None:
    steps = read_steps(_run(runs, "rw-invalid-output").db)
    kinds = [(s.kind, s.status) for s in steps]
    assert kinds == [
        (StepKind.USER, StepStatus.DONE),
        (StepKind.ASSISTANT, StepStatus.DONE),  # empty: no text, only a stop reason
        (StepKind.ERROR, StepStatus.DONE),  # "Model produced invalid output.", then a retry
        (StepKind.ASSISTANT, StepStatus.DONE),
    ]
    assert not steps[1].final and steps[2].error == "Model produced invalid output."


def test_large_command_output_keeps_its_tail(runs: dict[str, RunResult]) -> None:
    (command,) = [s for s in read_steps(_run(runs, "rw-bigoutput").db) if s.step_type == 21]
    assert command.result is not None and command.result.exit_code == 0
    output = command.result.output
    # §6: the last ~8 KB, after a `<truncated N lines>` line (N is not the count dropped here).
    assert output.startswith("<truncated ") and output.endswith("19999\r\n20000\r\n")
    assert 4_000 < len(output) < 16_000


def test_cancelled_tool_has_no_exit_code(runs: dict[str, RunResult]) -> None:
    steps = read_steps(_run(runs, "rw-cancel").db)
    (command,) = [s for s in steps if s.step_type == 21]
    assert command.status is StepStatus.CANCELED
    assert command.result is not None and command.result.exit_code is None


def test_provider_errors_are_named_not_stack_traces(runs: dict[str, RunResult]) -> None:
    for name, code in (("rw-quota", "429"), ("rw-badrequest", "400")):
        run = _run(runs, name)
        errors = [s for s in read_steps(run.db) if s.kind is StepKind.ERROR]
        # One row per failed call: the 429 is retried once (the scenario's retry config).
        assert len(errors) == (2 if code == "429" else 1), name
        assert all(s.status is StepStatus.DONE for s in errors), name
        for step in errors:
            assert step.error.startswith(f"Error {code}, Message: "), step.error
            assert "\n" not in step.error and "Details" not in step.error
        assert code in run.sdk_errors[0]  # what the SDK itself reported


@pytest.mark.skipif(os.name != "posix", reason="POSIX paths")
def test_edit_really_happened(runs: dict[str, RunResult]) -> None:
    run = _run(runs, "rw-files")
    assert (run.workspace / "notes.txt").read_text() == "alpha\ngamma\n"
    assert (run.workspace / "src" / "new.py").read_text() == "print('new')\n"


def test_subagent_child_is_its_own_conversation(runs: dict[str, RunResult]) -> None:
    run = _run(runs, "rw-subagent")
    (invoke,) = [s for s in read_steps(run.db) if s.step_type == 127]
    assert invoke.result is not None
    child = invoke.result.output.removeprefix("child conversation ")
    assert len(child) == 32 and child != run.db.stem
    # localharness 0.1.22 gives the child its own brain folder but writes no database for it.
    assert (run.db.parent / "app" / "brain" / child).is_dir()
