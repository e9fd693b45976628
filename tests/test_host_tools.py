"""Host tools through a live turn: agy (agy-sim's MCP client) calls a tool of the host's
`context.tools` through the MCP bridge; the stream ends `toolUse`, agy waits, and the host's next
`stream_simple` with the tool's result resumes the same agy turn. Also from pi-ai-python's real
`Agent`, whose tool must run exactly once and whose answer must use its result."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from host_helpers import TOOL_PARAMETERS
from host_helpers import TOOL_SCENARIO
from host_helpers import conversations
from host_helpers import tool_answer
from host_helpers import tool_arguments
from host_helpers import tool_output
from live_helpers import MODEL
from live_helpers import expect_done
from live_helpers import expect_error
from live_helpers import leftovers
from live_helpers import scenario_answer
from live_helpers import terminal
from optional import need
from waiting import HANG_BOUND

from agy_provider.live.provider import stream_simple
from agy_provider.live.provider import wait_for_turns
from agy_provider.live.runner import build_argv
from agy_provider.live.turn import PARKED
from agy_provider.live.turn import TurnDriver
from agy_provider.live.warm.pool import POOL
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.options import AbortSignal
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.pi.types import Tool
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import ToolResultMessage
from agy_provider.pi.types import UserMessage

pytestmark = pytest.mark.slow

LOOKUP = Tool("lookup_order", "Look up an order's status by its id.", TOOL_PARAMETERS)
RESULT = tool_output("A-1042")


def result_for(call: ToolCall, text: str = RESULT) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=[TextContent(text=text)],
        timestamp=0,
    )


@pytest.fixture
def tool_env(live_env: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGY_SIM_SCENARIO", TOOL_SCENARIO)
    return live_env


async def first_part(context: Context, **kwargs: Any) -> tuple[list[Any], AssistantMessage]:
    stream = stream_simple(MODEL, context, **kwargs)
    events = [event async for event in stream]
    return events, await stream.result()


@pytest.mark.parametrize("source", ["sqlite", "rpc"])
async def test_a_host_tool_call_parks_the_turn_and_the_result_resumes_it(
    tool_env: Path, recorder: Any, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    if source == "rpc":
        monkeypatch.delenv("AGY_SIM_NO_SERVER")
    monkeypatch.setenv("AGY_EVENT_SOURCE", source)
    context = Context(
        messages=[UserMessage(content="Where is my order A-1042?", timestamp=0)], tools=[LOOKUP]
    )
    events, first = await first_part(context, options=SimpleStreamOptions(session_id="orders"))

    # The first message: what agy thought, then the call, ending `toolUse` while agy waits.
    last = terminal(events)
    assert isinstance(last, DoneEvent) and last.reason == "toolUse"
    assert first.stop_reason == "toolUse"
    (call,) = [b for b in first.content if isinstance(b, ToolCall)]
    assert (call.name, dict(call.arguments)) == ("lookup_order", tool_arguments())
    kinds = [e.type for e in events]
    assert kinds[-4:] == ["toolcall_start", "toolcall_delta", "toolcall_end", "done"]
    delta = next(e for e in events if e.type == "toolcall_delta")
    assert json.loads(delta.delta) == tool_arguments()
    assert any(isinstance(b, ThinkingContent) for b in first.content)
    assert first.usage.input > 0
    running = [turn for turn in recorder.turns if turn.process.returncode is None]
    assert len(running) == 1, "agy waits for the host's result"
    (held,) = PARKED.all()
    assert isinstance(held, TurnDriver)
    parked = held
    first_call, options = parked.call, parked.how

    # The host answers: the same agy turn goes on, in a new message, with the result in it.
    context = Context(messages=[*context.messages, first, result_for(call)], tools=context.tools)
    stream = stream_simple(MODEL, context, SimpleStreamOptions(session_id="orders"))
    # The resumed turn answers a new call value; its options and its first call stay as they were.
    assert parked.call is not first_call and parked.call.stream is stream
    assert parked.call.context is context and first_call.context is not context
    assert parked.how is options
    events = [event async for event in stream]
    second = await stream.result()
    await wait_for_turns()
    expect_done(events, second, tool_answer())
    assert second.stop_reason == "stop"
    assert not any(isinstance(b, ToolCall) for b in second.content)
    # The MCP step of a host-run tool is not shown again: the host's transcript holds the call.
    assert "lookup_order" not in "".join(
        b.thinking for b in second.content if isinstance(b, ThinkingContent)
    )
    # Each step's usage is counted in one message: the answer's model call is in the second.
    assert second.usage.input > 0 and second.usage.input != first.usage.input
    assert len(recorder.turns) == 1 and len(conversations(tool_env)) == 1
    assert leftovers(tool_env, recorder) == []
    assert PARKED.all() == []

    # The session resumes after the tool loop: the next prompt continues the conversation.
    monkeypatch.setenv("AGY_SIM_SCENARIO", "default")
    context = Context(
        messages=[*context.messages, second, UserMessage(content="thanks", timestamp=0)]
    )
    events, third = await first_part(context, options=SimpleStreamOptions(session_id="orders"))
    await wait_for_turns()
    expect_done(events, third, scenario_answer("default"))
    assert len(conversations(tool_env)) == 1
    assert leftovers(tool_env, recorder) == []


@pytest.mark.parametrize("warm", [False, True], ids=["one-shot", "warm"])
async def test_the_bridge_folder_is_given_to_agy_and_removed(
    tool_env: Path, recorder: Any, monkeypatch: pytest.MonkeyPatch, warm: bool
) -> None:
    # One-shot, the bridge is the turn's; warm, it is the agy's and goes when that agy ends.
    monkeypatch.setenv("AGY_WARM", "1" if warm else "0")
    context = Context(
        messages=[UserMessage(content="Where is A-1042?", timestamp=0)], tools=[LOOKUP]
    )
    _events, first = await first_part(context)
    (turn,) = recorder.turns
    folders = list(turn.process.request.extra_dirs)
    argv = build_argv(turn.process.request)
    added = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--add-dir"]
    assert len(folders) == 1 and folders[0] in added
    config = Path(folders[0]) / ".agents" / "mcp_config.json"
    assert config.is_file() and (os.stat(config).st_mode & 0o777) == 0o600
    (call,) = [b for b in first.content if isinstance(b, ToolCall)]
    stream = stream_simple(
        MODEL,
        Context(messages=[*context.messages, first, result_for(call)], tools=context.tools),
    )
    await stream.result()
    await wait_for_turns()
    if warm:
        assert Path(folders[0]).exists()  # kept with the agy for the conversation's next turn
        POOL.shutdown()
    assert not Path(folders[0]).exists()


async def test_a_host_that_moves_on_ends_the_waiting_turn(
    tool_env: Path, recorder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new user message in the session instead of the tool's result: the waiting agy is ended
    (and its session saved) before the new turn starts."""
    options = SimpleStreamOptions(session_id="moves-on")
    context = Context(
        messages=[UserMessage(content="Where is A-1042?", timestamp=0)], tools=[LOOKUP]
    )
    _events, first = await first_part(context, options=options)
    assert first.stop_reason == "toolUse"
    monkeypatch.setenv("AGY_SIM_SCENARIO", "default")
    events, message = await first_part(
        Context(messages=[UserMessage(content="never mind; say hi", timestamp=0)]), options=options
    )
    await wait_for_turns()
    expect_done(events, message, scenario_answer("default"))
    assert len(recorder.turns) == 2
    assert recorder.turns[0].process.returncode is not None
    assert leftovers(tool_env, recorder) == []


async def test_a_host_that_never_answers_is_bounded(
    tool_env: Path, recorder: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("AGY_HOST_TOOL_TIMEOUT", "0.5")
    options = SimpleStreamOptions(session_id="late")
    context = Context(
        messages=[UserMessage(content="Where is A-1042?", timestamp=0)], tools=[LOOKUP]
    )
    with caplog.at_level(logging.INFO, logger="agy_provider"):
        _events, first = await first_part(context, options=options)
        assert first.stop_reason == "toolUse"
        (task,) = [t for t in asyncio.all_tasks() if "TurnDriver.run" in repr(t.get_coro())]
        await asyncio.wait_for(task, 60)  # a hang bound only
    assert leftovers(tool_env, recorder) == []
    assert any("host_tool_timeout" in r.getMessage() for r in caplog.records)
    # Its results arriving later start a new turn that carries them (nothing is lost).
    (call,) = [b for b in first.content if isinstance(b, ToolCall)]
    monkeypatch.setenv("AGY_SIM_SCENARIO", "default")
    monkeypatch.setenv("AGY_HOST_TOOL_TIMEOUT", "600")
    late = Context(messages=[*context.messages, first, result_for(call)], tools=context.tools)
    events, message = await first_part(late, options=options)
    await wait_for_turns()
    expect_done(events, message, scenario_answer("default"))
    # The session was saved with the `toolUse` message the host holds: the results go on in
    # the same agy conversation, as the newest input alone.
    assert recorder.turns[-1].prompt.startswith(f'<tool_result tool="lookup_order">\n{RESULT}')
    assert len(conversations(tool_env)) == 1
    assert leftovers(tool_env, recorder) == []


@pytest.mark.parametrize("when", ["while parked", "on resume"])
async def test_an_abort_ends_a_parked_turn(tool_env: Path, recorder: Any, when: str) -> None:
    first_signal = AbortSignal()
    context = Context(
        messages=[UserMessage(content="Where is A-1042?", timestamp=0)], tools=[LOOKUP]
    )
    _events, first = await first_part(context, options=SimpleStreamOptions(signal=first_signal))
    (call,) = [b for b in first.content if isinstance(b, ToolCall)]
    (task,) = [t for t in asyncio.all_tasks() if "TurnDriver.run" in repr(t.get_coro())]
    if when == "while parked":
        # pi's Agent aborts the controller of its last request when the user stops it mid-tool.
        first_signal.abort("stopped by the user")
        await asyncio.wait_for(task, 60)  # a hang bound only
        assert leftovers(tool_env, recorder) == []
        return
    second_signal = AbortSignal()
    second_signal.abort("stopped by the user")
    stream = stream_simple(
        MODEL,
        Context(messages=[*context.messages, first, result_for(call)], tools=context.tools),
        SimpleStreamOptions(signal=second_signal),
    )
    events = [event async for event in stream]
    message = await stream.result()
    await asyncio.wait_for(task, 60)
    expect_error(events, message, reason="aborted")
    assert leftovers(tool_env, recorder) == []


# --- pi-ai-python's Agent ----------------------------------------------------------------------


async def test_a_pi_ai_python_agent_runs_the_host_tool_once_and_answers_with_it(
    tool_env: Path, recorder: Any
) -> None:
    pi_ai = need("pi_ai", "pi-ai-python", "hosts")
    pi_agent = need("pi_agent", "pi-ai-python", "hosts")
    from agy_provider.hosts.pi_ai_python import provider

    runs: list[dict[str, Any]] = []

    @pi_agent.agent_tool  # type: ignore[untyped-decorator]
    async def lookup_order(order_id: str, verbose: bool = False) -> str:
        """Look up an order's status by its id.

        Args:
            order_id: The order's id.
            verbose: Whether to give details.
        """
        runs.append({"order_id": order_id, "verbose": verbose})
        return tool_output(order_id)

    models = pi_ai.create_models()
    models.set_provider(provider())
    agent = pi_agent.Agent(
        initial_state={
            "model": models.get_model("agy", "default"),
            "tools": [lookup_order],
        },
        stream_fn=models,
        session_id="pi-agent-tools",
    )
    await agent.prompt("Where is my order A-1042?")
    await wait_for_turns()

    assert runs == [tool_arguments()]  # exactly once, with the model's arguments
    messages = [m for m in agent.state.messages if m.role != "system"]  # pi's tool declarations
    assert [m.role for m in messages] == ["user", "assistant", "toolResult", "assistant"]
    asked, tool_result, final = messages[1:]
    assert asked.stop_reason == "toolUse"
    assert [b.name for b in asked.content if b.type == "toolCall"] == ["lookup_order"]
    assert tool_result.tool_call_id == next(b.id for b in asked.content if b.type == "toolCall")
    assert final.stop_reason == "stop"
    assert "".join(b.text for b in final.content if b.type == "text") == tool_answer()
    assert len(recorder.turns) == 1 and len(conversations(tool_env)) == 1
    assert leftovers(tool_env, recorder) == []


# --- a host-supplied executor: the calls run at once, the turn stays one message ---------------


async def test_a_tool_executor_runs_each_call_at_once_in_one_message(
    tool_env: Path, recorder: Any
) -> None:
    calls: list[ToolCall] = []

    async def execute(call: ToolCall) -> str:
        calls.append(call)
        return RESULT

    context = Context(
        messages=[UserMessage(content="Where is A-1042?", timestamp=0)], tools=[LOOKUP]
    )
    events, message = await first_part(context, tool_executor=execute)
    await wait_for_turns()
    expect_done(events, message, tool_answer())
    assert [(c.name, dict(c.arguments)) for c in calls] == [("lookup_order", tool_arguments())]
    assert not any(isinstance(b, ToolCall) for b in message.content)
    # The run shows in the turn's tool block, as agy's own tools do.
    thinking = "".join(b.thinking for b in message.content if isinstance(b, ThinkingContent))
    assert "▸ host/lookup_order A-1042" in thinking and RESULT in thinking
    assert leftovers(tool_env, recorder) == []


def test_the_sync_api_takes_a_plain_function_and_its_exception_is_the_models_error_result(
    tool_env: Path,
) -> None:
    from agy_provider.hosts.sync import complete

    def execute(call: ToolCall) -> str:
        raise LookupError(f"no order {call.arguments['order_id']}")

    context = Context(
        messages=[UserMessage(content="Where is A-1042?", timestamp=0)], tools=[LOOKUP]
    )
    message = complete(MODEL, context, tool_executor=execute)
    assert message.stop_reason == "stop"
    text = "".join(b.text for b in message.content if isinstance(b, TextContent))
    # agy-sim answers with whatever the tool gave it: here the failure, naming the tool.
    assert "lookup_order" in text and "LookupError: no order A-1042" in text
    assert leftovers(tool_env) == []


async def test_agy_ending_while_the_host_works_reaches_the_hosts_next_call(
    tool_env: Path, recorder: Any
) -> None:
    """agy dies while the host runs its tool: the host's stream has already ended (`toolUse`),
    so the turn waits for the host's results all the same and tells that next call."""
    context = Context(
        messages=[UserMessage(content="Where is A-1042?", timestamp=0)], tools=[LOOKUP]
    )
    _events, first = await first_part(context)
    (turn,) = recorder.turns
    os.kill(turn.process.pid, signal.SIGKILL)
    assert await turn.process.wait(HANG_BOUND) is not None, "agy outlived SIGKILL"
    (call,) = [b for b in first.content if isinstance(b, ToolCall)]
    stream = stream_simple(
        MODEL, Context(messages=[*context.messages, first, result_for(call)], tools=context.tools)
    )
    events = [event async for event in stream]
    message = await stream.result()
    await wait_for_turns()
    error = expect_error(events, message)
    assert "agy exited with code -9" in (error.error.error_message or "")
    assert len(recorder.turns) == 1  # the same turn, not a new one
    assert leftovers(tool_env, recorder) == []


class ListenerSignal:
    """A host's signal of the listener kind (pi-ai-python's and pi-agent-loop's shape)."""

    def __init__(self) -> None:
        self.aborted = False
        self.reason: object = None
        self._listeners: list[Any] = []

    def add_listener(self, listener: Any) -> Any:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def abort(self, reason: object = None) -> None:
        self.aborted, self.reason = True, reason
        for listener in list(self._listeners):
            listener()


@pytest.mark.parametrize("kind", ["asyncio.Event", "listener"])
async def test_the_hosts_own_signal_still_reaches_a_parked_turn(
    tool_env: Path, recorder: Any, kind: str
) -> None:
    """The host's stream has ended (`toolUse`), but its abort signal follows the turn: a user
    stopping the agent while the tool runs ends agy's waiting turn."""
    host_signal: Any = asyncio.Event() if kind == "asyncio.Event" else ListenerSignal()
    context = Context(
        messages=[UserMessage(content="Where is A-1042?", timestamp=0)], tools=[LOOKUP]
    )
    _events, first = await first_part(context, options={"signal": host_signal})
    assert first.stop_reason == "toolUse"
    (task,) = [t for t in asyncio.all_tasks() if "TurnDriver.run" in repr(t.get_coro())]
    if isinstance(host_signal, asyncio.Event):
        host_signal.set()
    else:
        host_signal.abort("stopped by the user")
    await asyncio.wait_for(asyncio.shield(task), 60)  # a hang bound: host_tool_timeout is 600 s
    assert leftovers(tool_env, recorder) == []
    if isinstance(host_signal, ListenerSignal):
        assert host_signal._listeners == []  # unsubscribed once the turn ended


async def test_wait_for_turns_ends_a_turn_that_parks_while_it_waits(
    tool_env: Path, recorder: Any
) -> None:
    context = Context(
        messages=[UserMessage(content="Where is A-1042?", timestamp=0)], tools=[LOOKUP]
    )
    stream = stream_simple(MODEL, context)
    # Called before agy calls the tool: the turn parks meanwhile, and ends at once.
    await asyncio.wait_for(wait_for_turns(), 60)  # a hang bound: host_tool_timeout is 600 s
    assert (await stream.result()).stop_reason == "toolUse"
    assert PARKED.all() == [] and leftovers(tool_env, recorder) == []


async def test_a_new_turn_on_another_loop_ends_the_parked_turn_of_its_session(
    tool_env: Path, recorder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A threaded server: a session's turn parked on loop A, its next turn started on loop B."""
    parked, release = threading.Event(), threading.Event()

    async def on_loop_a() -> str:
        context = Context(
            messages=[UserMessage(content="Where is A-1042?", timestamp=0)], tools=[LOOKUP]
        )
        stream = stream_simple(MODEL, context, SimpleStreamOptions(session_id="shared"))
        first = await stream.result()
        parked.set()
        # Loop A serves other requests meanwhile.
        assert await asyncio.to_thread(release.wait, HANG_BOUND), "never released"
        await wait_for_turns()
        return first.stop_reason

    loop_a = asyncio.ensure_future(asyncio.to_thread(asyncio.run, on_loop_a()))
    assert await asyncio.to_thread(parked.wait, 60)
    monkeypatch.setenv("AGY_SIM_SCENARIO", "default")
    try:
        events, message = await asyncio.wait_for(
            first_part(
                Context(messages=[UserMessage(content="hi", timestamp=0)]),
                options=SimpleStreamOptions(session_id="shared"),
            ),
            60,  # a hang bound only
        )
    finally:
        release.set()
    assert await asyncio.wait_for(loop_a, 60) == "toolUse"
    await wait_for_turns()
    expect_done(events, message, scenario_answer("default"))
    assert recorder.turns[0].process.returncode is not None
    assert leftovers(tool_env, recorder) == []


def test_the_sync_api_runs_the_tool_loop_in_one_agy_turn(tool_env: Path, recorder: Any) -> None:
    """Without an event loop: `complete` returns `toolUse` while agy waits on a private loop;
    the next `complete` with the results resumes that same turn."""
    from agy_provider.hosts.sync import complete

    context = Context(
        messages=[UserMessage(content="Where is A-1042?", timestamp=0)], tools=[LOOKUP]
    )
    first = complete(MODEL, context)
    assert first.stop_reason == "toolUse"
    (call,) = [b for b in first.content if isinstance(b, ToolCall)]
    assert dict(call.arguments) == tool_arguments()
    second = complete(
        MODEL, Context(messages=[*context.messages, first, result_for(call)], tools=context.tools)
    )
    assert second.stop_reason == "stop"
    assert "".join(b.text for b in second.content if isinstance(b, TextContent)) == tool_answer()
    assert len(recorder.turns) == 1 and len(conversations(tool_env)) == 1
    assert leftovers(tool_env, recorder) == []


def test_a_program_that_exits_with_agy_waiting_for_its_tools_leaves_nothing(
    tool_env: Path, tmp_path: Path
) -> None:
    """The sync API's caller got `toolUse` and exits without answering: the exit ends agy's
    waiting turn (saving its session) quietly, and no process of it is left."""
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "caller.py"
    script.write_text(
        textwrap.dedent(
            """
            from agy_provider.hosts.sync import complete
            tool = {"name": "lookup_order", "description": "Look up an order",
                    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}
            message = complete("default", {"messages": [{"role": "user", "content": "A-1042?"}],
                                           "tools": [tool]}, {"sessionId": "exits"})
            print(message.stop_reason, flush=True)
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["toolUse"]
    assert "Traceback" not in done.stderr, done.stderr
    assert leftovers(tool_env) == []
    from agy_provider.store.sessions import SessionStore

    assert SessionStore().get("exits") is not None  # the session was saved at the exit


async def test_two_hosts_bringing_the_same_results_resume_the_parked_turn_once(
    tool_env: Path, recorder: Any
) -> None:
    context = Context(
        messages=[UserMessage(content="Where is my order A-1042?", timestamp=0)], tools=[LOOKUP]
    )
    _events, first = await first_part(context)  # no session id: the stateless host's way
    assert first.stop_reason == "toolUse"
    (call,) = [b for b in first.content if isinstance(b, ToolCall)]
    answered = Context(messages=[*context.messages, first, result_for(call)], tools=[LOOKUP])
    streams = [stream_simple(MODEL, answered), stream_simple(MODEL, answered)]
    results = await asyncio.gather(*(s.result() for s in streams))
    await wait_for_turns()
    stops = sorted(m.stop_reason for m in results)
    assert stops == ["error", "stop"], [m.error_message for m in results]
    (refused,) = [m for m in results if m.stop_reason == "error"]
    assert "already resumed" in (refused.error_message or "")
    (resumed,) = [m for m in results if m.stop_reason == "stop"]
    assert "".join(b.text for b in resumed.content if isinstance(b, TextContent)) == tool_answer()
    assert len(recorder.turns) == 1 and len(conversations(tool_env)) == 1
    # Once that turn has ended, the same results are a host's late retry: a new turn takes them.
    assert PARKED.all() == [] and not PARKED.resumed_by_another(answered.messages)
