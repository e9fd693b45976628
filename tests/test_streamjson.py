"""stream-json decoding: the real 1.1.17 capture, every §2.2 shape of 1.1.18–1.2.x, fuzzing, cost."""

from __future__ import annotations

import itertools
import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from agy_provider.agy.step import Step
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import StepStatus
from agy_provider.agy.step import StepUsage
from agy_provider.agy.step import TurnOutcome
from agy_provider.agy.streamjson import COALESCE_FROM
from agy_provider.agy.streamjson import StreamJsonDecoder
from agy_provider.agy.streamjson import decode_stream_json
from agy_provider.assembly.assembler import StepAssembler
from agy_provider.assembly.tool_runs import render_tool_run
from agy_provider.errors import DecodeError
from agy_provider.errors import FramingError
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent

CAPTURE = Path("stream-json") / "agy-1.1.17-print-denied-command.ndjson"
CID = "c3b66b04-872b-4fbe-a3a4-058a026ef20a"


def line(event: str, **body: Any) -> str:
    """One compact stream-json line, as agy ≥ 1.1.18 prints it."""
    if event == "result":
        payload: dict[str, Any] = {"event": "result", "result": {"conversation_id": CID, **body}}
    elif event == "init":
        payload = {"event": "init", "conversation_id": CID, "init": body}
    else:
        payload = {"event": event, event: {"conversation_id": CID, **body}}
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def step(index: int, kind: str, state: str = "DONE", **extra: Any) -> str:
    return line("step_update", step_index=index, state=state, step_type=kind, **extra)


def usage(inp: int, out: int, cache: int = 0, thinking: int = 0) -> dict[str, int]:
    return {
        "input_tokens": inp,
        "output_tokens": out,
        "thinking_tokens": thinking,
        "cache_read_tokens": cache,
        "total_tokens": inp + out,
    }


def decode(lines: list[str], **kwargs: Any) -> tuple[list[Step | TurnOutcome], StreamJsonDecoder]:
    skipped: list[str] = []
    decoder = StreamJsonDecoder(on_skip=skipped.append, **kwargs)
    data = ("\n".join(lines) + "\n").encode()
    items = decoder.receive(data) + decoder.end_of_input()
    decoder.skipped_reasons = skipped  # type: ignore[attr-defined]
    return items, decoder


def outcomes(items: list[Step | TurnOutcome]) -> list[TurnOutcome]:
    return [i for i in items if isinstance(i, TurnOutcome)]


def assemble(items: list[Step | TurnOutcome]) -> DoneEvent | ErrorEvent:
    """Replay one turn's items through the real assembler; the final event."""
    assembler = StepAssembler(model="agy", turn_start=-1)
    events = assembler.start()
    outcome = None
    for item in items:
        if isinstance(item, TurnOutcome):
            outcome = item
        elif item.kind is not StepKind.USER:
            events += assembler.feed([item])
    events += assembler.finish(outcome)
    final = events[-1]
    assert isinstance(final, DoneEvent | ErrorEvent)
    return final


def text_of(final: DoneEvent | ErrorEvent) -> str:
    message = final.message if isinstance(final, DoneEvent) else final.error
    return "".join(getattr(block, "text", "") for block in message.content)


# -- the real capture (agy 1.1.17) -------------------------------------------------------------


def run_whole(data: bytes) -> list[Step | TurnOutcome]:
    decoder = StreamJsonDecoder(on_skip=lambda _r: None)
    return decoder.receive(data) + decoder.end_of_input()


def run_bytewise(data: bytes) -> list[Step | TurnOutcome]:
    decoder = StreamJsonDecoder(on_skip=lambda _r: None)
    items: list[Step | TurnOutcome] = []
    for i in range(len(data)):
        items += decoder.receive(data[i : i + 1])
    return items + decoder.end_of_input()


def test_real_capture_whole_bytewise_and_with_garbage(reference: Path) -> None:
    data = (reference / CAPTURE).read_bytes()
    whole = run_whole(data)
    assert run_bytewise(data) == whole
    noisy = (
        b"Fetching conversation...\n"
        b"warning: ignoring unsupported stream input message event\n"
        + data.replace(b"\n", b"\nI1130 12:00:00 log line between events\n", 2)
        + b"trailing garbage without newline"
    )
    assert run_whole(noisy) == whole
    outcome = whole[-1]
    assert isinstance(outcome, TurnOutcome) and not outcome.ok and not outcome.aborted
    assert 'permission check failed for command "echo hi"' in outcome.error
    assert outcome.usage == StepUsage(input=44909, output=610)  # a fresh turn: the result itself
    tool = next(s for s in whole if isinstance(s, Step) and s.index == 7 and s.status.terminal)
    assert tool.result is not None and tool.result.is_error
    assert "permission check failed" in render_tool_run(tool)
    viewed = next(s for s in whole if isinstance(s, Step) and s.index == 3 and s.status.terminal)
    assert viewed.result is not None and viewed.result.output == "55 lines, 2955 bytes"


def test_real_capture_per_event_feed(reference: Path) -> None:
    decoder = StreamJsonDecoder()
    results = [
        decoder.feed(json.loads(text))
        for text in (reference / CAPTURE).read_text().split("\n")
        if text
    ]
    assert decoder.conversation_id == "4df4b685-e326-4498-b423-4732961ac2e4"
    assert decoder.permission_mode == "request-review"
    assert isinstance(results[-1], TurnOutcome) and not results[-1].ok
    assert decoder.last_result is not None and decoder.last_result.num_turns == 1


# -- usage: running totals -------------------------------------------------------------------


def turn_lines(
    first: int, answer: str, step_usage: dict[str, int], total: dict[str, int], turns: int
) -> list[str]:
    return [
        step(first, "user_input"),
        step(first + 1, "agent_response", "ACTIVE", text_delta=answer[:2]),
        step(
            first + 1,
            "agent_response",
            text_delta=answer[2:],
            usage=step_usage,
            duration_seconds=1.2,
        ),
        line(
            "result",
            status="SUCCESS",
            response=answer,
            duration_seconds=1.5 * turns,
            num_turns=turns,
            usage=total,
        ),
    ]


def test_usage_of_later_turns_is_the_difference_of_running_totals() -> None:
    # 24928 = 12100 + 12828 (AGY-FORMATS §2.2), in one --input-format stream-json process.
    lines = [line("init", cwd="/w", tools=[], permission_mode="request-review")]
    lines += turn_lines(0, "one", usage(12000, 100), usage(12000, 100), 1)
    lines += turn_lines(3, "two", usage(12700, 128), usage(24700, 228), 2)
    items, decoder = decode(lines)
    first, second = outcomes(items)
    assert first.usage == StepUsage(12000, 100) and first.usage.input + first.usage.output == 12100
    assert second.usage == StepUsage(12700, 128)
    assert decoder.last_result is not None and decoder.last_result.total_usage == StepUsage(
        24700, 228
    )


def test_fresh_turn_takes_the_result_even_above_the_step_sum() -> None:
    # agy's own side calls (the checkpoint's title) are in result.usage but on no agent step.
    lines = [
        step(0, "user_input"),
        step(3, "agent_response", text_delta="Hi.", usage=usage(10302, 582, 8113, 551)),
        step(4, "checkpoint", usage=usage(116, 7), duration_seconds=0.53),
        line(
            "result",
            status="SUCCESS",
            response="Hi.",
            num_turns=1,
            usage=usage(10418, 589, 8113, 551),
        ),
    ]
    (outcome,) = outcomes(decode(lines)[0])
    assert outcome.usage == StepUsage(10418, 589, 8113)


def test_resumed_process_without_previous_total_sums_its_agent_steps() -> None:
    lines = [
        step(8, "user_input"),
        step(9, "agent_response", text_delta="a", usage=usage(300, 10, 5000)),
        step(
            10,
            "tool",
            "DONE",
            tool_name="view_file",
            tool_info={"name": "view_file", "parameters": {}, "output": "x"},
        ),
        step(11, "agent_response", text_delta="b", usage=usage(50, 4, 5300)),
        line(
            "result", status="SUCCESS", response="ab", num_turns=3, usage=usage(90000, 900, 40000)
        ),
    ]
    (outcome,) = outcomes(decode(lines)[0])
    assert outcome.usage == StepUsage(350, 14, 10300)
    # A live caller that remembered the total after turn 2 gets the exact difference.
    (known,) = outcomes(decode(lines, previous_total=StepUsage(89000, 880, 35000))[0])
    assert known.usage == StepUsage(1000, 20, 5000)
    decoder = StreamJsonDecoder()
    decoder.set_previous_total(StepUsage(89000, 880, 35000))
    got = [i for text in lines for i in decoder.feed_line(text)]
    assert outcomes(got)[0].usage == StepUsage(1000, 20, 5000)


def test_usage_numbers_that_are_not_counts_become_zero() -> None:
    odd = {
        "input_tokens": 1e400,
        "output_tokens": "12",
        "cache_read_tokens": -5,
        "thinking_tokens": True,
    }
    lines = [
        step(0, "user_input"),
        line("result", status="SUCCESS", response="x", num_turns=1, usage=odd),
    ]
    (outcome,) = outcomes(decode(lines)[0])
    assert outcome.usage == StepUsage(0, 0, 0)


# -- tools -----------------------------------------------------------------------------------


def test_tool_outcomes_inside_tool_info_reach_the_rendered_block() -> None:
    info = {"name": "run_command", "parameters": {"CommandLine": "false"}}
    failed = {
        **info,
        "output": "boom\n",
        "error": {"type": "TOOL_ERROR", "message": "exit status 1"},
    }
    lines = [
        step(4, "tool", "ACTIVE", tool_name="run_command", tool_info=info),
        step(4, "tool", "ERROR", tool_name="run_command", tool_info=failed, duration_seconds=0.07),
        step(5, "tool", "DONE", tool_name="run_command", tool_info={**info, "output": "ok\r\n"}),
    ]
    items, _ = decode(lines)
    error_step = [s for s in items if isinstance(s, Step) and s.index == 4][-1]
    assert error_step.status is StepStatus.ERROR and error_step.error == "exit status 1"
    rendered = render_tool_run(error_step)
    assert "exit status 1" in rendered and "boom" in rendered and "failed: error" not in rendered
    ok_step = [s for s in items if isinstance(s, Step) and s.index == 5][-1]
    assert ok_step.result is not None and ok_step.result.output == "ok\r\n"
    assert not ok_step.result.is_error


def test_subagent_info_is_rendered_with_role_prompt_and_child_id() -> None:
    info = {
        "subagents": [
            {
                "type_name": "research",
                "role": "researcher",
                "initial_prompt": "Map the packages",
                "conversation_id": "1111-2222",
                "log_uri": "file:///log",
                "workspace_uris": ["file:///w"],
            }
        ]
    }
    lines = [
        step(5, "subagent", "ACTIVE", subagent_info=info),
        step(5, "subagent", "DONE", subagent_info=info),
    ]
    items, _ = decode(lines)
    done = [s for s in items if isinstance(s, Step)][-1]
    assert done.kind is StepKind.TOOL and done.status is StepStatus.DONE
    rendered = render_tool_run(done)
    assert "researcher" in rendered and "Map the packages" in rendered and "1111-2222" in rendered


def test_other_step_types() -> None:
    lines = [
        step(1, "checkpoint"),
        step(2, "system_message"),
        step(
            3, "error_message", error={"type": "MODEL_ERROR", "message": "429 RESOURCE_EXHAUSTED"}
        ),
        step(4, "unknown"),
        step(5, "brand_new_kind"),
    ]
    items, _ = decode(lines)
    kinds = {s.index: s.kind for s in items if isinstance(s, Step)}
    assert kinds == {
        1: StepKind.CHECKPOINT,
        2: StepKind.SYSTEM,
        3: StepKind.ERROR,
        4: StepKind.UNKNOWN,
        5: StepKind.UNKNOWN,
    }
    error = next(s for s in items if isinstance(s, Step) and s.index == 3)
    assert error.error == "429 RESOURCE_EXHAUSTED"


def test_command_result_is_the_answer() -> None:
    data = {"credits": 12, "plan": "pro"}
    lines = [
        json.dumps({"event": "command_result", "command_result": {"name": "usage", "data": data}}),
        line(
            "result",
            status="SUCCESS",
            response="",
            num_turns=0,
            usage=usage(0, 0),
            command={"name": "usage", "data": data},
        ),
    ]
    items, _ = decode(lines)
    assert len([s for s in items if isinstance(s, Step)]) == 1  # not repeated from result.command
    final = assemble(items)
    assert isinstance(final, DoneEvent) and json.loads(text_of(final)) == data
    # Only in the result (--output-format json): the same answer.
    final = assemble(decode(lines[1:])[0])
    assert isinstance(final, DoneEvent) and json.loads(text_of(final)) == data


# -- denied actions, all three shapes ------------------------------------------------------


DENIED_TOOL = [
    step(0, "user_input"),
    step(
        3,
        "tool",
        "ACTIVE",
        tool_name="run_command",
        tool_info={"name": "run_command", "parameters": {"CommandLine": "rm -rf build"}},
    ),
    step(
        3,
        "tool",
        "ERROR",
        tool_name="run_command",
        tool_info={
            "name": "run_command",
            "parameters": {"CommandLine": "rm -rf build"},
            "error": {
                "type": "TOOL_ERROR",
                "message": 'permission check failed for command "rm -rf build": user denied permission',
            },
        },
    ),
]


def test_denied_1_2_13_success_with_empty_response_is_an_error() -> None:
    lines = [
        *DENIED_TOOL,
        line(
            "result",
            status="SUCCESS",
            response="",
            num_turns=1,
            usage=usage(100, 5),
            denied_actions=[{"action": "command", "display_name": "RunCommand"}],
        ),
    ]
    items, _ = decode(lines)
    (outcome,) = outcomes(items)
    assert not outcome.ok and not outcome.aborted
    assert "RunCommand" in outcome.error and "rm -rf build" in outcome.error
    assert "Allow it" in outcome.error  # says what to do
    final = assemble(items)
    assert isinstance(final, ErrorEvent) and "RunCommand" in (final.error.error_message or "")


def test_denied_1_1_18_canceled_names_the_reason_from_stderr() -> None:
    lines = [
        *DENIED_TOOL,
        line("result", status="CANCELED", response="", num_turns=1, usage=usage(1, 1)),
    ]
    decoder = StreamJsonDecoder()
    decoder.note_stderr(
        "I1130 starting\nrun_command was auto-denied: no permission in print mode\n"
    )
    items = [i for text in lines for i in decoder.feed_line(text)]
    (outcome,) = outcomes(items)
    assert not outcome.ok and not outcome.aborted
    assert "auto-denied" in outcome.error and "rm -rf build" in outcome.error
    # Without stderr the turn still ends in an error that says where to look.
    bare = outcomes(
        decode([step(0, "user_input"), line("result", status="CANCELED", response="")])[0]
    )[0]
    assert not bare.ok and "stderr" in bare.error


def test_denied_by_a_hook_keeps_the_full_answer_and_ends_in_error() -> None:
    answer = "I could not delete the build folder: the hook refused it."
    lines = [
        *DENIED_TOOL,
        step(4, "agent_response", "ACTIVE", text_delta=answer[:20]),
        step(4, "agent_response", "DONE", text_delta=answer[20:], usage=usage(5, 5)),
        line(
            "result",
            status="ERROR",
            response=answer,
            error="hook denied run_command",
            num_turns=1,
            usage=usage(5, 5),
        ),
    ]
    items, _ = decode(lines)
    (outcome,) = outcomes(items)
    assert not outcome.ok and "hook denied" in outcome.error
    final = assemble(items)
    assert isinstance(final, ErrorEvent) and text_of(final) == answer


def test_a_denied_tool_with_a_real_answer_after_it_is_a_success() -> None:
    lines = [
        *DENIED_TOOL,
        step(4, "agent_response", text_delta="I was not allowed to run it.", usage=usage(5, 5)),
        line(
            "result",
            status="SUCCESS",
            response="I was not allowed to run it.",
            num_turns=1,
            usage=usage(5, 5),
        ),
    ]
    (outcome,) = outcomes(decode(lines)[0])
    assert outcome.ok


def test_signed_out_run_names_agys_own_notice() -> None:
    lines = [
        "Error: authentication required. Run 'antigravity' to log in, then retry.",
        line(
            "result",
            status="ERROR",
            response="",
            error="authentication failed or timed out",
            num_turns=1,
        ),
    ]
    items, decoder = decode(lines)
    (outcome,) = outcomes(items)
    assert "authentication failed" in outcome.error and "antigravity' to log in" in outcome.error
    assert decoder.skipped == 1 and "line 1" in decoder.skipped_reasons[0]  # type: ignore[attr-defined]


def test_quota_failure_json_output_is_one_result_object() -> None:
    quota = {
        "conversation_id": CID,
        "status": "ERROR",
        "response": "",
        "error": "Individual quota reached. Upgrade for more. Resets in 120h9m43s.",
        "duration_seconds": 0.4,
        "num_turns": 1,
        "usage": usage(0, 0),
    }
    decoder = StreamJsonDecoder()
    (outcome,) = decoder.feed_event(quota)
    assert isinstance(outcome, TurnOutcome) and not outcome.ok and "quota" in outcome.error
    answer = {**quota, "status": "SUCCESS", "error": None, "response": "Hello there.\n"}
    items = StreamJsonDecoder().feed_line(json.dumps(answer, indent=2).replace("\n", " "))
    final = assemble(items)
    assert isinstance(final, DoneEvent) and text_of(final) == "Hello there.\n"


# -- the final text ------------------------------------------------------------------------


def test_response_adds_what_no_delta_carried() -> None:
    lines = [
        step(0, "user_input"),
        step(2, "agent_response", "ACTIVE", text_delta="Hello"),
        step(2, "agent_response", "DONE", usage=usage(1, 1)),
        step(3, "checkpoint"),
        line(
            "result", status="SUCCESS", response="Hello, world.\n", num_turns=1, usage=usage(1, 1)
        ),
    ]
    final = assemble(decode(lines)[0])
    assert isinstance(final, DoneEvent) and text_of(final) == "Hello, world.\n"


def test_response_that_disagrees_never_rewrites_the_stream() -> None:
    lines = [
        step(2, "agent_response", text_delta="Streamed answer."),
        line("result", status="SUCCESS", response="A different answer.", num_turns=1),
    ]
    final = assemble(decode(lines)[0])
    assert text_of(final) == "Streamed answer."


def test_response_already_shown_by_an_earlier_step_is_not_repeated() -> None:
    lines = [
        step(2, "agent_response", text_delta="Let me check."),
        step(
            3, "tool", "DONE", tool_name="view_file", tool_info={"name": "view_file", "output": "x"}
        ),
        step(4, "agent_response", usage=usage(1, 1)),
        line("result", status="SUCCESS", response="Let me check.", num_turns=1),
    ]
    final = assemble(decode(lines)[0])
    assert text_of(final) == "Let me check."


def test_broken_multibyte_characters_are_healed_by_the_response() -> None:
    # agy 1.1.12–1.1.15: "é" split across two deltas became U+FFFD on both sides.
    lines = [
        step(2, "agent_response", "ACTIVE", text_delta="Un caf\ufffd"),
        step(2, "agent_response", "ACTIVE", text_delta="\ufffd cr\u00e8me, "),
        step(2, "agent_response", "DONE", text_delta="merci.", usage=usage(1, 1)),
        line("result", status="SUCCESS", response="Un café crème, merci.", num_turns=1),
    ]
    items, _ = decode(lines)
    shown = [s.text for s in items if isinstance(s, Step)]
    assert all("\ufffd" not in text for text in shown)
    assert all(b.startswith(a) for a, b in itertools.pairwise(shown))  # only growth
    assert text_of(assemble(items)) == "Un café crème, merci."


def test_broken_text_the_response_cannot_heal_is_shown_as_it_streamed() -> None:
    lines = [
        step(2, "agent_response", "ACTIVE", text_delta="Un caf\ufffd"),
        step(2, "agent_response", "DONE", text_delta="\ufffd noir.", usage=usage(1, 1)),
        line("result", status="SUCCESS", response="Something else entirely.", num_turns=1),
    ]
    assert text_of(assemble(decode(lines)[0])) == "Un caf\ufffd\ufffd noir."
    # A capture cut before its result shows the held text too.
    assert text_of(assemble(decode(lines[:2])[0])) == "Un caf\ufffd\ufffd noir."


def test_only_newline_ends_a_line() -> None:
    text = "first\u2028second\u2029third\x85fourth\r"
    lines = [
        step(2, "agent_response", text_delta=text),
        line("result", status="SUCCESS", response=text, num_turns=1),
    ]
    data = ("\r\n".join(lines) + "\r\n").encode()
    items = list(decode_stream_json([data]))
    assert text_of(assemble(items)) == text


def test_non_json_lines_before_and_between_events_are_skipped() -> None:
    lines = [
        "Fetching conversation...",
        step(0, "user_input"),
        "[1, 2, 3]",
        '{"event": "step_update"}',
        '{"event": "mystery"}',
        step(2, "agent_response", text_delta="Fine."),
        line("result", status="SUCCESS", response="Fine.", num_turns=1),
    ]
    items, decoder = decode(lines)
    assert decoder.skipped == 4
    assert isinstance(assemble(items), DoneEvent)


def test_feed_raises_only_decode_errors_for_bad_events() -> None:
    decoder = StreamJsonDecoder()
    with pytest.raises(DecodeError):
        decoder.feed({"event": "step_update", "step_update": {"state": "DONE"}})
    with pytest.raises(DecodeError):
        decoder.feed({"event": "mystery"})
    with pytest.raises(DecodeError):
        decoder.feed_line("not json")
    with pytest.raises(DecodeError):
        decoder.feed_event([1, 2])


# -- any input, only typed outcomes --------------------------------------------------------

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(alphabet=st.characters(codec=None), max_size=12)
    | st.sampled_from(
        [
            "step_update",
            "result",
            "init",
            "DONE",
            "ACTIVE",
            "ERROR",
            "tool",
            "agent_response",
            "subagent",
            "\ufffd",
        ]
    ),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "event",
                    "step_update",
                    "result",
                    "init",
                    "step_index",
                    "state",
                    "step_type",
                    "text_delta",
                    "tool_info",
                    "output",
                    "error",
                    "usage",
                    "response",
                    "status",
                    "num_turns",
                    "denied_actions",
                    "subagent_info",
                    "subagents",
                    "command",
                    "name",
                    "data",
                    "parameters",
                    "message",
                    "input_tokens",
                    "conversation_id",
                    "command_result",
                ]
            ),
            children,
            max_size=6,
        )
    ),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_json, max_size=8))
def test_fuzz_events_raise_only_decode_errors(events: list[Any]) -> None:
    decoder = StreamJsonDecoder(coalesce=True)
    for event in events:
        try:
            items = decoder.feed_event(event)
        except DecodeError:
            continue
        for item in items:
            assert isinstance(item, Step | TurnOutcome)
            json.dumps(item.to_json() if isinstance(item, Step) else item.error).encode("utf-8")
    decoder.flush()


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.binary(max_size=200)
        | st.sampled_from([b"\n", b'{"event":"result","result":{}}\n', b"\xff\n"]),
        max_size=10,
    )
)
def test_fuzz_bytes_raise_nothing(chunks: list[bytes]) -> None:
    items = list(decode_stream_json(chunks, on_skip=lambda _r: None))
    assert all(isinstance(item, Step | TurnOutcome) for item in items)


def test_hostile_values_are_survived() -> None:
    hostile = [
        '{"event":"step_update","step_update":{"step_index":1e400,"state":"DONE"}}',
        '{"event":"step_update","step_update":{"step_index":-1,"state":"DONE"}}',
        '{"event":"step_update","step_update":{"step_index":2,"step_type":"agent_response","text_delta":"\\ud800x"}}',
        '{"event":"step_update","step_update":{"step_index":3,"step_type":"tool","state":"DONE","tool_info":{"parameters":'
        + "[" * 900
        + "]" * 900
        + "}}}",
        '{"event":"result","result":{"status":"SUCCESS","response":"\\udfff","num_turns":Infinity,"usage":{"input_tokens":NaN}}}',
        "[" * 5000,
        '{"event":"step_update","step_update":{"step_index":' + "9" * 5000 + "}}",
    ]
    items, decoder = decode(hostile)
    for item in items:
        if isinstance(item, Step):
            json.dumps(item.to_json(), ensure_ascii=False).encode("utf-8")
    assert outcomes(items) and decoder.skipped >= 3


def test_a_line_over_the_framing_bound_is_a_framing_error() -> None:
    decoder = StreamJsonDecoder()
    with pytest.raises(FramingError):
        for _ in range(20):
            decoder.receive(b"x" * (1024 * 1024))


# -- cost: linear in the input -----------------------------------------------------------


def delta_capture(deltas: int) -> bytes:
    chunk = "The quick brown fox jumps over the lazy dog, again and again and again. "
    body = [step(0, "user_input")]
    body += [step(2, "agent_response", "ACTIVE", text_delta=chunk) for _ in range(deltas)]
    body.append(step(2, "agent_response", "DONE", usage=usage(1, 1)))
    body.append(line("result", status="SUCCESS", response=chunk * deltas, num_turns=1))
    return ("\n".join(body) + "\n").encode()


def decode_capture(data: bytes) -> tuple[int, int]:
    """(characters joined, peak bytes) for decoding `data` in 64 KiB reads, keeping no snapshot."""
    decoder = StreamJsonDecoder(coalesce=True)
    tracemalloc.start()
    try:
        for start in range(0, len(data), 65536):
            for _ in decoder.receive(data[start : start + 65536]):
                pass
        for _ in decoder.end_of_input():
            pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return decoder.chars_joined, peak


def test_decoding_many_deltas_is_linear_in_work_and_memory() -> None:
    small_work, small_peak = decode_capture(delta_capture(2_000))
    large_work, large_peak = decode_capture(delta_capture(20_000))
    # Ten times the input: a linear decoder does about ten times the work; a quadratic one 100×.
    assert large_work / small_work < 15, (small_work, large_work)
    assert large_peak / small_peak < 15, (small_peak, large_peak)
    # Below COALESCE_FROM every delta is still its own snapshot (replay shows text as it streamed).
    few = [
        s for s in decode_stream_json([delta_capture(20)]) if isinstance(s, Step) and s.index == 2
    ]
    assert len(few) == 21 and len(few[-1].text) < COALESCE_FROM


def test_coalesced_snapshots_only_grow_and_end_exact() -> None:
    data = delta_capture(5_000)
    texts = [s.text for s in decode_stream_json([data]) if isinstance(s, Step) and s.index == 2]
    assert all(b.startswith(a) for a, b in itertools.pairwise(texts))
    assert len(texts) < 200 and texts[-1].endswith("again. ") and len(texts[-1]) == 5_000 * 72


# -- replay of captures in these shapes --------------------------------------------------


def replay_final(path: Path) -> dict[str, Any]:
    import io

    from agy_provider.cli import main

    out, err = io.StringIO(), io.StringIO()
    assert main(["replay", str(path)], out=out, err=err) == 0, err.getvalue()
    final: dict[str, Any] = json.loads(out.getvalue().splitlines()[-1])
    return final


@pytest.mark.parametrize("indent", [None, 2])
def test_replay_takes_an_output_format_json_result(tmp_path: Path, indent: int | None) -> None:
    result = {
        "conversation_id": CID,
        "status": "SUCCESS",
        "response": "A git rebase rewrites history.\n",
        "duration_seconds": 7.16,
        "num_turns": 1,
        "usage": usage(10415, 657, 8113, 616),
    }
    path = tmp_path / "result.json"
    path.write_text(json.dumps(result, indent=indent))
    final = replay_final(path)
    assert final["type"] == "done"
    assert final["message"]["content"] == [{"type": "text", "text": result["response"]}]
    assert final["message"]["usage"]["input"] == 10415


def test_replay_takes_plain_text_before_the_first_event(tmp_path: Path) -> None:
    path = tmp_path / "signed-out.ndjson"
    path.write_text(
        "Error: authentication required. Run 'antigravity' to log in, then retry.\n"
        "warning: ignoring unsupported stream input message event\n"
        + line("result", status="ERROR", response="", error="authentication failed or timed out")
        + "\n"
    )
    final = replay_final(path)
    assert final["type"] == "error"
    assert "authentication failed" in final["error"]["errorMessage"]
    assert "log in" in final["error"]["errorMessage"]


_pieces = st.lists(
    st.text(alphabet=st.sampled_from(["a", "é", " ", "\ufffd", "\n", "\u2028", "z"]), max_size=6),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(st.tuples(st.integers(2, 4), _pieces), min_size=1, max_size=4),
    response=st.text(alphabet=st.sampled_from(["a", "é", " ", "\ufffd", "z"]), max_size=30),
    coalesce=st.booleans(),
)
def test_snapshots_only_grow_whatever_the_deltas_and_response(
    steps: list[tuple[int, list[str]]], response: str, coalesce: bool
) -> None:
    """Never retract or garble what was shown: every snapshot of a step extends the last one."""
    decoder = StreamJsonDecoder(coalesce=coalesce)
    lines = [
        step(index, "agent_response", "ACTIVE", text_delta=piece)
        for index, pieces in steps
        for piece in pieces
    ]
    lines.append(line("result", status="SUCCESS", response=response, num_turns=1))
    items = [i for text in lines for i in decoder.feed_line(text)] + decoder.end_of_input()
    shown: dict[int, str] = {}
    for item in items:
        if isinstance(item, Step):
            assert item.text.startswith(shown.get(item.index, ""))
            shown[item.index] = item.text
    streamed = {
        index: "".join(p for i, ps in steps if i == index for p in ps) for index, _ in steps
    }
    for index, text in streamed.items():
        final = shown.get(index, "")
        # Everything streamed is shown, or healed by the response (same text outside U+FFFD).
        clean = text.split("\ufffd")[0]
        assert final.startswith(clean)
        assert final.startswith(text) or "\ufffd" in text  # else healed by the response


def test_1_1_9_hook_refusal_then_an_answer_keeps_the_answer() -> None:
    # agy 1.1.9, a PreToolUse hook answering deny: error_message steps, then an answer, SUCCESS.
    lines = [
        '{"event":"step_update","step_update":{"step_index":3,"state":"DONE","step_type":"error_message","duration_seconds":0.62}}',
        '{"event":"step_update","step_update":{"step_index":6,"state":"DONE","step_type":"error_message","duration_seconds":0.02}}',
        '{"event":"step_update","step_update":{"step_index":11,"state":"DONE","step_type":"agent_response","text_delta":"DONE\\n"}}',
        '{"event":"result","result":{"conversation_id":"c1","status":"SUCCESS","response":"DONE\\n"}}',
    ]
    items, _ = decode(lines)
    assert [s.kind for s in items if isinstance(s, Step)][:2] == [StepKind.ERROR, StepKind.ERROR]
    final = assemble(items)
    assert (
        isinstance(final, DoneEvent) and text_of(final) == "DONE\n"
    )  # the answer is the last word


def test_a_step_index_too_long_to_print_is_skipped_not_a_crash() -> None:
    # Found by the fuzz target: an index of 4,301 digits cannot even be formatted into a message.
    decoder = StreamJsonDecoder()
    with pytest.raises(DecodeError, match="out of range"):
        decoder.feed({"event": "step_update", "step_update": {"step_index": 10**4301 - 1}})
    # As text the number is refused by the JSON layer: a skipped line, not a crash.
    items, text_decoder = decode(
        ['{"event":"step_update","step_update":{"step_index":' + "9" * 4301 + "}}"]
    )
    assert not any(isinstance(i, Step) for i in items)
    assert text_decoder.skipped_reasons  # type: ignore[attr-defined]


# -- agy 1.2.x – 1.3.3 (AGY-FORMATS §2.3; shapes from other projects' runs, unverified here) -----


def test_init_before_any_input_names_the_model_and_the_turn_reads_as_usual() -> None:
    lines = [
        line("init", model="gemini-3.8-flash", cwd="/w", tools=[], permission_mode="strict"),
        step(0, "user_input"),
        step(1, "agent_response", "ACTIVE", text_delta="Hel"),
        step(2, "finish", "ACTIVE"),
        step(1, "agent_response", text_delta="lo", usage=usage(10, 2)),
        step(2, "finish", "ERROR"),  # never an error of the turn, whatever its state
        line("result", status="SUCCESS", response="Hello", num_turns=1, usage=usage(10, 2)),
    ]
    items, decoder = decode(lines)
    assert decoder.model == "gemini-3.8-flash" and decoder.permission_mode == "strict"
    assert {i.kind for i in items if isinstance(i, Step) and i.index == 2} == {StepKind.SYSTEM}
    final = assemble(items)
    assert isinstance(final, DoneEvent) and text_of(final) == "Hello"


def test_command_result_with_a_command_object_then_a_zero_token_result() -> None:
    data = {"buckets": [{"window": "5h", "remaining_fraction": 0.4, "resets_in": "3h20m"}]}
    lines = [
        line("init", model="gemini-3.8-flash"),
        json.dumps({"event": "command_result", "command": {"name": "usage", "data": data}}),
        line("result", status="SUCCESS", response="", num_turns=0, usage=usage(0, 0)),
    ]
    items, decoder = decode(lines)
    assert decoder.last_result is not None and decoder.last_result.command == "usage"
    final = assemble(items)
    assert isinstance(final, DoneEvent) and '"remaining_fraction": 0.4' in text_of(final)


@pytest.mark.parametrize("status", ["ERROR", "RESOURCE_EXHAUSTED"])
def test_a_quota_result_keeps_agys_words_and_types_the_refusal(status: str) -> None:
    words = "Individual quota reached. Upgrade your plan for more. Resets in 120h9m43s."
    items, _ = decode([line("result", status=status, error=words, num_turns=0)])
    [outcome] = outcomes(items)
    assert not outcome.ok and words in outcome.error
    assert outcome.quota is not None and outcome.quota.resets_in == 120 * 3600 + 9 * 60 + 43
    final = assemble(items)
    assert isinstance(final, ErrorEvent) and "Resets in 120h9m43s" in str(final.error.error_message)


def test_denied_actions_with_an_empty_success_response_fail_naming_them() -> None:
    lines = [
        step(0, "user_input"),
        step(1, "tool", "DONE", tool_info={"name": "run_command", "parameters": {}}),
        line(
            "result",
            status="SUCCESS",
            response="",
            num_turns=1,
            denied_actions=[{"action": "command", "display_name": "RunCommand"}],
        ),
    ]
    items, _ = decode(lines)
    [outcome] = outcomes(items)
    assert not outcome.ok and "RunCommand" in outcome.error and outcome.quota is None
