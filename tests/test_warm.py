"""The warm pool end to end against agy-sim: one agy per conversation kept across its turns, a
spare for the next new conversation, recycling on a change of settings, the bound, idle ends,
aborts, deaths between and in turns, and an agy that refuses to stay (AGY-FORMATS §2.4)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import stat
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from host_helpers import TOOL_PARAMETERS
from host_helpers import TOOL_SCENARIO
from host_helpers import tool_output
from live_helpers import MODEL
from live_helpers import Observed
from live_helpers import agy_sim_path
from live_helpers import expect_done
from live_helpers import expect_error
from live_helpers import leftovers
from live_helpers import run_turn
from live_helpers import scenario_answer
from live_helpers import scenario_planners
from live_helpers import text_of
from waiting import until_true

from agy_provider.agy.argv import TurnRequest
from agy_provider.live.provider import stream_simple
from agy_provider.live.provider import wait_for_turns
from agy_provider.live.warm.pool import POOL
from agy_provider.live.warm.pool import TRANSITIONS
from agy_provider.live.warm.pool import WarmAction
from agy_provider.live.warm.pool import WarmAgy
from agy_provider.live.warm.pool import WarmEvent
from agy_provider.live.warm.pool import WarmPool
from agy_provider.live.warm.pool import WarmState
from agy_provider.live.warm.pool import WarmStateError
from agy_provider.live.warm.pool import warm_key
from agy_provider.pi.options import AbortSignal
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import Tool
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import ToolResultMessage
from agy_provider.pi.types import UserMessage

pytestmark = pytest.mark.slow


def agys() -> list[WarmAgy]:
    return POOL.agys()


def the_agy_of(conversation: str) -> WarmAgy:
    (agy,) = [a for a in agys() if a.conversation_id == conversation and not a.spare]
    return agy


async def two_turns(seen: Observed, session: str = "s") -> tuple[Any, Any, Any, Any]:
    """Two turns of one conversation: each turn's `TurnContext` and final message."""
    _, first = await run_turn("one", session=session)
    turn_one = seen.turns[-1]
    history = [UserMessage(content="one", timestamp=0), first]
    _, second = await run_turn("two", session=session, history=history)
    return turn_one, seen.turns[-1], first, second


def refusing_agy(folder: Path) -> Path:
    """An agy older than one process for many turns: it knows no --input-format without -p
    (exit 2 naming the flag, as Go's flag package says it), and is agy-sim otherwise."""
    old = folder / "old-agy"
    old.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        "if '--input-format' in sys.argv and '-p' not in sys.argv:\n"
        "    sys.stderr.write('flag provided but not defined: -input-format\\n')\n"
        "    sys.exit(2)\n"
        f"os.execv({agy_sim_path()!r}, [{agy_sim_path()!r}, *sys.argv[1:]])\n"
    )
    old.chmod(old.stat().st_mode | stat.S_IEXEC)
    return old


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# --- the lifecycle table and the key -------------------------------------------------------------


def moves() -> dict[WarmState, frozenset[WarmState]]:
    """The states each state can move to (itself aside), as the table says."""
    found: dict[WarmState, set[WarmState]] = {state: set() for state in WarmState}
    for (state, _event), (new, _action) in TRANSITIONS.items():
        if new is not state:
            found[state].add(new)
    return {state: frozenset(targets) for state, targets in found.items()}


def test_every_state_can_end_and_nothing_leaves_closed() -> None:
    for state, targets in moves().items():
        if state not in (WarmState.CLOSING, WarmState.CLOSED):
            assert WarmState.CLOSING in targets, state
            # Ended by the pool, or dead on its own: from every live state.
            assert TRANSITIONS[state, WarmEvent.RETIRED] == (WarmState.CLOSING, WarmAction.END)
            assert TRANSITIONS[state, WarmEvent.EXITED][0] is WarmState.CLOSING
    assert moves()[WarmState.CLOSED] == frozenset()
    assert moves()[WarmState.CLOSING] == frozenset({WarmState.CLOSED})


@pytest.mark.parametrize("state", list(WarmState))
@pytest.mark.parametrize("event", list(WarmEvent))
def test_every_state_and_event_does_what_the_table_says_or_is_refused_by_name(
    tmp_path: Path, state: WarmState, event: WarmEvent
) -> None:
    pool = WarmPool()
    # Never started (pid 0: status is not told); owned by the pool, which fires its events.
    agy = WarmAgy("key", TurnRequest(prompt="", cwd=str(tmp_path), agy_bin="agy"), owner=pool)
    agy.state = state
    if (state, event) in TRANSITIONS:
        new, action = TRANSITIONS[state, event]
        assert pool.fire(agy, event) is action
        assert agy.state is new
    else:
        with pytest.raises(WarmStateError, match=f"{event.name} in state {state.name}"):
            pool.fire(agy, event)
        assert agy.state is state


def test_the_key_is_the_settings_not_the_turn(tmp_path: Path) -> None:
    base = TurnRequest(prompt="hi", cwd=str(tmp_path), agy_bin=sys.executable, warm=True)
    same = [
        TurnRequest(prompt="other", cwd=str(tmp_path), agy_bin=sys.executable),
        TurnRequest(prompt="hi", cwd=str(tmp_path), agy_bin=sys.executable, conversation_id="a-1"),
        TurnRequest(
            prompt="hi",
            cwd=str(tmp_path),
            agy_bin=sys.executable,
            log_file="/x.log",
            csrf_token="t",
        ),
    ]
    other = tmp_path / "other"
    other.mkdir()
    different = [
        TurnRequest(
            prompt="hi", cwd=str(tmp_path), agy_bin=sys.executable, model_args=("--model", "m")
        ),
        TurnRequest(prompt="hi", cwd=str(tmp_path), agy_bin=sys.executable, mode="plan"),
        TurnRequest(prompt="hi", cwd=str(tmp_path), agy_bin=sys.executable, skip_permissions=True),
        TurnRequest(prompt="hi", cwd=str(other), agy_bin=sys.executable),
        TurnRequest(prompt="hi", cwd=str(tmp_path), agy_bin=sys.executable, env={"A": "1"}),
    ]
    env = {"PATH": "/bin"}
    assert all(warm_key(r, env) == warm_key(base, env) for r in same)
    assert len({warm_key(r, env) for r in [base, *different]}) == len(different) + 1
    assert warm_key(base, {"PATH": "/usr/bin"}) != warm_key(base, env)


# --- one agy per conversation -------------------------------------------------------------------


async def test_the_turns_of_a_conversation_share_one_agy(
    live_env: Path, recorder: Observed
) -> None:
    first, second, m1, m2 = await two_turns(recorder)
    assert m1.stop_reason == "stop" and m2.stop_reason == "stop", (
        m1.error_message,
        m2.error_message,
    )
    conversation = first.binding.conversation_id
    assert second.binding.conversation_id == conversation
    assert first.process.pid == second.process.pid  # the same agy answered both
    agy = the_agy_of(conversation)
    assert agy.pid == first.process.pid and agy.turns == 2 and agy.state is WarmState.READY
    assert leftovers(live_env) == []  # all that is alive is the pool's


async def test_without_warm_each_turn_runs_its_own_agy(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, recorder: Observed
) -> None:
    monkeypatch.setenv("AGY_WARM", "0")
    first, second, m1, m2 = await two_turns(recorder)
    assert m1.stop_reason == m2.stop_reason == "stop"
    assert first.binding.conversation_id == second.binding.conversation_id
    assert first.process.pid != second.process.pid
    assert agys() == []
    assert leftovers(live_env) == []


async def test_a_spare_answers_the_next_new_conversation(
    live_env: Path, recorder: Observed
) -> None:
    events, message = await run_turn("hello")
    expect_done(events, message, scenario_answer("default"))
    (spare,) = [a for a in agys() if a.spare]
    assert "--conversation" not in spare.argv  # a new conversation, whose id agy will state
    first, _, _, _ = await two_turns(recorder, session="next")
    assert first.process.pid == spare.pid  # the spare took the new conversation
    assert not spare.spare


async def test_a_change_of_settings_recycles_the_agy_on_the_same_conversation(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, first = await run_turn("one", session="s")
    (old,) = [a for a in agys() if not a.spare]
    # Another agy on the conversation while the old one lives would be a second writer of its
    # database: the old one must be gone before the new one starts.
    alive_at_start: list[bool] = []
    start = WarmAgy.start

    def start_after_the_old_one(agy: WarmAgy) -> None:
        if agy.conversation_id == old.conversation_id:
            alive_at_start.append(alive(old.pid))
        start(agy)

    monkeypatch.setattr(WarmAgy, "start", start_after_the_old_one)
    monkeypatch.setenv("AGY_MODE", "accept-edits")
    history = [UserMessage(content="one", timestamp=0), first]
    _events, second = await run_turn("two", session="s", history=history)
    assert second.stop_reason == "stop", second.error_message
    assert alive_at_start == [False]
    assert not alive(old.pid) and old.state is WarmState.CLOSED
    new = the_agy_of(old.conversation_id)
    assert new.pid != old.pid and "accept-edits" in new.argv
    assert "--conversation" in new.argv


async def test_the_bound_ends_the_least_recently_used_idle_agy(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_WARM_MAX", "2")
    monkeypatch.setenv("AGY_WARM_SPARES", "0")
    pids = []
    for name in ("a", "b", "c"):
        _, message = await run_turn(name, session=name)
        assert message.stop_reason == "stop", message.error_message
        pids.append([a.pid for a in agys()])
    assert len(pids[-1]) == 2
    oldest = pids[0][0]
    assert oldest not in pids[-1] and not alive(oldest)


async def test_an_idle_agy_is_ended_after_the_idle_timeout(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_WARM_IDLE_TIMEOUT", "0.5")
    _, message = await run_turn("hello")
    assert message.stop_reason == "stop", message.error_message
    kept = agys()
    assert kept
    for agy in kept:
        assert await asyncio.to_thread(agy.exited.wait, 60), "an idle agy outlived its timeout"
    assert agys() == [] and leftovers(live_env) == []


# --- aborts and deaths ----------------------------------------------------------------------------


async def test_an_abort_ends_the_warm_agy_and_the_next_turn_continues(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, recorder: Observed
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "slow")
    monkeypatch.setenv("AGY_WARM_SPARES", "0")
    abort = AbortSignal()

    async def abort_at_first_text() -> None:
        while not any(e.type == "text_delta" for e, _ in recorder.events):
            await asyncio.sleep(0.01)
        abort.abort("test")

    aborter = asyncio.create_task(abort_at_first_text())
    events, aborted = await run_turn("slow", session="s", signal=abort)
    await aborter
    expect_error(events, aborted, reason="aborted")
    interrupted = recorder.turns[-1]
    assert not alive(interrupted.process.pid) and agys() == []  # ended, not kept
    history = [UserMessage(content="slow", timestamp=0), aborted]
    events, again = await run_turn("go on", session="s", history=history)
    assert again.stop_reason == "stop", again.error_message
    resumed = recorder.turns[-1]
    assert resumed.binding.conversation_id == interrupted.binding.conversation_id
    assert resumed.process.pid != interrupted.process.pid
    assert leftovers(live_env) == []


async def test_an_agy_that_died_between_turns_is_replaced(live_env: Path) -> None:
    _, first = await run_turn("one", session="s")
    (agy,) = [a for a in agys() if not a.spare]
    os.killpg(agy.pid, signal.SIGKILL)
    assert await asyncio.to_thread(agy.exited.wait, 30)
    history = [UserMessage(content="one", timestamp=0), first]
    _events, second = await run_turn("two", session="s", history=history)
    assert second.stop_reason == "stop", second.error_message
    new = the_agy_of(agy.conversation_id)
    assert new.pid != agy.pid


async def test_an_agy_that_dies_mid_turn_ends_that_turn_with_its_last_words(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, recorder: Observed
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "crash")
    events, message = await run_turn("hello", session="s")
    expect_error(events, message)
    assert "exited with code 2" in (message.error_message or "")
    assert "panic" in (message.error_message or "").lower()
    assert text_of(events) == scenario_planners("crash")[0]
    assert [a for a in agys() if not a.spare] == []
    crashed = recorder.turns[-1]
    # The next turn continues the conversation in a new warm agy (this one answers: agy-sim's
    # prompt marker plays the default scenario's turn).
    history = [UserMessage(content="hello", timestamp=0), message]
    events, again = await run_turn("[agy-sim:default] go on", session="s", history=history)
    expect_done(events, again, scenario_answer("default"))
    resumed = recorder.turns[-1]
    assert resumed.binding.conversation_id == crashed.binding.conversation_id
    assert resumed.process.pid != crashed.process.pid
    assert leftovers(live_env) == []


async def test_an_agy_that_refuses_to_stay_runs_each_turn_alone(
    live_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("AGY_BIN", str(refusing_agy(tmp_path)))
    with caplog.at_level(logging.WARNING, logger="agy_provider.live.warm"):
        for prompt in ("one", "two"):
            events, message = await run_turn(prompt)
            expect_done(events, message, scenario_answer("default"))
    said = [
        r.getMessage() for r in caplog.records if "does not run as one process" in r.getMessage()
    ]
    assert len(said) == 1, said  # said once
    assert agys() == []
    assert leftovers(live_env) == []


# --- host tools: the warm agy's own bridge -------------------------------------------------------


async def tool_round(
    context: Context, session: str
) -> tuple[AssistantMessage, AssistantMessage, Context]:
    """One turn that calls the host's tool and, answered, finishes: (toolUse, done, context)."""
    stream = stream_simple(MODEL, context, SimpleStreamOptions(session_id=session))
    first = await stream.result()
    assert first.stop_reason == "toolUse", first.error_message
    (call,) = [b for b in first.content if isinstance(b, ToolCall)]
    answer = ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=[TextContent(text=tool_output("A-1042"))],
        timestamp=0,
    )
    context = Context(messages=[*context.messages, first, answer], tools=context.tools)
    stream = stream_simple(MODEL, context, SimpleStreamOptions(session_id=session))
    done = await stream.result()
    await wait_for_turns()
    assert done.stop_reason == "stop", done.error_message
    return first, done, Context(messages=[*context.messages, done], tools=context.tools)


async def test_a_warm_agy_serves_the_host_tools_from_a_bridge_that_lives_with_it(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, recorder: Observed
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", TOOL_SCENARIO)
    monkeypatch.setenv("AGY_WARM_SPARES", "0")
    lookup = Tool("lookup_order", "Look up an order's status by its id.", TOOL_PARAMETERS)
    ask = UserMessage(content="Where is my order A-1042?", timestamp=0)
    _, _, context = await tool_round(Context(messages=[ask], tools=[lookup]), "orders")
    (agy,) = agys()
    assert agy.bridge is not None and agy.turns == 1
    folder = agy.extra_dirs[-1]
    again = Context(messages=[*context.messages, ask], tools=[lookup])
    _, _, context = await tool_round(again, "orders")
    assert agys() == [agy] and agy.turns == 2  # the same agy, its bridge still serving
    assert os.path.isdir(folder)
    # Another tool list is another agy (agy reads its MCP servers once): the conversation goes on
    # in a new one, and the old one and its bridge folder go.
    other = Tool("lookup_order", "Look up an order (v2).", TOOL_PARAMETERS)
    more = Context(messages=[*context.messages, ask], tools=[other])
    await tool_round(more, "orders")
    (new,) = agys()
    assert new.pid != agy.pid and new.conversation_id == agy.conversation_id
    assert not alive(agy.pid) and not os.path.exists(folder)
    assert leftovers(live_env) == []


async def test_a_warm_turns_usage_is_its_own_share_of_agys_running_totals(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A warm agy's `result` totals run over its turns (AGY-FORMATS §2.2): turn 2's usage read
    # from stdout (result(2) − result(1)) is turn 2's alone, as the database counts it.
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    usages = {}
    for source in ("sqlite", "stream-json"):
        monkeypatch.setenv("AGY_EVENT_SOURCE", source)
        _, first = await run_turn("count with me", session=source)
        history = [UserMessage(content="count with me", timestamp=0), first]
        _, second = await run_turn("next", session=source, history=history)
        assert second.stop_reason == "stop", second.error_message
        (agy,) = [a for a in agys() if a.turns == 2]
        assert agy.last_total is not None  # the running total agy stated
        u = second.usage
        usages[source] = (u.input, u.output, u.cache_read, u.total_tokens)
        POOL.shutdown()
    assert usages["stream-json"] == usages["sqlite"]
    assert usages["sqlite"][2] > 0  # turn 2 read from cache, as the scenario says


async def test_status_lists_the_warm_agys_of_this_host(live_env: Path) -> None:
    """The pool tells other processes what is warm (`live/warm/registry`): `agy-provider status`
    in another process lists the conversation's agy and the spare, and nothing once they end."""
    import json
    import subprocess

    from agy_provider.live.warm import registry as warm_registry

    _, message = await run_turn("hello", session="s")
    assert message.stop_reason == "stop", message.error_message
    kept = {a.pid: a for a in agys()}

    def listed() -> dict[int, str]:
        return {e.pid: e.state for e in warm_registry.list_warm()}

    # Written by the registry's own thread: wait for it to catch up.
    await until_true(
        lambda: set(listed()) == set(kept) and "starting" not in listed().values(),
        f"the registry lists the warm agys {sorted(kept)} as started (it lists {listed()})",
    )
    states = listed()
    assert set(states) == set(kept)
    assert sorted(states.values()) == ["ready", "spare"]
    status = subprocess.run(
        [sys.executable, "-m", "agy_provider.cli", "status", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    warm = json.loads(status.stdout)["warm"]
    assert {w["pid"] for w in warm} == set(kept), status.stderr
    (conversation,) = [w for w in warm if w["state"] == "ready"]
    assert conversation["conversation_id"] == (message.response_id or "").split(":")[2]
    assert all(w["rss_bytes"] and w["rss_bytes"] > 0 for w in warm)
    POOL.shutdown()
    assert listed() == {}


async def test_a_turn_offering_tools_that_gets_no_warm_agy_serves_them_itself(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # An agy that refuses to stay: the turn falls back to `agy -p`, whose host tools are then
    # served by the turn's own bridge (its folder one more --add-dir), as a one-shot turn's are.
    monkeypatch.setenv("AGY_BIN", str(refusing_agy(tmp_path)))
    monkeypatch.setenv("AGY_SIM_SCENARIO", TOOL_SCENARIO)
    lookup = Tool("lookup_order", "Look up an order's status by its id.", TOOL_PARAMETERS)
    ask = UserMessage(content="Where is my order A-1042?", timestamp=0)
    first, done, _ = await tool_round(Context(messages=[ask], tools=[lookup]), "alone")
    assert first.stop_reason == "toolUse" and done.stop_reason == "stop"
    assert agys() == []
    assert leftovers(live_env) == []


async def test_a_turn_longer_than_the_pipe_reaches_the_warm_agy_whole(
    live_env: Path, recorder: Observed
) -> None:
    """A line the pipe takes whole goes from the loop in one write; a longer one is written on
    as agy reads it. Either way agy gets the whole turn."""
    from agy_provider.agy.database import iter_step_rows
    from agy_provider.agy.database import open_conversation_db
    from agy_provider.agy.rows import decode_step_row
    from agy_provider.agy.step import StepKind

    _, first = await run_turn("one", session="long")
    long_prompt = "".join(f"line {n} of a long paste\n" for n in range(20_000))  # ~500 KB
    assert len(long_prompt) > 8 * 65536
    _, second = await run_turn(
        long_prompt, session="long", history=[UserMessage(content="one", timestamp=0), first]
    )
    assert second.stop_reason == "stop", second.error_message
    turn = recorder.turns[-1]
    assert turn.process.pid == recorder.turns[0].process.pid  # the same warm agy
    conn = open_conversation_db(turn.binding.path)
    try:
        said = [
            step.text
            for row in iter_step_rows(conn)
            if (step := decode_step_row(row.index, row.step_type, row.status, row.payload)).kind
            is StepKind.USER
        ]
    finally:
        conn.close()
    assert said[-1] == long_prompt


async def test_every_warm_agy_is_read_by_one_thread(live_env: Path, recorder: Observed) -> None:
    """A thread per agy made fifty agys a hundred threads waking for every line."""
    import threading

    for session in ("a", "b", "c"):
        await two_turns(recorder, session=session)
    assert len([a for a in agys() if not a.spare]) == 3
    warm_threads = [t.name for t in threading.enumerate() if t.name.startswith("agy-provider-warm")]
    assert warm_threads.count("agy-provider-warm-hub") == 1
    # Besides the hub, the pool's own (reaper, registry writer, the bridges' loop): none per agy.
    pids = [str(a.pid) for a in agys()]
    assert not [name for name in warm_threads if any(pid in name for pid in pids)], warm_threads
