"""The plugin manager, the built-in decisions, and provider errors that need no agy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agy_provider.plugins.rpc_source import RpcEventSource

from agy_provider.agy.step import (
    Interaction,
    InteractionKind,
    PermissionRequest,
    Question,
    QuestionOption,
    Step,
    StepKind,
    StepStatus,
)
from agy_provider.errors import UsageError
from agy_provider.events import ErrorEvent
from agy_provider.hookspecs import hookimpl
from agy_provider.plugin_manager import (
    DEFAULT_PLUGINS,
    event_sources,
    get_plugin_manager,
    load_plugins,
)
from agy_provider.provider import complete_simple, stream_simple
from agy_provider.types import Context, ImageContent, Model, TextContent, UserMessage

MODEL = Model(
    id="m",
    name="m",
    api="agy",
    provider="agy",
    base_url="",
    reasoning=True,
    context_window=1,
    max_tokens=1,
)


def test_builtins_are_ordinary_plugins_and_loading_is_idempotent() -> None:
    load_plugins()
    load_plugins()
    pm = get_plugin_manager()
    names = {pm.get_name(p) for p in pm.get_plugins()}
    assert set(DEFAULT_PLUGINS) <= names
    assert set(event_sources()) == {"sqlite", "rpc"}


def test_a_duplicate_event_source_names_both_plugins() -> None:
    class Imposter:
        @hookimpl
        def register_event_sources(self, register: Any) -> None:
            register("sqlite", lambda turn: None)

    pm = get_plugin_manager()
    pm.register(Imposter(), name="imposter")
    try:
        with pytest.raises(UsageError, match="registered twice") as info:
            event_sources()
        assert "imposter" in str(info.value)
    finally:
        pm.unregister(name="imposter")


def test_source_choice_and_default_decisions() -> None:
    pm = get_plugin_manager()

    class Turn:
        event_source = "auto"
        permissions = "ask"

    turn = Turn()
    assert pm.hook.choose_event_source(turn=turn, available=["sqlite", "rpc"]) == "rpc"
    assert pm.hook.choose_event_source(turn=turn, available=["sqlite"]) == "sqlite"
    turn.event_source = "rpc"
    assert pm.hook.choose_event_source(turn=turn, available=["sqlite"]) is None
    assert pm.hook.decide_permission(request=None, step=None, turn=turn) is False
    turn.permissions = "skip"
    assert pm.hook.decide_permission(request=None, step=None, turn=turn) is True
    question = Question("Pick one", (QuestionOption("1", "a"),))
    assert pm.hook.answer_question(questions=[question], step=None, turn=turn) == [
        {"question": "Pick one", "selectedOptionIds": []}
    ]


def test_unsupported_interactions_are_refused_explicitly() -> None:
    def waiting(interaction: Interaction) -> Step:
        return Step(index=3, kind=StepKind.TOOL, status=StepStatus.WAITING, interaction=interaction)

    refuse = RpcEventSource._refusal
    assert refuse(waiting(Interaction(InteractionKind.OTHER, name="filePermission"))) == {
        "filePermission": {"allow": False}
    }
    assert refuse(waiting(Interaction(InteractionKind.OTHER, name="runCommand"))) == {
        "runCommand": {"confirm": False}
    }
    assert refuse(waiting(Interaction(InteractionKind.OTHER, name="browserAction"))) == {
        "permission": {"allow": False}
    }
    assert refuse(
        waiting(Interaction(InteractionKind.PERMISSION, PermissionRequest("command", "ls")))
    ) == {"permission": {"allow": False}}
    ask = Interaction(InteractionKind.QUESTION, questions=(Question("q?"),))
    assert refuse(waiting(ask)) == {
        "askQuestion": {"responses": [{"question": "q?", "selectedOptionIds": []}]}
    }


async def test_images_are_a_clear_error_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_PROVIDER_CONFIG", str(tmp_path / "config.json"))
    message = UserMessage(
        content=[
            TextContent(text="what is this?"),
            ImageContent(data="aGk=", mime_type="image/png"),
        ],
        timestamp=0,
    )
    stream = stream_simple(MODEL, Context(messages=[message]), agy_bin="/nonexistent/agy")
    events = [e async for e in stream]
    assert [e.type for e in events] == ["start", "error"]
    assert isinstance(events[-1], ErrorEvent)
    assert "image" in (events[-1].error.error_message or "")
    result = await complete_simple(MODEL, Context(messages=[message]), agy_bin="/nonexistent/agy")
    assert result.stop_reason == "error"


async def test_no_agy_is_a_clear_error_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_PROVIDER_CONFIG", str(tmp_path / "config.json"))
    monkeypatch.setenv("AGY_PROVIDER_SESSIONS", str(tmp_path / "sessions.json"))
    stream = stream_simple(
        MODEL, Context(messages=[UserMessage(content="hi", timestamp=0)]), agy_bin="no-such-agy"
    )
    message = await stream.result()
    assert message.stop_reason == "error"
    assert "agy-sim" in (message.error_message or "")
