"""The three live event sources give the same pi events for the same agy-sim scenario.

sqlite, rpc and stream-json each run the scenario live through `stream_simple`; what a host sees —
the text deltas concatenated, agy's tool runs as values, usage, the stop reason and error, the
final message's text — must agree, thinking aside (stream-json never carries thinking text).
Expectations come from the scenario files; the sources are also compared with each other.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from live_helpers import leftovers
from live_helpers import run_turn
from live_helpers import scenario_answer
from live_helpers import scenario_error
from live_helpers import terminal
from live_helpers import text_of

from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.tool_run import ToolRun
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.pi.types import UserMessage
from agy_provider.sim.payloads import ARGUMENT_META_KEYS
from agy_provider.sim.scenario import PlannerSpec
from agy_provider.sim.scenario import load_scenario
from agy_provider.store.sessions import SessionStore

pytestmark = pytest.mark.slow

SOURCES = ("sqlite", "rpc", "stream-json")
# Scenarios whose every part all three sources carry: text, agy's tool runs (one refused),
# usage, a quota refusal, an answer that never came. (`subagent` is left out: each source
# shows a subagent launch differently.)
# How each ends: `strict` denies its command (agy 1.2.x ends SUCCESS with an empty answer and the
# denial), `quota-error` is refused by the model, `empty-answer` never answers.
ENDINGS = {
    "default": "stop",
    "tools": "stop",
    "strict": "error",
    "quota-error": "error",
    "empty-answer": "error",
}
SCENARIOS = tuple(ENDINGS)


@dataclasses.dataclass(frozen=True)
class Seen:
    """What a host sees of a turn, with thinking (and the tool runs' text) set aside."""

    streamed: str
    final_text: str
    blocks: tuple[str, ...]  # the final message's content kinds, thinking blocks removed
    runs: tuple[tuple[Any, ...], ...]
    usage: tuple[int, int, int, int, int]
    stop_reason: str
    error: str | None


def run_value(run: ToolRun) -> tuple[Any, ...]:
    """A tool run as every source carries it: stream-json has no exit codes (only whether it
    failed) and no `toolAction`/`toolSummary` arguments; the rpc source reads numbers as text."""
    arguments = {k: str(v) for k, v in run.arguments.items() if k not in ARGUMENT_META_KEYS}
    return (run.name, run.argument, arguments, run.output, run.error, run.failed, run.settled)


def seen(events: Sequence[AssistantMessageEvent], message: AssistantMessage) -> Seen:
    terminal(events)
    runs = [b.tool_run for b in message.content if isinstance(b, ThinkingContent) and b.tool_run]
    kept = [b for b in message.content if not isinstance(b, ThinkingContent)]
    usage = message.usage
    return Seen(
        streamed=text_of(events),
        final_text="".join(b.text for b in kept if isinstance(b, TextContent)),
        blocks=tuple(b.type for b in kept),
        runs=tuple(run_value(r) for r in runs),
        usage=(usage.input, usage.output, usage.cache_read, usage.cache_write, usage.total_tokens),
        stop_reason=message.stop_reason,
        # When the quota resets is worked out from the clock at each turn's end: the three
        # sources' turns may straddle a minute.
        error=_RESETS_AT.sub("(the quota resets at <when>)", message.error_message or "") or None,
    )


_RESETS_AT = re.compile(r"\(the quota resets at [^)]*\)")


def use_source(monkeypatch: pytest.MonkeyPatch, source: str) -> None:
    monkeypatch.setenv("AGY_EVENT_SOURCE", source)
    if source == "rpc":
        monkeypatch.delenv("AGY_SIM_NO_SERVER", raising=False)
        monkeypatch.setenv("AGY_SIM_SPEED", "2")  # time to find agy's server, even when busy
    else:
        monkeypatch.setenv("AGY_SIM_NO_SERVER", "1")
        monkeypatch.setenv("AGY_SIM_SPEED", "4")


def expected_tools(scenario: str) -> list[tuple[str, str]]:
    """Each tool the scenario runs: its name and output (as the tool-run value trims it)."""
    steps = load_scenario(scenario).turn(0).steps
    planners = [s for s in steps if isinstance(s, PlannerSpec)]
    return [(t.name, t.output.rstrip("\n")) for p in planners for t in p.tools]


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_every_source_gives_the_same_events(
    live_env: Path, recorder: Any, monkeypatch: pytest.MonkeyPatch, scenario: str
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", scenario)
    answer, tools = scenario_answer(scenario), expected_tools(scenario)
    by_source: dict[str, Seen] = {}
    for source in SOURCES:
        use_source(monkeypatch, source)
        events, message = await run_turn(f"{scenario} via {source}")
        got = by_source[source] = seen(events, message)
        turn = recorder.turns[-1]
        if source == "rpc":
            # agy's server was found and read (agy's exit then drains the database), when agy
            # ran long enough for that: a refusal can end before its server is found.
            assert turn.endpoint or ENDINGS[scenario] == "error"
        else:
            assert turn.source == source  # read from it to the end, not from a fallback
        assert got.stop_reason == ENDINGS[scenario], got.error
        assert got.streamed == got.final_text
        if ENDINGS[scenario] == "stop":
            assert got.streamed == answer and got.blocks == ("text",)
        else:
            assert got.error
        if scenario == "quota-error":
            assert got.error is not None and scenario_error(scenario).user_message in got.error
        assert [r[0] for r in got.runs] == [name for name, _ in tools]
        if ENDINGS[scenario] == "stop":
            assert [r[3] for r in got.runs] == [output for _, output in tools]
        assert got.usage[0] > 0 and got.usage[4] >= got.usage[0] + got.usage[1]
    assert by_source["rpc"] == by_source["sqlite"]
    assert by_source["stream-json"] == by_source["sqlite"]
    assert leftovers(live_env, recorder) == []


@pytest.mark.parametrize("source", SOURCES)
async def test_a_resumed_turn_reads_only_its_own_steps_from_every_source(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    # A resumed conversation: agy's step indices go on from the first turn's (stream-json's
    # `step_index` included), and the session's last final index comes from the source.
    use_source(monkeypatch, source)
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    store = SessionStore()
    first_events, first = await run_turn("count with me", session="three", store=store)
    assert seen(first_events, first).streamed == scenario_answer("two-turn", 0)
    record = store.get("three")
    assert record is not None and record.last_step_index > 0
    history: list[Any] = [UserMessage(content="count with me", timestamp=0), first]
    events, message = await run_turn("next", session="three", store=store, history=history)
    got = seen(events, message)
    assert got.streamed == got.final_text == scenario_answer("two-turn", 1)
    resumed = store.get("three")
    assert resumed is not None and resumed.conversation_id == record.conversation_id
    assert resumed.last_step_index > record.last_step_index
    assert leftovers(live_env) == []


async def test_stream_json_streams_while_agy_is_still_running(
    live_env: Path, recorder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `slow` leaves 350 ms (at speed 2) between text chunks and agy exits only after the last:
    # deltas seen while agy runs prove the stdout source streams, not reads the end.
    use_source(monkeypatch, "stream-json")
    monkeypatch.setenv("AGY_SIM_SCENARIO", "slow")
    monkeypatch.setenv("AGY_SIM_SPEED", "2")
    events, message = await run_turn("hello there")
    assert seen(events, message).streamed == scenario_answer("slow")
    running = [alive for event, alive in recorder.events if event.type == "text_delta"]
    assert len(running) >= 2 and any(running)
    assert recorder.turns[-1].source == "stream-json"
    assert leftovers(live_env, recorder) == []
