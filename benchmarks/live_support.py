"""What the live-turn benchmarks share: a private agy-sim world, one timed turn, agy-sim alone, lag.

Used by bench_turn, bench_concurrency, bench_resume and bench_startup. Only temp folders, agy-sim
and loopback; nothing here asserts a time.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import datetime
import gc
import json
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The scenario's chunk spacing divided by this: the default scenario's four text chunks arrive
# ~28 ms apart (its thinking before them), so a turn takes ~0.8 s and still streams.
SIM_SPEED = "4"
# A benchmark turn that takes longer than this is stuck: the run says so and goes on.
TURN_DEADLINE = 60.0
PROMPT = "hi"


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`th percentile (nearest rank) of `values`; nan when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def run_header(title: str) -> None:
    """Date, the code measured (commit, uncommitted engine edits), load, cores, Python."""
    import agy_provider

    code = Path(agy_provider.__file__).resolve().parents[1]
    if code == ROOT:
        commit = _git("rev-parse", "--short", "HEAD") or "?"
        dirty = _git("status", "--porcelain", "--", "agy_provider", "plugins")
        what = f"commit {commit}{' + uncommitted engine edits' if dirty else ''}"
    else:  # an exported tree on PYTHONPATH (see the README): it names its commit in COMMIT
        stamp = code / "COMMIT"
        commit = stamp.read_text().strip() if stamp.exists() else "?"
        what = f"code of commit {commit} from {code}"
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"{title}")
    print(
        f"  {now}, {what}, load average {load}, {os.cpu_count()} cores, "
        f"Python {sys.version.split()[0]}"
    )


def _git(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip()


def agy_sim() -> str:
    """The agy-sim executable, found the way the provider finds agy."""
    from agy_provider.live.runner import find_agy

    return find_agy("agy-sim")


@contextlib.contextmanager
def private_world(prefix: str) -> Iterator[Path]:
    """A temp folder holding agy-sim's state, our config and sessions, and the turns' cwd.

    Sets the environment of this process (children inherit it) and restores it afterwards.
    """
    saved = dict(os.environ)
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        state = tmp / "agy-state"
        work = tmp / "work"
        work.mkdir()
        for name in ("AGY_SIM_SCENARIO", "AGY_SIM_NO_SERVER", "AGY_EVENT_SOURCE", "AGY_MODEL"):
            os.environ.pop(name, None)
        os.environ.update(
            {
                "ANTIGRAVITY_APP_DATA_DIR": str(state),
                "AGY_APP_DATA_DIR": str(state),
                "AGY_PROVIDER_CONFIG": str(tmp / "config.json"),
                "AGY_PROVIDER_SESSIONS": str(tmp / "sessions.json"),
                "AGY_BIN": agy_sim(),
                "AGY_SIM_SPEED": SIM_SPEED,
                "AGY_TURN_TIMEOUT": str(TURN_DEADLINE),
                "AGY_IDLE_TIMEOUT": str(TURN_DEADLINE),
                # Only the built-in plugins: what a turn costs here, not what else is installed.
                "AGY_PROVIDER_PLUGINS": "",
            }
        )
        _bytecode_ahead(tmp)
        yield tmp
    finally:
        os.environ.clear()
        os.environ.update(saved)
        shutil.rmtree(tmp, ignore_errors=True)


def _bytecode_ahead(tmp: Path) -> None:
    """Bytecode for every agy-sim and language-server start, made once by a warm-up turn.

    An installed package has its bytecode; a checkout may not (stale or missing caches, or
    PYTHONDONTWRITEBYTECODE set, as on this machine), and then each of the 40 simulator processes
    of a 20-turn run compiles its modules again: tens of ms of CPU apiece, competing with the
    provider being measured. One agy-sim turn (in a state folder of its own) writes the caches of
    all it imports into a private prefix that every later child reads (PYTHONPYCACHEPREFIX);
    the provider's own modules are compiled into it too, for the cold turns' fresh processes.
    Nothing in the checkout or site-packages is written.
    """
    prefix = tmp / "pycache"
    os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["ANTIGRAVITY_APP_DATA_DIR"] = str(tmp / "warm-up-state")
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            [agy_sim(), "-p", "warm up", "--output-format", "stream-json"],
            env=env,
            cwd=tmp / "work",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
            start_new_session=True,
        )
    import agy_provider

    package = Path(agy_provider.__file__).resolve().parent
    # The provider, and what a host's import line and a first turn pull in from the standard
    # library and site-packages (whose own caches a prefix hides). Since issue 17 the import line
    # no longer loads the turn machinery (the first turn does): it is imported here by name, so
    # that the cold turns of any tree find its bytecode (an older tree has no turn_start).
    warm_host = (
        "import asyncio, json, sqlite3, subprocess\n"
        "from agy_provider import Context, Model, SimpleStreamOptions, UserMessage, stream_simple\n"
        "from agy_provider.plugin_manager import get_plugin_manager\n"
        "get_plugin_manager()\n"
        "try:\n"
        "    import agy_provider.live.turn_start\n"
        "except ImportError:\n"
        "    pass\n"
    )
    for argv in (
        ["-m", "compileall", "-q", str(package), str(package.parent / "plugins")],
        ["-c", warm_host],
    ):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                [sys.executable, *argv],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=120,
            )


def end_tree(pid: int) -> None:
    """Kill a process we started and every descendant it has (a stuck benchmark child)."""
    import psutil

    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for proc in tree:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def model() -> Any:
    from agy_provider import Model

    return Model(
        id="gemini-3.7-flash",
        name="Gemini 3.7 Flash",
        api="agy",
        provider="agy",
        base_url="",
        reasoning=True,
        context_window=1_000_000,
        max_tokens=65_536,
    )


@dataclasses.dataclass
class TurnTiming:
    """One turn through `stream_simple`, times in seconds from the call."""

    source: str
    ok: bool = False
    error: str = ""
    first_event: float = float("nan")  # the first event after `start`
    first_text: float = float("nan")
    end: float = float("nan")  # `done` or `error` reached the caller
    text_deltas: int = 0  # text deltas before `done`
    text: str = ""
    cpu: float = float("nan")  # this process's CPU (all threads) during the turn
    called_at: float = float("nan")  # `time.perf_counter()` when `stream_simple` was called
    # Each text delta: (seconds from the call, the answer's length in characters so far).
    deltas: list[tuple[float, int]] = dataclasses.field(default_factory=list)


async def timed_turn(
    source: str,
    *,
    prompt: str = PROMPT,
    session: str = "",
    cwd: Path | None = None,
    history: Sequence[Any] = (),
    store: Any = None,
) -> TurnTiming:
    """Run one turn with `event_source=source` and time what the caller sees."""
    from agy_provider import Context
    from agy_provider import SimpleStreamOptions
    from agy_provider import UserMessage
    from agy_provider import stream_simple

    timing = TurnTiming(source)
    cpu0 = time.process_time()
    t0 = timing.called_at = time.perf_counter()
    stream = stream_simple(
        model(),
        Context(messages=[*history, UserMessage(content=prompt, timestamp=0)]),
        SimpleStreamOptions(session_id=session or None),
        cwd=str(cwd) if cwd else None,
        event_source=source,
        store=store,
    )

    async def consume() -> None:
        async for event in stream:
            now = time.perf_counter() - t0
            if event.type == "start":
                continue
            if timing.first_event != timing.first_event:  # nan: nothing yet
                timing.first_event = now
            if event.type == "text_delta":
                timing.text_deltas += 1
                timing.text += event.delta
                timing.deltas.append((now, len(timing.text)))
                if timing.first_text != timing.first_text:
                    timing.first_text = now
            elif event.type == "done":
                timing.ok = True
                timing.end = now
            elif event.type == "error":
                timing.error = event.error.error_message or event.reason
                timing.end = now

    try:
        await asyncio.wait_for(consume(), TURN_DEADLINE + 30)
    except TimeoutError:
        timing.error = f"no done/error event within {TURN_DEADLINE + 30:.0f}s"
    timing.cpu = time.process_time() - cpu0
    return timing


@dataclasses.dataclass
class SimTiming:
    """agy-sim alone (`-p PROMPT --output-format stream-json`) from spawn to exit."""

    ok: bool = False
    first_step: float = float("nan")  # first step_update of the answer (not the user's input)
    first_text: float = float("nan")
    end: float = float("nan")
    code: int | None = None


async def sim_alone(
    *, prompt: str = PROMPT, cwd: Path | None = None, conversation: str = ""
) -> SimTiming:
    """agy-sim as its own subprocess, stdout read line by line, until it exits."""
    argv = [agy_sim(), "-p", prompt, "--output-format", "stream-json"]
    if conversation:
        argv += ["--conversation", conversation]
    timing = SimTiming()
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=str(cwd) if cwd else None,
        start_new_session=True,
    )
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(TURN_DEADLINE):
            while line := await proc.stdout.readline():
                now = time.perf_counter() - t0
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                update = event.get("step_update") if isinstance(event, dict) else None
                if not isinstance(update, dict) or update.get("step_type") == "user_input":
                    continue
                if timing.first_step != timing.first_step:
                    timing.first_step = now
                if update.get("text_delta") and timing.first_text != timing.first_text:
                    timing.first_text = now
            timing.code = await proc.wait()
    except TimeoutError:
        proc.kill()
        timing.code = await proc.wait()
    timing.end = time.perf_counter() - t0
    timing.ok = timing.code == 0
    return timing


class LagProbe:
    """A coroutine that sleeps 5 ms in a loop and records how late it wakes (seconds); while it
    runs it also records each of the interpreter's full garbage collections (ms): one holds the
    GIL, so it stalls the loop whichever thread runs it."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.lags: list[float] = []
        self.full_collections: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._gc_began = 0.0

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._gc_began = time.perf_counter()
        else:
            self.full_collections.append((time.perf_counter() - self._gc_began) * 1000)

    async def _run(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(self.interval)
            self.lags.append(max(0.0, time.perf_counter() - before - self.interval))

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())
        gc.callbacks.append(self._gc)

    async def stop(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._gc)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def summary(self) -> tuple[float, float, float]:
        """(p50, p99, max) in milliseconds."""
        ms = [x * 1000 for x in self.lags]
        return percentile(ms, 50), percentile(ms, 99), max(ms, default=float("nan"))


class ProviderLog(logging.Handler):
    """The provider's log while a benchmark runs: lines that speak of binding (with their time)
    and the warnings, counted by message (conversation ids folded) for `warnings_text()`.
    """

    WORDS = ("bound", "bind")
    _ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[float, str]] = []
        self.warnings: collections.Counter[str] = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a foreign record with bad arguments: not ours to judge
            return
        if record.levelno >= logging.WARNING:
            self.warnings[f"{record.name}: {self._ID.sub('<id>', message)}"] += 1
        if any(word in message.lower() for word in self.WORDS):
            self.records.append((time.perf_counter(), f"{record.name}: {message}"))

    def warnings_text(self, indent: str = "  ") -> str:
        """The warnings logged since the last call, one line per message with its count; clears."""
        lines = [
            f"{indent}provider warning ×{n}: {m[:300]}" for m, n in self.warnings.most_common()
        ]
        self.warnings.clear()
        return "\n".join(lines)

    @contextlib.contextmanager
    def installed(self) -> Iterator[ProviderLog]:
        logger = logging.getLogger("agy_provider")
        old_level = logger.level
        logger.addHandler(self)
        logger.setLevel(logging.DEBUG)
        try:
            yield self
        finally:
            logger.removeHandler(self)
            logger.setLevel(old_level)


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f}"
