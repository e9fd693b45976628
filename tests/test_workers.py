"""The worker threads and the folder watch: nothing a turn does starts a thread or closes a
descriptor on the event loop, work handed off finishes, watchers of one folder share one inotify."""

from __future__ import annotations

import asyncio
import contextvars
import fcntl
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from live_helpers import live_env  # noqa: F401  (fixture)
from waiting import until_true

from agy_provider.live import fswatch
from agy_provider.workers import in_background
from agy_provider.workers import off_loop


def run_child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )


def test_the_pool_is_running_before_a_turn_asks_and_the_loop_starts_no_thread() -> None:
    """Importing the live path starts every worker from a thread of its own; a burst of work
    from the loop then runs on those threads and the loop thread starts none."""
    done = run_child(
        """
        import asyncio, json, threading, time
        from agy_provider import workers
        deadline = time.monotonic() + 30
        while len(workers._pool._threads) < workers.WORKERS and time.monotonic() < deadline:
            time.sleep(0.01)
        before = len(workers._pool._threads)
        started = []
        real_start = threading.Thread.start
        def start(self):
            started.append(threading.current_thread().name)
            real_start(self)
        threading.Thread.start = start
        async def main():
            await asyncio.gather(*(workers.off_loop(time.sleep, 0.01) for _ in range(40)))
        asyncio.run(main())
        print(json.dumps({"before": before, "workers": workers.WORKERS, "started": started}))
        """
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["before"] == seen["workers"]
    assert seen["started"] == []


def test_a_program_that_exits_while_the_workers_start_exits_at_once() -> None:
    """The program ends while the pool is still being started (a short CLI command): the
    threads already waiting for the others are released, or the exit, which joins them, hangs.
    Every submit after the first is slowed, and the program exits once the first worker waits
    at the gate: the exit lands in the middle, every time."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import concurrent.futures.thread as t, time\n"
            "real = t.ThreadPoolExecutor.submit\n"
            "calls = []\n"
            "def slow(self, *a, **k):\n"
            "    calls.append(1)\n"
            "    if len(calls) > 1:\n"
            "        time.sleep(0.3)\n"
            "    return real(self, *a, **k)\n"
            "t.ThreadPoolExecutor.submit = slow\n"
            "from agy_provider import workers\n"
            "while not workers._pool._threads:\n"  # one worker waits at the gate: exit now
            "    time.sleep(0.005)\n",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_work_in_background_finishes_when_its_waiter_is_cancelled_and_the_program_ends(
    tmp_path: Path,
) -> None:
    target = tmp_path / "written"
    done = run_child(
        f"""
        import asyncio, time
        from pathlib import Path
        from agy_provider.workers import in_background
        def slow_write():
            time.sleep(0.5)
            Path({str(target)!r}).write_text("landed")
        async def main():
            write = in_background(slow_write)
            waiter = asyncio.ensure_future(asyncio.wrap_future(write))
            await asyncio.sleep(0.05)
            waiter.cancel()
        asyncio.run(main())
        print("exiting", flush=True)
        """
    )
    assert done.returncode == 0, done.stderr
    assert target.read_text() == "landed"


REQUEST = contextvars.ContextVar("REQUEST", default="none")


async def test_work_off_the_loop_runs_in_a_worker_with_the_callers_context() -> None:
    REQUEST.set("turn-7")

    def seen() -> tuple[str, str]:
        return threading.current_thread().name, REQUEST.get()

    for name, request in (await off_loop(seen), await asyncio.wrap_future(in_background(seen))):
        assert name.startswith("agy-provider-worker_") and request == "turn-7"


# -- the folder watch ------------------------------------------------------------------------


def inotify_descriptors() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify":
                count += 1
        except OSError:
            continue
    return count


needs_inotify = pytest.mark.skipif(
    importlib.util.find_spec("inotify_simple") is None or not os.path.isdir("/proc/self/fd"),
    reason="inotify (Linux) is needed for the folder watch",
)


@needs_inotify
async def test_turns_starting_together_share_one_descriptor_and_all_hear_a_change(
    tmp_path: Path,
) -> None:
    before = inotify_descriptors()
    watches = await asyncio.gather(
        *(fswatch.watch_folder(tmp_path, lambda name: name.endswith(".db")) for _ in range(20))
    )
    assert all(w is not None for w in watches)
    assert inotify_descriptors() - before == 1
    (tmp_path / "a.db").write_bytes(b"x")
    heard = await asyncio.gather(*(w.wait(10) for w in watches if w is not None))
    assert heard == [True] * 20
    for watch in watches:
        assert watch is not None
        watch.close()
    await until_true(
        lambda: inotify_descriptors() == before, "the descriptor was closed"
    )  # in a worker thread
    again = await fswatch.watch_folder(tmp_path, lambda name: True)
    assert again is not None  # a new watcher after the last one left gets a fresh descriptor
    (tmp_path / "b.db").write_bytes(b"y")
    assert await again.wait(10)
    again.close()
    await until_true(lambda: inotify_descriptors() == before, "the descriptor was closed")


@needs_inotify
async def test_watchers_cancelled_while_the_descriptor_is_made_leave_none_open(
    tmp_path: Path,
) -> None:
    before = inotify_descriptors()
    waiters = [
        asyncio.ensure_future(fswatch.watch_folder(tmp_path, lambda name: True)) for _ in range(3)
    ]
    await asyncio.sleep(0)  # each has asked for the descriptor
    for waiter in waiters:
        waiter.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    key = (id(asyncio.get_running_loop()), str(tmp_path))
    await until_true(
        lambda: inotify_descriptors() == before and key not in fswatch._making,
        "no descriptor is open or being made",
    )
    assert key not in fswatch._shared


# -- the session save -----------------------------------------------------------------------


def test_asyncio_run_ending_right_after_done_still_saves_the_session(
    live_env: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The host leaves its loop as soon as `done` arrives, while the session store is locked by
    another process: the save waits for the lock in a worker, and `asyncio.run` returns only
    once it has landed, so the program finds its session right after."""
    store = Path(os.environ["AGY_PROVIDER_SESSIONS"])
    store.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(f"{store}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)  # another process is writing the store
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import asyncio
                from agy_provider import Context, SimpleStreamOptions, UserMessage, stream_simple
                from agy_provider.store.sessions import SessionStore
                async def main():
                    stream = stream_simple(
                        "default",
                        Context(messages=[UserMessage(content="hi", timestamp=0)]),
                        SimpleStreamOptions(session_id="leaves-at-once"),
                        cwd={str(tmp_path)!r},
                    )
                    async for event in stream:
                        if event.type in ("done", "error"):
                            print(event.type, flush=True)
                            return  # the host is gone: whatever the turn still does is cancelled
                asyncio.run(main())
                print("saved" if SessionStore().get("leaves-at-once") else "lost", flush=True)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        first = child.stdout.readline().strip()
        assert first == "done", child.stderr.read() if child.stderr else ""
        # The store stays locked a moment after `done`: the save must wait for it.
        threading.Event().wait(1.0)
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        os.close(lock)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert out.split() == ["saved"], err


def test_a_host_that_runs_each_turn_in_its_own_asyncio_run_leaks_nothing(
    live_env: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """`asyncio.run` returning right after `done` cancels the turn's last steps: agy's tree, the
    database connection and its inotify watch must still be closed, turn after turn."""
    done = run_child(
        f"""
        import asyncio, json, os, time
        from agy_provider import Context, UserMessage, stream_simple
        from agy_provider.live import fswatch
        async def one():
            stream = stream_simple("default", Context(messages=[UserMessage(content="hi",
                                   timestamp=0)]), cwd={str(tmp_path)!r})
            async for event in stream:
                if event.type in ("done", "error"):
                    return event.type
        def open_files():
            seen = []
            for fd in os.listdir("/proc/self/fd"):
                try:
                    seen.append(os.readlink(f"/proc/self/fd/{{fd}}"))
                except OSError:
                    pass
            return seen
        outcomes = [asyncio.run(one()) for _ in range(3)]
        deadline = time.monotonic() + 10  # the last descriptor closes in a worker thread
        while "anon_inode:inotify" in open_files() and time.monotonic() < deadline:
            time.sleep(0.02)
        files = open_files()
        print(json.dumps({{
            "outcomes": outcomes,
            "inotify": files.count("anon_inode:inotify"),
            "databases": [f for f in files if ".db" in f],
            "watched": len(fswatch._shared),
        }}))
        """
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen == {"outcomes": ["done"] * 3, "inotify": 0, "databases": [], "watched": 0}
