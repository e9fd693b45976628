"""What hosts pass is accepted (`host_input`): pi's JSON, other ports' objects, options and abort
signals of any kind, system messages in the list; anything else is refused by name.

Other ports' objects come from the real packages (the `hosts` extra); each such test skips, saying
which package is missing, where it is not installed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import logging
import threading
from pathlib import Path
from typing import Any
from typing import TypedDict

import pytest
from host_helpers import slow_start_scenario
from host_helpers import until_agy_runs
from live_helpers import MODEL
from live_helpers import expect_done
from live_helpers import expect_error
from live_helpers import leftovers
from live_helpers import scenario_answer
from optional import PI_AI_CLIENT
from optional import need
from optional import own_folder
from waiting import until_true

from agy_provider.errors import UsageError
from agy_provider.live.provider import stream_simple
from agy_provider.live.provider import wait_for_turns
from agy_provider.live.warm.pool import POOL
from agy_provider.pi import abort_bridge
from agy_provider.pi.abort_bridge import bridge_signal
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.host_input import normalise_turn
from agy_provider.pi.options import AbortSignal
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.stream import AssistantMessageEventStream
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import ImageContent
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.pi.types import Tool
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import ToolResultMessage
from agy_provider.pi.types import Usage
from agy_provider.pi.types import UserMessage

PI_MODEL = {
    "id": "gemini-3.7-flash",
    "name": "Gemini 3.7 Flash",
    "api": "agy",
    "provider": "agy",
    "baseUrl": "",
    "reasoning": True,
    "input": ["text"],
    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
    "contextWindow": 1_000_000,
    "maxTokens": 65_536,
}
PI_CONTEXT = {
    "systemPrompt": "Be brief.",
    "messages": [
        {"role": "user", "content": "hi", "timestamp": 1},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "greet"},
                {"type": "text", "text": "Hello."},
                {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "a_b"}},
            ],
            "api": "x",
            "provider": "y",
            "model": "z",
            "usage": {
                "input": 1,
                "output": 2,
                "cacheRead": 0,
                "cacheWrite": 0,
                "totalTokens": 3,
                "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
            },
            "stopReason": "toolUse",
            "timestamp": 2,
        },
        {
            "role": "toolResult",
            "toolCallId": "c1",
            "toolName": "read",
            "content": [{"type": "text", "text": "file"}],
            "isError": False,
            "timestamp": 3,
        },
        {"role": "user", "content": [{"type": "text", "text": "and now?"}], "timestamp": 4},
    ],
    "tools": [{"name": "read", "description": "Read a file", "parameters": {"type": "object"}}],
}


def expected_context() -> Context:
    return Context(
        system_prompt="Be brief.",
        messages=[
            UserMessage(content="hi", timestamp=1),
            AssistantMessage(
                content=[
                    ThinkingContent("greet"),
                    TextContent("Hello."),
                    ToolCall("c1", "read", {"path": "a_b"}),
                ],
                api="x",
                provider="y",
                model="z",
                usage=Usage(input=1, output=2, total_tokens=3),
                stop_reason="toolUse",
                timestamp=2,
            ),
            ToolResultMessage(
                tool_call_id="c1",
                tool_name="read",
                content=[TextContent("file")],
                timestamp=3,
            ),
            UserMessage(content=[TextContent("and now?")], timestamp=4),
        ],
        tools=[Tool("read", "Read a file", {"type": "object"})],
    )


# --- pi's JSON and other ports' objects ------------------------------------------------------------


def test_pi_json_dicts_become_our_types() -> None:
    turn = normalise_turn(PI_MODEL, PI_CONTEXT, {"sessionId": "s1", "reasoning": "high"})
    assert turn.model == MODEL
    assert turn.context == expected_context()
    assert turn.options.session_id == "s1" and turn.options.reasoning == "high"
    assert turn.abort is None


def test_snake_case_json_and_typeddicts_are_the_same() -> None:
    class UserDict(TypedDict):
        role: str
        content: str
        timestamp: int

    user: UserDict = {"role": "user", "content": "hi", "timestamp": 1}
    result = {
        "role": "toolResult",
        "tool_call_id": "c1",
        "tool_name": "read",
        "content": [{"type": "text", "text": "file"}],
        "is_error": True,
    }
    turn = normalise_turn(
        {"id": "gemini-3.7-flash"},
        {"system_prompt": "s", "messages": [user, result, user]},
        {"session_id": "s2", "max_tokens": 10.0},
    )
    assert turn.context.system_prompt == "s"
    tool_result = turn.context.messages[1]
    assert isinstance(tool_result, ToolResultMessage)
    assert tool_result.tool_call_id == "c1" and tool_result.is_error and tool_result.timestamp == 0
    assert turn.options.session_id == "s2" and turn.options.max_tokens == 10
    # A bare model needs only its id; the rest takes agy's defaults.
    assert turn.model.id == "gemini-3.7-flash" and turn.model.provider == "agy"


def test_a_model_id_string_is_a_model() -> None:
    turn = normalise_turn("gemini-3.7-pro", {"messages": [{"role": "user", "content": "x"}]})
    assert turn.model.id == "gemini-3.7-pro" and turn.model.name == "gemini-3.7-pro"


def test_our_own_types_pass_through_unchanged() -> None:
    context = expected_context()
    options = SimpleStreamOptions(session_id="s")
    turn = normalise_turn(MODEL, context, options)
    assert turn.model is MODEL and turn.context is context and turn.options is options


def test_a_turn_built_of_our_types_passes_through_as_itself_every_time() -> None:
    # What serve (and `hosts/turns`, which normalises a host's input before `stream_simple`
    # does again) hands over: agy's Model, a Context of our messages with an image and tools,
    # options with metadata, a thinking level and our own signal. Nothing of it is read again
    # through the path for untyped ports: each part, down to each message, is the same object.
    from agy_provider.pi.agy_model import agy_model

    model = agy_model("gemini-3.7-pro")
    image = ImageContent(data="aGk=", mime_type="image/png")
    context = dataclasses.replace(
        expected_context(),
        messages=[
            *expected_context().messages,
            UserMessage(content=[TextContent("and this?"), image], timestamp=5),
        ],
    )
    signal = AbortSignal()
    options = SimpleStreamOptions(
        session_id="serve:k", reasoning="high", signal=signal, metadata={"agy_no_resume": True}
    )
    first = normalise_turn(model, context, options)
    again = normalise_turn(first.model, first.context, first.options)
    for turn in (first, again):
        assert turn.model is model and turn.context is context and turn.options is options
        assert all(a is b for a, b in zip(turn.context.messages, context.messages, strict=True))
        assert turn.abort is not None and turn.abort.signal is signal
    # An untyped port's list may hold our messages too: those are taken as they are.
    untyped = {"messages": [{"role": "user", "content": "x"}, *context.messages]}
    mixed = normalise_turn(model, untyped)
    assert all(a is b for a, b in zip(mixed.context.messages[1:], context.messages, strict=True))


def test_plain_dataclasses_and_objects_are_read_through_their_fields() -> None:
    @dataclasses.dataclass
    class Block:
        text: str
        type: str = "text"

    @dataclasses.dataclass
    class Message:
        content: list[Block]
        role: str = "user"

    class Options:
        def __init__(self) -> None:
            self.sessionId = "s3"
            self.reasoning = "off"

    turn = normalise_turn(MODEL, {"messages": [Message([Block("hey")])]}, Options())
    assert turn.context.messages == (UserMessage(content=[TextContent("hey")], timestamp=0),)
    assert turn.options.session_id == "s3" and turn.options.reasoning is None


def test_pi_ai_python_objects_and_its_transcript() -> None:
    pi_types = need("pi_ai.types", "pi-ai-python", "hosts")
    transcript = need("pi_ai.utils.transcript", "pi-ai-python", "hosts")
    context = pi_types.Context(
        messages=[pi_types.UserMessage("hi")],
        system_prompt="Be brief.",
        tools=[pi_types.Tool("read", "Read a file", {"type": "object"})],
    )
    turn = normalise_turn(pi_types.Model(id="m", api="agy", provider="agy"), context)
    assert turn.context.system_prompt == "Be brief."
    assert turn.context.tools == (Tool("read", "Read a file", {"type": "object"}),)
    # pi-ai-python hands providers a TranscriptContext: the prompt and tools as a system message.
    folded = normalise_turn("m", transcript.normalize_context(context)).context
    assert folded.system_prompt == "Be brief." and folded.tools == turn.context.tools
    assert [m.content for m in folded.messages] == ["hi"]


def test_pi_agent_core_pydantic_objects() -> None:
    core = need("pi_agent_core", "pi-agent-core", "hosts")
    context = core.AgentContext(
        system_prompt="sys",
        messages=[
            core.UserMessage(
                content=[
                    core.TextContent(text="hi"),
                    core.ImageContent(media_type="image/png", data="AA"),
                ]
            ),
            core.AssistantMessage(content=[core.TextContent(text="yo")], stop_reason="stop"),
        ],
    )
    cancel = asyncio.Event()
    options = core.SimpleStreamOptions(session_id="s4", reasoning="low", cancel_event=cancel)
    turn = normalise_turn(core.Model(api="agy", provider="agy", id="m"), context, options)
    user = turn.context.messages[0]
    assert isinstance(user, UserMessage) and not isinstance(user.content, str)
    assert user.content[1] == ImageContent("AA", "image/png")
    assert turn.options.session_id == "s4" and turn.options.reasoning == "low"
    assert turn.abort is not None and turn.options.signal is turn.abort.signal


def test_pi_agents_py_dataclasses() -> None:
    types = need("pi_agents.ai.types", "pi-agents-py", "hosts")
    context = types.Context(
        system_prompt="sys",
        messages=[
            types.UserMessage(content="hi"),
            types.AssistantMessage(content=[types.TextContent(text="yo")]),
        ],
        tools=[types.Tool(name="ls", description="list")],
    )
    turn = normalise_turn(
        types.Model(id="m", api="agy", provider="agy"),
        context,
        types.SimpleStreamOptions(session_id="s5"),
    )
    assert [type(m).__name__ for m in turn.context.messages] == ["UserMessage", "AssistantMessage"]
    assert turn.context.tools == (Tool("ls", "list", {}),)
    assert turn.options.session_id == "s5"


def test_system_messages_in_the_list_fold_into_the_system_prompt() -> None:
    turn = normalise_turn(
        MODEL,
        {
            "systemPrompt": "first",
            "messages": [
                {"role": "system", "content": "second"},
                {"role": "user", "content": "hi"},
                {"role": "developer", "content": [{"type": "text", "text": "third"}]},
                {"role": "system", "content": "", "sections": {"style": "fourth", "gone": None}},
                {"role": "user", "content": "again"},
            ],
        },
    )
    assert turn.context.system_prompt == "first\n\nsecond\n\nthird\n\nfourth"
    assert [m.role for m in turn.context.messages] == ["user", "user"]


# --- refusals name the field -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "context", "options", "names"),
    [
        (42, {"messages": []}, None, "model"),
        ({"name": "no id"}, {"messages": []}, None, "model.id"),
        ({"id": "m", "contextWindow": "big"}, {"messages": []}, None, "model.contextWindow"),
        (MODEL, None, None, "context"),
        (MODEL, {"messages": "hi"}, None, "context.messages"),
        (
            MODEL,
            {"messages": [{"role": "user", "content": "a"}, {"role": "robot"}]},
            None,
            "context.messages[1].role",
        ),
        (MODEL, {"messages": [{"role": "user", "content": 5}]}, None, "context.messages[0]"),
        (MODEL, {"messages": [], "tools": [{"description": "x"}]}, None, "context.tools[0].name"),
        (MODEL, {"messages": []}, {"signal": object()}, "options.signal"),
        (MODEL, {"messages": []}, {"reasoning": "extreme"}, "options.reasoning"),
        (MODEL, {"messages": []}, {"sessionId": 7}, "options.session_id"),
        (MODEL, {"messages": []}, "fast", "options"),
    ],
)
def test_anything_else_is_a_usage_error_naming_the_field(
    model: Any, context: Any, options: Any, names: str
) -> None:
    with pytest.raises(UsageError) as raised:
        normalise_turn(model, context, options)
    assert str(raised.value).startswith(names + ":"), str(raised.value)
    assert "expected" in str(raised.value) or "must" in str(raised.value)


def test_stream_simple_raises_before_a_stream_exists_for_misuse() -> None:
    # Synchronously, with no loop needed: nothing was started, nothing needs cleaning up.
    with pytest.raises(UsageError, match=r"^model:"):
        stream_simple(3.5, {"messages": []})


# --- abort signals -------------------------------------------------------------------------------


class FlagSignal:
    """A host's own signal with nothing but an `aborted` flag."""

    def __init__(self) -> None:
        self.aborted = False
        self.reason = "host reason"


def pi_ai_signal() -> tuple[Any, Any]:
    abort = need("pi_ai.abort", "pi-ai-python", "hosts")
    controller = abort.AbortController()
    return controller.signal, controller.abort


def pi_agent_loop_signal() -> tuple[Any, Any]:
    # pi-agent-loop installs beside pi-ai-client (their `pi_ai` clashes with pi-ai-python's), so
    # its abort module, which imports nothing of pi_ai, is loaded from there on its own.
    path = own_folder(PI_AI_CLIENT) / "pi_agent_loop" / "abort.py"
    spec = importlib.util.spec_from_file_location("pi_agent_loop_abort", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    AbortController = module.AbortController

    controller = AbortController()
    return controller.signal, controller.abort


def _kinds() -> dict[str, Any]:
    def ours() -> tuple[Any, Any]:
        signal = AbortSignal()
        return signal, signal.abort

    def asyncio_event() -> tuple[Any, Any]:
        event = asyncio.Event()
        return event, event.set

    def threading_event() -> tuple[Any, Any]:
        event = threading.Event()
        return event, event.set

    def flag() -> tuple[Any, Any]:
        signal = FlagSignal()
        return signal, lambda: setattr(signal, "aborted", True)

    return {
        "ours": ours,
        "asyncio.Event": asyncio_event,
        "threading.Event": threading_event,
        "aborted flag": flag,
        "pi-ai-python": pi_ai_signal,
        "pi-agent-loop": pi_agent_loop_signal,
    }


@pytest.mark.parametrize("kind", list(_kinds()))
async def test_every_kind_of_signal_aborts_ours_and_lets_go_when_the_turn_ends(kind: str) -> None:
    host_signal, raise_it = _kinds()[kind]()
    bridge = bridge_signal(host_signal)
    assert bridge is not None and not bridge.signal.aborted
    stream = AssistantMessageEventStream()
    bridge.attach(stream)
    threading.Thread(
        target=raise_it, daemon=True
    ).start() if kind == "threading.Event" else raise_it()
    await asyncio.wait_for(bridge.signal.wait(), 30)  # a hang bound only
    assert bridge.signal.aborted

    if kind == "ours":
        return  # the host's signal is ours: nothing to let go of
    # A turn whose stream ends first: the bridge lets go, and a later abort no longer reaches it.
    host_signal, raise_it = _kinds()[kind]()
    bridge = bridge_signal(host_signal)
    assert bridge is not None
    stream = AssistantMessageEventStream()
    earlier = set(abort_bridge._tasks)  # the first bridge's follow its turn, which never ended
    bridge.attach(stream)
    stream.end()

    def let_go() -> bool:
        """No watcher thread (it sees the end within its interval) and no task following the
        host's signal (an asyncio.Event's waiter, a listener's unsubscribe) is left."""
        watchers = [t for t in threading.enumerate() if t.name == "agy-provider abort watcher"]
        return not watchers and not abort_bridge._tasks - earlier

    await until_true(let_go, f"the bridge of a {kind} let go once the turn ended")
    raise_it()  # a listener still subscribed would abort ours right here
    await asyncio.sleep(0)  # and a callback the raise scheduled runs now
    assert not bridge.signal.aborted


async def test_an_already_raised_signal_aborts_at_once() -> None:
    event = threading.Event()
    event.set()
    bridge = bridge_signal(event)
    assert bridge is not None and bridge.signal.aborted


# --- live turns on agy-sim ------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_turn_from_pi_json_answers(live_env: Path) -> None:
    context = {"messages": [{"role": "user", "content": "hello", "timestamp": 0}]}
    stream = stream_simple(PI_MODEL, context, {"sessionId": "json-1"})
    events = [event async for event in stream]
    message = await stream.result()
    await wait_for_turns()
    expect_done(events, message, scenario_answer("default"))
    assert leftovers(live_env) == []


@pytest.mark.slow
async def test_host_tools_in_pi_json_are_offered_and_a_turn_that_calls_none_is_unchanged(
    live_env: Path, recorder: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Tools from pi JSON (`tools`, and a system message's `toolsAdded`) reach agy through the
    bridge's folder; agy (the default scenario) calls none, so the turn ends as without them."""
    context = {
        "messages": [
            {
                "role": "system",
                "content": "Be brief.",
                "toolsAdded": [{"name": "web_search", "description": "Search", "parameters": {}}],
            },
            {"role": "user", "content": "hello"},
        ],
        "tools": [{"name": "read_file", "description": "Read", "parameters": {}}],
    }
    with caplog.at_level(logging.WARNING):
        stream = stream_simple(MODEL, context)
        events = [event async for event in stream]
        message = await stream.result()
        await wait_for_turns()
    expect_done(events, message, scenario_answer("default"))
    assert caplog.records == [], [r.getMessage() for r in caplog.records]
    (turn,) = recorder.turns
    (folder,) = turn.process.request.extra_dirs
    # The bridge's folder goes with its agy: the turn's, or a warm agy kept for the next turn.
    POOL.shutdown()
    assert not Path(folder).exists()
    assert leftovers(live_env, recorder) == []


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["asyncio.Event", "threading.Event", "aborted flag"])
async def test_a_foreign_signal_aborts_a_running_turn(
    live_env: Path, recorder: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", str(slow_start_scenario(tmp_path)))
    host_signal, raise_it = _kinds()[kind]()
    stream = stream_simple(
        MODEL, {"messages": [{"role": "user", "content": "hi"}]}, {"signal": host_signal}
    )
    await until_agy_runs(live_env)
    raise_it()
    events = [event async for event in stream]
    message = await asyncio.wait_for(stream.result(), 60)
    await wait_for_turns()
    last = expect_error(events, message, reason="aborted")
    assert isinstance(last, ErrorEvent)
    assert leftovers(live_env, recorder) == []


def test_tools_a_transcript_adds_and_later_removes_are_not_offered() -> None:
    """pi-ai-python declares an agent's tools in the transcript: added, later removed."""
    turn = normalise_turn(
        PI_MODEL,
        {
            "messages": [
                {"role": "system", "toolsAdded": [{"name": "a"}, {"name": "b"}]},
                {"role": "user", "content": "hi"},
                {"role": "system", "toolsRemoved": ["a", {"name": "c"}]},
                {"role": "system", "toolsAdded": [{"name": "c"}]},
                {"role": "user", "content": "and now?"},
            ]
        },
    )
    assert [tool.name for tool in turn.context.tools or ()] == ["b", "c"]


# --- the folder agy works in (`cwd`) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda tmp: str(tmp) + "\0evil", "NUL"),
        (lambda tmp: str(tmp / "missing"), "does not exist"),
        (lambda tmp: str(tmp / "a-file"), "is not a folder"),
        (lambda tmp: "", "empty"),
        (lambda tmp: b"/tmp", "got bytes"),
        (lambda tmp: 42, "expected a folder path"),
    ],
    ids=["nul", "missing", "a-file", "empty", "bytes", "a-number"],
)
def test_a_bad_cwd_is_a_usage_error_saying_what_is_wrong(
    tmp_path: Path, make: Any, says: str
) -> None:
    from agy_provider.pi.host_input import checked_cwd

    (tmp_path / "a-file").write_text("x")
    with pytest.raises(UsageError, match=r"^cwd: ") as refused:
        checked_cwd(make(tmp_path))
    assert says in str(refused.value)


def test_a_good_cwd_is_made_absolute_and_none_stays_the_hosts_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agy_provider.pi.host_input import checked_cwd

    (tmp_path / "project").mkdir()
    monkeypatch.chdir(tmp_path)
    assert checked_cwd("project") == str(tmp_path / "project")
    assert checked_cwd(tmp_path / "project") == str(tmp_path / "project")
    assert checked_cwd(None) is None


def test_a_relative_cwd_when_the_current_folder_is_gone_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agy_provider.pi.host_input import checked_cwd

    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    with pytest.raises(UsageError, match="current folder no longer exists"):
        checked_cwd("project")
    with pytest.raises(UsageError, match="current folder no longer exists"):
        checked_cwd(None)


def test_stream_simple_refuses_a_nul_in_cwd_before_a_stream_exists(tmp_path: Path) -> None:
    # Before: the turn started and ended "agy-provider failed unexpectedly: ValueError: embedded
    # null byte".
    with pytest.raises(UsageError, match="NUL"):
        stream_simple(MODEL, {"messages": [{"role": "user", "content": "hi"}]}, cwd="/tmp\0x")


def test_the_command_line_names_a_cwd_that_is_not_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from agy_provider.cli import main

    monkeypatch.setenv("AGY_PROVIDER_CONFIG", str(tmp_path / "config.json"))
    monkeypatch.setenv("AGY_PROVIDER_SESSIONS", str(tmp_path / "sessions.json"))
    monkeypatch.setenv("AGY_BIN", str(tmp_path / "no-agy-needed"))
    (tmp_path / "a-file").write_text("x")
    out, err = io.StringIO(), io.StringIO()
    code = main(["chat", "--cwd", str(tmp_path / "a-file"), "hello"], out=out, err=err)
    assert code == 2, err.getvalue()
    assert "is not a folder" in err.getvalue() and str(tmp_path / "a-file") in err.getvalue()


# --- thinking levels -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        SimpleStreamOptions(reasoning="ultra"),  # type: ignore[arg-type]
        {"reasoning": "ultra"},
        {"thinkingLevel": "ultra"},
    ],
    ids=["our-options", "pi-json", "camel-alias"],
)
def test_an_unknown_thinking_level_is_refused_naming_the_valid_ones(options: Any) -> None:
    # Before: SimpleStreamOptions(reasoning="ultra") passed and the level was silently ignored.
    with pytest.raises(UsageError, match=r"^options\.reasoning: ") as refused:
        normalise_turn(MODEL, {"messages": []}, options)
    assert "minimal, low, medium, high, xhigh" in str(refused.value)
    assert "'ultra'" in str(refused.value)


def test_off_means_no_thinking_in_every_shape() -> None:
    for options in (SimpleStreamOptions(reasoning="off"), {"reasoning": "off"}):  # type: ignore[arg-type]
        assert normalise_turn(MODEL, {"messages": []}, options).options.reasoning is None


# --- lone surrogates -----------------------------------------------------------------------------

LONE = "\ud83d"  # a high surrogate without its low half: not encodable as UTF-8


def test_every_host_text_is_freed_of_lone_surrogates() -> None:
    from agy_provider.live.prompt import build_prompt
    from agy_provider.live.prompt import history_digest

    bad = f"text {LONE} here"
    context = Context(
        system_prompt=bad,
        messages=[
            UserMessage(content=bad, timestamp=0),
            AssistantMessage(
                content=[
                    ThinkingContent(thinking=bad),
                    TextContent(text=bad),
                    ToolCall(id="c1", name="lookup", arguments={bad: [bad, {"k": bad}]}),
                ],
                api="agy",
                provider="agy",
                model="m",
                stop_reason="toolUse",
                timestamp=0,
            ),
            ToolResultMessage(
                tool_call_id="c1",
                tool_name="lookup",
                content=[TextContent(text=bad)],
                timestamp=0,
            ),
            UserMessage(content=[TextContent(text=bad)], timestamp=0),
        ],
        tools=[Tool("lookup", bad, {"type": "object", "description": bad})],
    )
    for given in (context, context.to_json()):
        turn = normalise_turn(MODEL, given)
        dumped = repr(turn.context)
        assert LONE not in dumped and "text \ufffd here" in dumped
        # Before: UnicodeEncodeError (surrogates not allowed) from here, failing the turn.
        history_digest(turn.context.messages)
        build_prompt(turn.context, resume=False).encode("utf-8")
    emoji = Context(messages=[UserMessage(content="🙈 ❤️ こんにちは ∑", timestamp=0)])
    assert normalise_turn(MODEL, emoji).context is emoji  # valid text is left alone
