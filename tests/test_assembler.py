"""The assembler: pure Step snapshots in, pi events out."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from agy_provider.agy.step import Step
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import StepStatus
from agy_provider.agy.step import StepUsage
from agy_provider.agy.step import ToolCall
from agy_provider.agy.step import ToolResult
from agy_provider.agy.step import TurnOutcome
from agy_provider.assembly.assembler import StepAssembler
from agy_provider.assembly.outcome import CANCELLED
from agy_provider.assembly.outcome import EMPTY_ANSWER
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.events import ToolCallDeltaEvent
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent

USER = Step(index=0, kind=StepKind.USER, status=StepStatus.DONE, text="hi")


def planner(
    index: int,
    text: str = "",
    thinking: str = "",
    status: StepStatus = StepStatus.GENERATING,
    **kw: Any,
) -> Step:
    return Step(
        index=index, kind=StepKind.ASSISTANT, status=status, text=text, thinking=thinking, **kw
    )


def types(events: list[Any]) -> list[str]:
    return [e.type for e in events]


def run(*batches: list[Step], outcome: TurnOutcome | None = None) -> list[Any]:
    asm = StepAssembler(model="m")
    events = []
    for batch in batches:
        events += asm.feed(batch)
    return events + asm.finish(outcome)


def test_growth_streams_as_deltas_thinking_first() -> None:
    events = run(
        [USER, planner(1)],  # the empty placeholder row
        [planner(1, thinking="Let me")],
        [planner(1, thinking="Let me think", text="Hel")],
        [planner(1, thinking="Let me think", text="Hello!", status=StepStatus.DONE)],
    )
    assert types(events) == [
        "start",
        "thinking_start",
        "thinking_delta",
        "thinking_delta",
        "thinking_end",
        "text_start",
        "text_delta",
        "text_delta",
        "text_end",
        "done",
    ]
    deltas = "".join(e.delta for e in events if e.type == "text_delta")
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert deltas == "Hello!"
    assert done.message.content == (
        ThinkingContent(thinking="Let me think"),
        TextContent(text="Hello!"),
    )
    assert done.reason == "stop"


def test_same_snapshot_twice_emits_nothing_and_shorter_rewrite_emits_nothing() -> None:
    asm = StepAssembler(model="m")
    first = asm.feed([USER, planner(1, text="Hello world")])
    assert first
    assert asm.feed([USER, planner(1, text="Hello world")]) == []
    assert asm.feed([planner(1, text="Hello")]) == []  # shorter
    assert asm.feed([planner(1, text="Goodbye, cruel world")]) == []  # diverged
    more = asm.feed([planner(1, text="Hello world, again")])
    assert [e.delta for e in more if e.type == "text_delta"] == [", again"]


def pwd_run() -> tuple[Step, Step]:
    """`pwd` as agy runs it: the step while it runs, then settled."""
    call = ToolCall(id="c1", name="run_command", arguments={"CommandLine": "pwd"})
    running = Step(index=2, kind=StepKind.TOOL, status=StepStatus.RUNNING, tool=call)
    result = ToolResult(output="/tmp\n", exit_code=0)
    return running, dataclasses.replace(running, status=StepStatus.DONE, result=result)


def test_tool_runs_render_inside_thinking_never_as_tool_calls() -> None:
    running, done = pwd_run()
    events = run(
        [USER, planner(1, text="Checking.", status=StepStatus.DONE)],
        [running],
        [done],
        [planner(3, text="You are in /tmp.", status=StepStatus.DONE)],
    )
    assert not any(e.type.startswith("toolcall") for e in events)
    message = events[-1].message
    assert message.stop_reason == "stop"
    assert [type(b).__name__ for b in message.content] == [
        "TextContent",
        "ThinkingContent",
        "TextContent",
    ]
    assert message.content[1].thinking == "▸ run_command pwd\n  exit 0\n  /tmp\n"


def test_a_tool_runs_events_carry_it_as_a_value_outside_pis_json() -> None:
    running, done = pwd_run()
    events = run(
        [USER, planner(1, thinking="Where am I?")],
        [running],
        [done],
        [planner(3, text="You are in /tmp.", status=StepStatus.DONE)],
    )
    thinking = [e for e in events if e.type.startswith("thinking")]
    # The model's own thinking carries none; the tool run's events carry it as far as known.
    assert [e.tool_run is None for e in thinking[:3]] == [True, True, True]
    start, header, result, end = thinking[3:]
    assert start.tool_run == header.tool_run and not header.tool_run.settled
    assert (header.tool_run.name, header.tool_run.argument) == ("run_command", "pwd")
    assert header.delta == "▸ run_command pwd\n" and result.delta == "  exit 0\n  /tmp\n"
    assert end.tool_run is not None and end.tool_run.settled
    assert (end.tool_run.exit_code, end.tool_run.output) == (0, "/tmp")
    block = events[-1].message.content[1]
    assert isinstance(block, ThinkingContent) and block.tool_run == end.tool_run
    # pi's JSON is unchanged: it has no field for the value, and reading it back loses only that.
    assert block.to_json() == {"type": "thinking", "thinking": block.thinking}
    assert end.to_json(include_partial=False) == {
        "type": "thinking_end",
        "contentIndex": 1,
        "content": block.thinking,
    }
    assert ThinkingContent.from_json(block.to_json()) == block


def test_usage_is_summed_over_the_turns_model_calls() -> None:
    events = run(
        [
            USER,
            planner(
                1,
                text="a",
                status=StepStatus.DONE,
                usage=StepUsage(input=10, output=5, cache_read=100),
            ),
            planner(
                3,
                text="b",
                status=StepStatus.DONE,
                usage=StepUsage(input=7, output=2, cache_read=50, cache_write=1),
            ),
        ]
    )
    usage = events[-1].message.usage
    assert (usage.input, usage.output, usage.cache_read, usage.cache_write, usage.total_tokens) == (
        17,
        7,
        150,
        1,
        175,
    )
    assert usage.cost.total == 0


def test_error_message_step_ends_with_error_event() -> None:
    quota = Step(
        index=2,
        kind=StepKind.ERROR,
        status=StepStatus.DONE,
        error="429 RESOURCE_EXHAUSTED: quota exceeded",
    )
    events = run([USER, planner(1, status=StepStatus.ERROR), quota])
    last = events[-1]
    assert isinstance(last, ErrorEvent)
    assert last.reason == "error"
    assert last.error.error_message == "429 RESOURCE_EXHAUSTED: quota exceeded"
    assert last.error.stop_reason == "error"


def test_an_error_the_model_recovered_from_is_not_a_failure() -> None:
    denied = Step(index=2, kind=StepKind.ERROR, status=StepStatus.DONE, error="transient")
    events = run(
        [
            USER,
            planner(1, text="x", status=StepStatus.DONE),
            denied,
            planner(3, text="recovered", status=StepStatus.DONE),
        ]
    )
    assert isinstance(events[-1], DoneEvent)


def test_abort_outcome_and_max_tokens() -> None:
    aborted = run(
        [USER, planner(1, text="par")],
        outcome=TurnOutcome(aborted=True, error="aborted by the host"),
    )
    assert isinstance(aborted[-1], ErrorEvent) and aborted[-1].reason == "aborted"
    assert aborted[-1].error.stop_reason == "aborted"
    assert aborted[-2].type == "text_end"  # the open block is closed first
    length = run([USER, planner(1, text="cut", status=StepStatus.DONE, stop_reason="max_tokens")])
    assert length[-1].reason == "length"


def test_history_and_other_turns_never_join() -> None:
    history = Step(index=0, kind=StepKind.HISTORY, status=StepStatus.DONE, text="old")
    old_user = Step(index=1, kind=StepKind.USER, status=StepStatus.DONE, text="old")
    old_answer = planner(2, text="old answer", status=StepStatus.DONE)
    user = Step(index=3, kind=StepKind.USER, status=StepStatus.DONE, text="new")
    answer = planner(4, text="new answer", status=StepStatus.DONE)
    later_user = Step(index=5, kind=StepKind.USER, status=StepStatus.DONE, text="later")
    later = planner(6, text="later answer", status=StepStatus.DONE)
    asm = StepAssembler(model="m", min_index=3)
    events = (
        asm.feed([history, old_user, old_answer, user, answer, later_user, later]) + asm.finish()
    )
    assert "".join(e.delta for e in events if e.type == "text_delta") == "new answer"
    nothing = StepAssembler(model="m")
    ended = nothing.feed([history]) + nothing.finish()
    # History is not an answer: a turn with no answer text ends in error (one rule, outcome.py).
    assert types(ended) == ["start", "error"]
    assert isinstance(ended[-1], ErrorEvent) and ended[-1].error.error_message == EMPTY_ANSWER


# -- property: any interleaving of growing snapshots gives a well-formed event stream -------


@st.composite
def growth(draw: st.DrawFn) -> list[list[Step]]:
    steps = draw(st.integers(min_value=1, max_value=4))
    finals = [(draw(st.text(max_size=12)), draw(st.text(max_size=12))) for _ in range(steps)]
    batches: list[list[Step]] = [[USER]]
    progress = [0] * steps
    for _ in range(draw(st.integers(min_value=0, max_value=25))):
        i = draw(st.integers(min_value=0, max_value=steps - 1))
        progress[i] = min(progress[i] + draw(st.integers(min_value=0, max_value=6)), 24)
        thinking, text = finals[i]
        p = progress[i]
        snap = planner(i + 1, thinking=thinking[:p], text=text[: max(0, p - len(thinking))])
        batches.append([snap] * draw(st.integers(min_value=1, max_value=2)))
    batches.append(
        [
            planner(i + 1, thinking=t, text=x, status=StepStatus.DONE)
            for i, (t, x) in enumerate(finals)
        ]
    )
    return batches


@settings(max_examples=200, deadline=None)
@given(growth())
def test_event_grammar(batches: list[list[Step]]) -> None:
    events = run(*batches)
    answered = any(s.text for s in batches[-1])
    assert events[0].type == "start" and events[-1].type == ("done" if answered else "error")
    open_index = None
    built: dict[int, str] = {}
    for event in events[1:-1]:
        _kind, _, phase = event.type.partition("_")
        if phase == "start":
            assert open_index is None, "at most one open block"
            open_index = event.content_index
            built[open_index] = ""
        elif phase == "delta":
            assert event.content_index == open_index and event.delta
            built[open_index] += event.delta
        elif phase == "end":
            assert event.content_index == open_index
            assert event.content == built[open_index]
            open_index = None
    assert open_index is None
    last = events[-1]
    content = (last.message if answered else last.error).content
    assert [getattr(b, "text", None) or getattr(b, "thinking", None) for b in content] == [
        built[i] for i in range(len(content))
    ]
    # Nothing lost, nothing invented: every block is a piece of some step's final text, and
    # together the blocks are exactly as long as all the final texts.
    final = batches[-1]
    pieces = [s.thinking for s in final] + [s.text for s in final]
    assert all(any(block in piece for piece in pieces) for block in built.values())
    assert sum(map(len, built.values())) == sum(map(len, pieces))


def test_a_turn_agy_cancelled_says_so_instead_of_blaming_permissions() -> None:
    asm = StepAssembler(model="m")
    cancelled_tool = Step(index=1, kind=StepKind.TOOL, status=StepStatus.CANCELED)
    ended = asm.feed([USER, cancelled_tool]) + asm.finish()
    assert ended[-1].type == "error"
    assert ended[-1].error.error_message == CANCELLED
    # A cancelled step followed by more work is not the turn's ending.
    later = StepAssembler(model="m")
    ended = later.feed([USER, cancelled_tool, planner(2, thinking="retry")]) + later.finish()
    assert isinstance(ended[-1], ErrorEvent) and ended[-1].error.error_message == EMPTY_ANSWER


# -- host tools: one turn streamed as several messages (park → resume) ---------------------------


def test_a_parked_turn_ends_its_message_with_the_calls_and_resumes_in_a_new_one() -> None:
    from agy_provider.pi.types import ToolCall as PiToolCall

    asm = StepAssembler(model="m")
    call = PiToolCall(id="mcp-1", name="lookup", arguments={"id": "A-1", "n": 2})
    asked = planner(1, thinking="I will look it up", status=StepStatus.DONE, usage=StepUsage(10, 3))
    first = asm.feed([USER, asked]) + asm.park([call])
    assert types(first)[-4:] == ["toolcall_start", "toolcall_delta", "toolcall_end", "done"]
    delta = first[-3]
    assert isinstance(delta, ToolCallDeltaEvent) and delta.delta == '{"id": "A-1", "n": 2}'
    done = first[-1]
    assert isinstance(done, DoneEvent) and done.reason == "toolUse"
    assert done.message.stop_reason == "toolUse"
    assert done.message.content == (ThinkingContent(thinking="I will look it up"), call)
    assert done.message.usage.input == 10
    assert asm.parked and asm.park([call]) == []  # once

    # The host-run tool's step is not rendered; the planner re-fed with its usage is not
    # counted twice; the answer streams in the new message.
    asm.hide_tools({"host/lookup"})
    tool = Step(
        index=2,
        kind=StepKind.TOOL,
        status=StepStatus.DONE,
        tool=ToolCall(id="t2", name="host/lookup", arguments={"id": "A-1"}),
        result=ToolResult(output="shipped"),
    )
    answer = planner(3, text="It shipped.", status=StepStatus.DONE, usage=StepUsage(20, 4))
    second = asm.resume(timestamp=7) + asm.feed([asked, tool, answer]) + asm.finish()
    assert types(second) == ["start", "text_start", "text_delta", "text_end", "done"]
    final = second[-1]
    assert isinstance(final, DoneEvent) and final.reason == "stop"
    assert final.message.content == (TextContent(text="It shipped."),)
    assert final.message.usage.input == 20 and final.message.timestamp == 7
    assert asm.resume() == []  # not parked any more


def test_a_resumed_message_without_an_answer_is_the_empty_answer_error() -> None:
    from agy_provider.pi.types import ToolCall as PiToolCall

    asm = StepAssembler(model="m")
    asm.feed([USER, planner(1, text="Let me check.", status=StepStatus.DONE)])
    asm.park([PiToolCall(id="mcp-1", name="lookup", arguments={})])
    events = asm.resume() + asm.finish()
    assert isinstance(events[-1], ErrorEvent)
    assert events[-1].error.error_message == EMPTY_ANSWER
