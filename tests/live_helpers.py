"""Helpers for end-to-end turns against agy-sim: real processes, real databases, real files."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from agy_provider.events import AssistantMessageEvent
from agy_provider.hookspecs import hookimpl
from agy_provider.options import AbortSignal, SimpleStreamOptions
from agy_provider.plugin_manager import get_plugin_manager
from agy_provider.provider import stream_simple
from agy_provider.sessions import SessionStore
from agy_provider.types import AssistantMessage, Context, Model, UserMessage

MODEL = Model(
    id="gemini-3.7-flash",
    name="Gemini 3.7 Flash",
    api="agy",
    provider="agy",
    base_url="",
    reasoning=True,
    context_window=1_000_000,
    max_tokens=65_536,
)


def agy_sim_path() -> str:
    found = shutil.which("agy-sim") or os.path.join(os.path.dirname(sys.executable), "agy-sim")
    assert os.path.exists(found), "agy-sim is not installed beside this Python"
    return found


@pytest.fixture
def live_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private agy state folder, config and session store; agy-sim as the agy binary."""
    app = tmp_path / "agy-state"
    monkeypatch.setenv("AGY_APP_DATA_DIR", str(app))
    monkeypatch.setenv("ANTIGRAVITY_APP_DATA_DIR", str(app))
    monkeypatch.setenv("AGY_PROVIDER_CONFIG", str(tmp_path / "config.json"))
    monkeypatch.setenv("AGY_PROVIDER_SESSIONS", str(tmp_path / "sessions.json"))
    monkeypatch.setenv("AGY_BIN", agy_sim_path())
    monkeypatch.setenv("AGY_SIM_NO_SERVER", "1")
    monkeypatch.setenv("AGY_EVENT_SOURCE", "sqlite")
    monkeypatch.setenv("AGY_SIM_SPEED", "4")
    monkeypatch.delenv("AGY_SIM_SCENARIO", raising=False)
    return app


@dataclasses.dataclass
class Observed:
    """What a throwaway plugin saw of a turn: each event with whether agy was still running."""

    events: list[tuple[AssistantMessageEvent, bool]] = dataclasses.field(default_factory=list)
    turns: list[Any] = dataclasses.field(default_factory=list)


class Recorder:
    def __init__(self) -> None:
        self.seen = Observed()

    @hookimpl
    def observe_event(self, event: AssistantMessageEvent, turn: Any) -> None:
        running = turn.process is not None and turn.process.returncode is None
        self.seen.events.append((event, running))
        if not self.seen.turns or self.seen.turns[-1] is not turn:
            self.seen.turns.append(turn)


@pytest.fixture
def recorder() -> Any:
    pm = get_plugin_manager()
    plugin = Recorder()
    pm.register(plugin, name="test-recorder")
    yield plugin.seen
    pm.unregister(name="test-recorder")


async def run_turn(
    prompt: str,
    *,
    session: str = "",
    history: list[Any] | None = None,
    signal: AbortSignal | None = None,
    store: SessionStore | None = None,
    cwd: str | None = None,
) -> tuple[list[AssistantMessageEvent], AssistantMessage]:
    messages = [*(history or []), UserMessage(content=prompt, timestamp=0)]
    stream = stream_simple(
        MODEL,
        Context(messages=messages),
        SimpleStreamOptions(session_id=session or None, signal=signal),
        store=store,
        cwd=cwd,
    )
    events = [event async for event in stream]
    return events, await stream.result()


def text_of(events: list[AssistantMessageEvent]) -> str:
    return "".join(getattr(e, "delta", "") for e in events if e.type == "text_delta")


def agy_processes(app: Path) -> list[psutil.Process]:
    """Live processes whose environment or command line mention this test's agy state folder."""
    found = []
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            blob = " ".join(proc.info["cmdline"] or []) + " ".join(
                f"{k}={v}" for k, v in (proc.info["environ"] or {}).items()
            )
        except (psutil.Error, TypeError):
            continue
        if str(app) in blob and proc.pid != os.getpid() and proc.status() != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found
