"""The blocking API (`agy_provider.hosts.sync`) on agy-sim: no event loop needed, and no agy left behind
however the caller stops — the events running out, `close()`, an exception, Ctrl-C (a real
SIGINT to a real process) or a `threading.Event` abort."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest
from host_helpers import conversations
from host_helpers import slow_start_scenario
from live_helpers import MODEL
from live_helpers import agy_processes
from live_helpers import expect_done
from live_helpers import expect_error
from live_helpers import leftovers
from live_helpers import scenario_answer

from agy_provider.errors import UsageError
from agy_provider.hosts.sync import complete
from agy_provider.hosts.sync import iter_events
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.types import Context
from agy_provider.pi.types import UserMessage
from agy_provider.store.sessions import SessionStore

pytestmark = pytest.mark.slow

HELLO = {"messages": [{"role": "user", "content": "hello"}]}


def agy_sims(app: Path) -> list[psutil.Process]:
    """This test's live agy-sim processes (a Python caller carrying the same state folder in its
    environment is not one)."""
    found = []
    for proc in agy_processes(app):
        with contextlib.suppress(psutil.Error):
            if any("agy-sim" in part for part in proc.cmdline()):
                found.append(proc)
    return found


def wait_for_agy(app: Path, bound: float = 60.0) -> None:
    """Return once an agy process of this test is alive (the bound only catches a hang)."""
    deadline = time.monotonic() + bound
    while not agy_sims(app):
        assert time.monotonic() < deadline, "agy never started"
        time.sleep(0.02)


def test_complete_runs_a_turn_without_an_event_loop(live_env: Path) -> None:
    message = complete(MODEL, HELLO)
    assert message.stop_reason == "stop"
    assert "".join(getattr(b, "text", "") for b in message.content) == scenario_answer("default")
    assert leftovers(live_env) == []  # nothing of the turn runs once complete() returns


def test_iter_events_streams_the_turn_and_ends_with_agy_gone(live_env: Path) -> None:
    events = list(iter_events(MODEL, Context(messages=[UserMessage(content="hi", timestamp=0)])))
    assert leftovers(live_env) == []
    final = events[-1]
    assert isinstance(final, DoneEvent)
    expect_done(events, final.message, scenario_answer("default"))


def test_a_two_prompt_conversation_is_one_agy_conversation(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    store = SessionStore()
    first = complete(
        MODEL,
        {"messages": [{"role": "user", "content": "one"}]},
        {"sessionId": "sync-1"},
        store=store,
    )
    second = complete(
        MODEL,
        Context(
            messages=[
                UserMessage(content="one", timestamp=0),
                first,
                UserMessage(content="two", timestamp=0),
            ]
        ),
        {"sessionId": "sync-1"},
        store=store,
    )
    assert conversations(live_env) == [store.get("sync-1").conversation_id]  # type: ignore[union-attr]
    assert "".join(getattr(b, "text", "") for b in second.content) == scenario_answer("two-turn", 1)


def test_misuse_raises_at_the_call(live_env: Path) -> None:
    with pytest.raises(UsageError, match=r"^context.messages:"):
        iter_events(MODEL, {"messages": "hello"})
    assert agy_processes(live_env) == []


def _until_running(events: object, app: Path) -> list[AssistantMessageEvent]:
    seen: list[AssistantMessageEvent] = [next(events)]  # type: ignore[call-overload]
    wait_for_agy(app)
    return seen


def test_closing_the_iterator_early_stops_agy(
    live_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", str(slow_start_scenario(tmp_path)))
    events = iter_events(MODEL, HELLO)
    seen = _until_running(events, live_env)
    assert [e.type for e in seen] == ["start"]
    events.close()
    assert leftovers(live_env) == []


def test_an_exception_in_the_caller_stops_agy(
    live_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", str(slow_start_scenario(tmp_path)))

    class Stop(Exception):
        pass

    with pytest.raises(Stop):
        for event in iter_events(MODEL, HELLO):
            assert event.type == "start"
            wait_for_agy(live_env)
            raise Stop
    assert leftovers(live_env) == []


def test_complete_honours_a_threading_event(
    live_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", str(slow_start_scenario(tmp_path)))
    abort = threading.Event()

    def abort_once_agy_runs() -> None:
        wait_for_agy(live_env)
        abort.set()

    threading.Thread(target=abort_once_agy_runs, daemon=True).start()
    message = complete(MODEL, HELLO, {"signal": abort})
    assert message.stop_reason == "aborted" and message.error_message
    assert leftovers(live_env) == []


def test_ctrl_c_in_a_real_process_leaves_no_agy(
    live_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", str(slow_start_scenario(tmp_path)))
    script = tmp_path / "caller.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            from agy_provider.hosts.sync import iter_events

            try:
                for event in iter_events("gemini-3.7-flash", {"messages": [{"role": "user", "content": "hi"}]}):
                    print(event.type, flush=True)
            except KeyboardInterrupt:
                print("interrupted", flush=True)
                sys.exit(130)
            """
        )
    )
    caller = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert caller.stdout is not None and caller.stdout.readline().strip() == "start"
        wait_for_agy(live_env)
        caller.send_signal(signal.SIGINT)
        out, err = caller.communicate(timeout=120)
    finally:
        if caller.poll() is None:
            caller.kill()
    assert caller.returncode == 130, err
    assert out.split() == ["interrupted"], (out, err)
    # The interrupted caller waited for agy's tree to end before it exited.
    assert leftovers(live_env) == []


def test_a_failed_turn_is_its_error_event_not_an_exception(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "quota-error")
    events = list(iter_events(MODEL, HELLO))
    final = events[-1]
    assert isinstance(final, ErrorEvent)
    expect_error(events, final.error)
    assert leftovers(live_env) == []
