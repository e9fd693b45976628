"""The plugin manager, the built-in decisions, and provider errors that need no agy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agy_provider.plugins.rpc_source import RpcEventSource
from fakes import Script
from fakes import collect
from fakes import edges_for
from fakes import planner
from fakes import start_turn
from fakes import until
from fakes import user

from agy_provider.agy.step import Interaction
from agy_provider.agy.step import InteractionKind
from agy_provider.agy.step import PermissionRequest
from agy_provider.agy.step import Question
from agy_provider.agy.step import QuestionOption
from agy_provider.agy.step import Step
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import StepStatus
from agy_provider.errors import UsageError
from agy_provider.hookspecs import hookimpl
from agy_provider.live.provider import complete_simple
from agy_provider.live.provider import stream_simple
from agy_provider.live.provider import wait_for_turns
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.types import Context
from agy_provider.pi.types import ImageContent
from agy_provider.pi.types import Model
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import UserMessage
from agy_provider.plugin_manager import DEFAULT_PLUGINS
from agy_provider.plugin_manager import event_sources
from agy_provider.plugin_manager import get_plugin_manager
from agy_provider.plugin_manager import load_plugins

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
    assert set(event_sources()) == {"sqlite", "rpc", "stream-json"}


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


async def test_a_bad_image_is_a_clear_error_event_before_agy_is_looked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_PROVIDER_CONFIG", str(tmp_path / "config.json"))
    message = UserMessage(
        content=[
            TextContent(text="what is this?"),
            ImageContent(data="aGk=", mime_type="image/png"),  # "hi": not a PNG
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


# -- plugins load once per process; a broken one is skipped with a warning ------------------------

_PLUGIN_PROBE = """
import importlib.metadata, json, logging, sys, threading
logging.basicConfig(level=logging.WARNING, format="WARNING %(message)s")
scans = []
real = importlib.metadata.distributions
def counting(*args, **kwargs):  # every reading of the installed distributions goes through here
    scans.append(1)
    return real(*args, **kwargs)
importlib.metadata.distributions = counting

from agy_provider.plugin_manager import event_sources, get_plugin_manager, load_plugins
import fakeplug_good

# Many callers at once, and again and again: the first one loads, the others wait for it.
threads = [threading.Thread(target=get_plugin_manager) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for _ in range(5):
    load_plugins()
    sources = sorted(event_sources())
pm = get_plugin_manager()
print(json.dumps({
    "scans": len(scans),
    "registrations": fakeplug_good.REGISTRATIONS,
    "sources": sources,
    "plugins": sorted(pm.get_name(p) for p in pm.get_plugins()),
}))
"""


def _install_fake_plugins(folder: Path) -> None:
    """A real installed distribution on sys.path: dist-info with entry points, and its modules."""
    info = folder / "fakeplug-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[agy_provider]\nfake = fakeplug_good\nbroken = fakeplug_broken\n"
    )
    (folder / "fakeplug_good.py").write_text(
        "from agy_provider import hookimpl\n"
        "REGISTRATIONS = 0\n"
        "@hookimpl\n"
        "def register_event_sources(register):\n"
        "    global REGISTRATIONS\n"
        "    REGISTRATIONS += 1\n"
        "    register('fake', lambda turn: None)\n"
    )
    (folder / "fakeplug_broken.py").write_text("raise ImportError('fakeplug needs libfoo')\n")


@pytest.mark.parametrize("allow", [None, "fake"], ids=["all-installed", "allow-list"])
def test_plugins_load_once_per_process_and_a_broken_one_is_skipped(
    tmp_path: Path, allow: str | None
) -> None:
    import json
    import os
    import subprocess
    import sys

    _install_fake_plugins(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "AGY_PROVIDER_PLUGINS"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    if allow is not None:
        env["AGY_PROVIDER_PLUGINS"] = allow
    run = subprocess.run(
        [sys.executable, "-c", _PLUGIN_PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.splitlines()[-1])
    assert seen["scans"] == 1  # the installed distributions were read once
    assert seen["sources"] == ["fake", "rpc", "sqlite", "stream-json"]
    # event_sources() was called five times: the hook runs each time, the plugin loads once.
    assert seen["registrations"] == 5
    assert seen["plugins"].count("fake") == 1 and set(DEFAULT_PLUGINS) <= set(seen["plugins"])
    warnings = [line for line in run.stderr.splitlines() if line.startswith("WARNING")]
    if allow is None:
        assert len(warnings) == 1, run.stderr
        assert "'broken'" in warnings[0] and "libfoo" in warnings[0]
        assert "AGY_PROVIDER_PLUGINS" in warnings[0]
    else:
        assert warnings == [], run.stderr  # not on the allow-list: never even imported
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("allow", [None, "fake"], ids=["unset", "named"])
def test_under_tests_entry_points_load_only_when_named(tmp_path: Path, allow: str | None) -> None:
    # What this suite's conftest sets, as llm's does: an installed plugin must not change what
    # tests see unless the test names it.
    import json
    import os
    import subprocess
    import sys

    _install_fake_plugins(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "AGY_PROVIDER_PLUGINS"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    if allow is not None:
        env["AGY_PROVIDER_PLUGINS"] = allow
    probe = "import sys\nsys._called_from_test = True\n" + _PLUGIN_PROBE
    run = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.splitlines()[-1])
    builtins = ["rpc", "sqlite", "stream-json"]
    assert seen["sources"] == (["fake", *builtins] if allow else builtins)
    assert sys._called_from_test is True  # type: ignore[attr-defined]  # and this process is one


class _BrokenObserver:
    """A third-party `observe_event` with a bug: raises on one kind of event."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    @hookimpl
    def observe_event(self, event: AssistantMessageEvent, turn: Any) -> None:
        if event.type == self.kind:
            raise RuntimeError(f"observer bug on {event.type}")


async def test_an_observer_that_raises_never_costs_the_final_event(tmp_path: Path) -> None:
    pm = get_plugin_manager()
    pm.register(_BrokenObserver("text_end"), name="test-broken-observer")
    try:
        script = Script()
        stream = start_turn(edges_for(script, tmp_path))
        await until(lambda: script.sources)
        script.sources[0].enqueue([user(0), planner(1, "Hello", StepStatus.GENERATING)])
        await until(lambda: not script.sources[0].queue)
        script.processes[0].exit(0)
        events = await collect(stream)  # hung forever before: `done` was never pushed
        assert isinstance(events[-1], (DoneEvent, ErrorEvent))
        assert sum(isinstance(e, (DoneEvent, ErrorEvent)) for e in events) == 1
        await wait_for_turns()
    finally:
        pm.unregister(name="test-broken-observer")
