"""One turn at a time per agy conversation (`live/conversation_lock.py`), across processes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from waiting import HANG_BOUND
from waiting import until_true

from agy_provider.errors import TurnError
from agy_provider.live.conversation_lock import ConversationLock
from agy_provider.live.launch import plan_off_loop

CONVERSATION = "2399249c-4a48-40f1-bf3b-4c6e5d3a5a0e"


@pytest.fixture(autouse=True)
def private_runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    return runtime


async def test_a_second_turn_waits_for_the_first_then_runs() -> None:
    first = await ConversationLock.acquire("state", CONVERSATION, timeout=5)
    told: list[str] = []
    second = asyncio.ensure_future(
        ConversationLock.acquire(
            "state", CONVERSATION, timeout=5, waiting=lambda: told.append("waiting")
        )
    )
    await until_true(lambda: told != [], "the second turn said it waits")
    assert not second.done() and told == ["waiting"]  # said once, however long it waits
    other = await ConversationLock.acquire("another state", CONVERSATION, timeout=1)
    other.release()  # another state folder's conversation is another lock
    first.release()
    (await asyncio.wait_for(second, 2)).release()
    assert told == ["waiting"]


async def test_a_lock_held_by_another_process_times_out_saying_what_to_do(
    private_runtime: Path,
) -> None:
    holder = textwrap.dedent(
        f"""
        import asyncio, sys
        from agy_provider.live.conversation_lock import ConversationLock
        async def main():
            await ConversationLock.acquire("state", {CONVERSATION!r}, timeout=5)
            print("held", flush=True)
            sys.stdin.read()
        asyncio.run(main())
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        with pytest.raises(TurnError, match=r"still running after 0s.*Wait for it"):
            await ConversationLock.acquire("state", CONVERSATION, timeout=0.3)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(10)
    # Its end let the lock go.
    (await ConversationLock.acquire("state", CONVERSATION, timeout=5)).release()


async def test_a_cancelled_wait_holds_nothing(private_runtime: Path) -> None:
    for _ in range(20):
        attempt = asyncio.ensure_future(ConversationLock.acquire("state", CONVERSATION, timeout=5))
        await asyncio.sleep(0)
        attempt.cancel()
        with pytest.raises(asyncio.CancelledError):
            await attempt
    # A lock a worker got after the cancel is closed by its callback: the lock comes free (the
    # wait's bound only catches a lock held for good, which fails saying it is still held).
    (await ConversationLock.acquire("state", CONVERSATION, timeout=HANG_BOUND)).release()


async def test_a_lock_folder_that_cannot_be_made_is_said(
    private_runtime: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(private_runtime / "missing" / "deeper"))
    with pytest.raises(TurnError, match="cannot make the conversation lock folder"):
        await ConversationLock.acquire("state", CONVERSATION, timeout=1)


class _Plan:
    """What `plan_off_loop` reads of a turn's plan."""

    state_dir = "state"
    conversation_id = CONVERSATION


async def test_planning_takes_a_free_lock_in_the_same_trip_and_leaves_a_busy_one() -> None:
    plan, lock = await plan_off_loop(lambda: _Plan())  # type: ignore[arg-type,return-value]
    assert isinstance(plan, _Plan) and lock is not None
    # Busy now: planning leaves it to `lock_conversation`, which waits.
    _, none = await plan_off_loop(lambda: _Plan())  # type: ignore[arg-type,return-value]
    assert none is None
    lock.release()


async def test_a_turn_cancelled_while_planning_leaves_no_lock_held() -> None:
    planning = threading.Event()
    go_on = threading.Event()

    def slow_prepare() -> _Plan:
        planning.set()
        go_on.wait(5)
        return _Plan()

    task = asyncio.ensure_future(plan_off_loop(slow_prepare))  # type: ignore[arg-type]
    assert await asyncio.to_thread(planning.wait, HANG_BOUND), "planning never started"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    go_on.set()  # the worker finishes planning and takes the free lock for nobody...
    lock = await ConversationLock.acquire("state", CONVERSATION, timeout=2)  # ...and lets it go
    lock.release()


async def test_a_lock_folder_removed_between_turns_is_made_again(private_runtime: Path) -> None:
    import shutil

    (await ConversationLock.acquire("state", CONVERSATION, timeout=1)).release()
    shutil.rmtree(private_runtime / "agy-provider")  # a temp cleaner passed by
    lock = await ConversationLock.acquire("state", CONVERSATION, timeout=1)
    assert (private_runtime / "agy-provider" / "locks").is_dir()
    lock.release()
