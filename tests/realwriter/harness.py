"""Drive Google's runtime (localharness, from the `google-antigravity` wheel) through a scenario.

The SDK's own `Agent` starts localharness with a storage folder of ours and our scripted Gemini
server as its model; while it runs a turn, our live sqlite source reads the database it writes,
exactly as the provider does (open, then poll/wait until the turn ends, fed to a StepAssembler).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agy_provider.plugins.sqlite_source import SqliteEventSource

from agy_provider.agy.database import iter_step_rows
from agy_provider.agy.database import open_conversation_db
from agy_provider.agy.step import Step
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import StepStatus
from agy_provider.assembly.assembler import StepAssembler
from agy_provider.offline.sqlite_recording import decode_row
from agy_provider.pi.events import AssistantMessageEvent
from realwriter.gemini_server import Reply
from realwriter.gemini_server import ScriptedGemini

__all__ = [
    "HERE",
    "LiveTurn",
    "RunResult",
    "Scenario",
    "harness_unavailable",
    "run_scenario",
]

HERE = Path(__file__).resolve().parent
# One turn of the runtime never takes this long with a scripted model; a hang fails, not blocks.
TURN_TIMEOUT = 60.0


@dataclasses.dataclass(frozen=True)
class Scenario:
    """What the model says (replies) and how the runtime is set up; the model name is `name`."""

    name: str
    turns: Sequence[str]
    replies: Sequence[Reply]
    enabled_tools: Sequence[str] | None = None
    deny: Sequence[str] = ()
    mcp: bool = False
    host_tool: bool = False
    # Turns from this one on run in a fresh runtime process that resumes the conversation.
    resume_at: int | None = None
    # Cancel the turn (the SDK's halt request) once a tool step of this name is running.
    cancel_tool: str = ""


@dataclasses.dataclass
class LiveTurn:
    """What the live sqlite source streamed during one turn."""

    events: list[AssistantMessageEvent]
    polls_with_changes: int
    skipped: list[tuple[int, str]]
    snapshots: list[Step]


@dataclasses.dataclass
class RunResult:
    db: Path
    conversation_id: str
    live: list[LiveTurn]
    workspace: Path
    sdk_errors: list[str]


def harness_unavailable() -> str:
    """Why the runtime cannot run here ("" when it can)."""
    try:
        from google.antigravity.connections.local import local_connection
    except ImportError as exc:
        return (
            f"google-antigravity is not installed ({exc}); "
            "to run this: .venv/bin/pip install -e '.[realwriter]' (part of the test extra)"
        )
    try:
        binary = local_connection._get_default_binary_path_external(None)
    except Exception as exc:  # the SDK raises a bare error when the binary is missing
        return f"localharness binary not found: {exc}"
    if not os.access(binary, os.X_OK):
        return f"localharness at {binary} is not executable"
    try:
        # With no config on stdin it says so and exits: proof that it runs on this machine.
        probe = subprocess.run(
            [binary], stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"localharness at {binary} cannot run here: {exc}"
    if b"InputConfig" not in probe.stdout + probe.stderr:
        return f"localharness at {binary} did not start (exit {probe.returncode})"
    return ""


def _config(s: Scenario, server: ScriptedGemini, storage: Path, workspace: Path, cid: str) -> Any:
    from google.antigravity import LocalAgentConfig
    from google.antigravity import types
    from google.antigravity.hooks import policy

    endpoint = types.GeminiAPIEndpoint(base_url=server.url, api_key="scripted")
    models = [
        types.ModelTarget(name=s.name, endpoint=endpoint),
        types.ModelTarget(name=s.name + "-image", types=[types.ModelType.IMAGE], endpoint=endpoint),
    ]
    policies: list[Any] = [policy.deny(name, reason="denied by the test") for name in s.deny]
    policies.append(policy.allow_all())
    kwargs: dict[str, Any] = {}
    if s.enabled_tools is not None:
        kwargs["capabilities"] = types.CapabilitiesConfig(enabled_tools=list(s.enabled_tools))
    if s.mcp:
        kwargs["mcp_servers"] = [
            types.McpStdioServer(
                name="inventory",
                command=sys.executable,
                args=[str(HERE / "mcp_server.py")],
                force_all_tools_eager=True,
            )
        ]
    if s.host_tool:
        kwargs["tools"] = [count_words]
    if cid:
        kwargs["conversation_id"] = cid
    # One quick retry: a scripted 429 ends the turn in milliseconds, not after real backoff.
    retry = types.RetryConfig(
        api_retry=types.ModelAPIRetryConfig(max_retries=1, initial_sleep_duration_ms=10)
    )
    # The runtime makes folders under $HOME (~/.gemini/antigravity): keep them in the test's tree.
    home = storage.parent / "home"
    home.mkdir(exist_ok=True)
    return LocalAgentConfig(
        env={"HOME": str(home)},
        models=models,
        retry_config=retry,
        save_dir=str(storage),
        app_data_dir=str(storage / "app"),
        workspaces=[str(workspace)],
        policies=policies,
        **kwargs,
    )


def count_words(text: str) -> int:
    """Count the words in a text (a host-side tool the SDK runs: AGENCY_TOOL_CALL rows)."""
    return len(text.split())


async def _poll(source: SqliteEventSource, *, force: bool = False) -> list[Step]:
    # The lead is turning poll into a coroutine; work with either shape.
    result: Any = source.poll(force=force)
    if inspect.isawaitable(result):
        result = await result
    return list(result)


async def _find_db(storage: Path, before: set[str], timeout: float = 20.0) -> Path:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        for path in storage.glob("*.db"):
            if path.name not in before:
                return path
        await asyncio.sleep(0.01)
    raise AssertionError(f"localharness wrote no database under {storage}")


def _last_index(db: Path) -> int:
    conn = open_conversation_db(db)
    try:
        (last,) = conn.execute("SELECT MAX(idx) FROM steps").fetchone()
    finally:
        conn.close()
    return -1 if last is None else int(last)


def read_steps(db: Path) -> list[Step]:
    """Every row of the database, decoded (for assertions on raw shapes)."""
    conn = open_conversation_db(db)
    try:
        return [decode_row(r) for r in iter_step_rows(conn)]
    finally:
        conn.close()


async def _follow(db: Path, after: int, done: asyncio.Event, model: str) -> LiveTurn:
    """The provider's pump: open the source, poll and wait until the turn ends, assemble."""
    source = SqliteEventSource(db, min_index=after)
    await source.open()
    assembler = StepAssembler(model=model, min_index=after + 1)
    events = assembler.start()
    changed = 0
    snapshots: list[Step] = []
    try:
        while not done.is_set():
            steps = await _poll(source)
            changed += bool(steps)
            snapshots.extend(steps)
            events.extend(assembler.feed(steps))
            await source.wait(0.05)
        steps = await _poll(source, force=True)
        snapshots.extend(steps)
        events.extend(assembler.feed(steps))
        events.extend(assembler.finish())
    finally:
        await source.aclose()
    return LiveTurn(
        events=events,
        polls_with_changes=changed,
        skipped=list(source.skipped),
        snapshots=snapshots,
    )


async def _cancel_when_running(db: Path, tool: str, conv: Any) -> None:
    while True:
        if db.exists():
            try:
                steps = read_steps(db)
            except Exception:
                steps = []
            if any(
                s.kind is StepKind.TOOL
                and s.tool is not None
                and s.tool.name == tool
                and s.status is StepStatus.RUNNING
                for s in steps
            ):
                await asyncio.sleep(0.3)  # let the command really start
                await conv.cancel()
                return
        await asyncio.sleep(0.05)


async def _drain(conv: Any) -> str:
    """Wait for the turn to end; the SDK's own error for it ("" when it ended cleanly)."""
    from google.antigravity import types

    try:
        async for _ in conv.receive_steps():
            pass
    except types.AntigravityCancelledError:
        return "cancelled"  # the cancel scenario's own halt request
    except (types.AntigravityExecutionError, types.AntigravityConnectionError) as exc:
        return str(exc)  # a model API failure: the database records it too
    return ""


async def run_scenario(s: Scenario, server: ScriptedGemini, root: Path) -> RunResult:
    """Run every turn of `s` in localharness, the live sqlite source following each turn."""
    from google.antigravity import Agent

    storage = root / s.name
    workspace = storage / "workspace"
    server.add(s.name, json.loads(json.dumps(list(s.replies)).replace("{ws}", str(workspace))))
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    (workspace / "src").mkdir(exist_ok=True)
    before = {p.name for p in storage.glob("*.db")}
    db: Path | None = None
    cid = ""
    live: list[LiveTurn] = []
    sdk_errors: list[str] = []
    turn = 0
    while turn < len(s.turns):
        stop = len(s.turns) if s.resume_at is None or turn >= s.resume_at else s.resume_at
        async with Agent(_config(s, server, storage, workspace, cid)) as agent:
            conv = agent.conversation
            for n in range(turn, stop):
                after = _last_index(db) if db is not None else -1
                await conv.send(s.turns[n])
                if db is None:
                    db = await _find_db(storage, before)
                done = asyncio.Event()
                follower = asyncio.create_task(_follow(db, after, done, s.name))
                canceller = None
                if s.cancel_tool:
                    canceller = asyncio.create_task(
                        _cancel_when_running(db, s.cancel_tool, conv)
                    )
                try:
                    sdk_errors.append(await asyncio.wait_for(_drain(conv), TURN_TIMEOUT))
                finally:
                    if canceller is not None:
                        canceller.cancel()
                    done.set()
                live.append(await follower)
            cid = agent.conversation_id or cid
        turn = stop
    assert db is not None
    return RunResult(
        db=db, conversation_id=cid, live=live, workspace=workspace, sdk_errors=sdk_errors
    )
