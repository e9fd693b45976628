"""Private folders of a host that died outright are not left behind: the lifeline removes a
turn's image folder, and when it died too, the next host's start sweeps it; a folder whose
owner lives is never touched.

Every host here is a real Python process running a real turn against agy-sim.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from lifeline_helpers import GONE_WITHIN
from lifeline_helpers import STARTUP
from lifeline_helpers import alive
from lifeline_helpers import gone_within
from lifeline_helpers import host
from lifeline_helpers import lifeline_of
from lifeline_helpers import read_line
from lifeline_helpers import turn_env
from live_helpers import agy_processes

from agy_provider.owned_folders import make_owned_folder
from agy_provider.owned_folders import owned_prefix
from agy_provider.owned_folders import start_stamp
from agy_provider.owned_folders import sweep_once
from agy_provider.owned_folders import sweep_stale_folders

# A turn with an image, on agy-sim's `hang` scenario: it starts streaming, then hangs.
IMAGE_HOST = """
import asyncio, base64
from agy_provider import Context, ImageContent, Model, SimpleStreamOptions, TextContent
from agy_provider import UserMessage, stream_simple

MODEL = Model(id="gemini-3.7-flash", name="Gemini 3.7 Flash", api="agy", provider="agy",
              base_url="", reasoning=True, context_window=1_000_000, max_tokens=65_536)
PNG = base64.b64encode(b"\\x89PNG\\r\\n\\x1a\\n" + bytes(24)).decode()

async def main():
    blocks = [TextContent(text="what is this?"), ImageContent(data=PNG, mime_type="image/png")]
    context = Context(messages=[UserMessage(content=blocks, timestamp=0)])
    async for event in stream_simple(MODEL, context, SimpleStreamOptions()):
        if event.type != "start":  # agy runs, the image staged for it
            print("streaming", flush=True)
            await asyncio.sleep(300)

asyncio.run(main())
"""

# A plain turn: the next host's start.
PLAIN_HOST = """
import asyncio
from agy_provider import Context, Model, SimpleStreamOptions, UserMessage, complete_simple

MODEL = Model(id="gemini-3.7-flash", name="Gemini 3.7 Flash", api="agy", provider="agy",
              base_url="", reasoning=True, context_window=1_000_000, max_tokens=65_536)
message = asyncio.run(complete_simple(MODEL, Context(messages=[UserMessage(content="hi", timestamp=0)]),
                                      SimpleStreamOptions()))
print("ended", message.stop_reason, flush=True)
"""


def image_folders(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "tmp").glob("agy-provider-images-*"))


@contextlib.contextmanager
def killed_mid_turn(tmp_path: Path, *, with_lifeline: bool) -> Iterator[Path]:
    """A host SIGKILLed while its image turn streams (its lifeline too, unless
    `with_lifeline`); yields the image folder it had staged."""
    env = turn_env(tmp_path)
    with host(IMAGE_HOST, env, tmp_path) as proc:
        read_line(proc, "streaming")
        (folder,) = image_folders(tmp_path)
        assert [p.suffix for p in folder.iterdir()] == [".png"]  # the user's image bytes
        supervisor = lifeline_of(proc.pid)
        turn = [p for p in psutil.Process(proc.pid).children(recursive=True) if p != supervisor]
        if not with_lifeline:
            supervisor.kill()
        proc.kill()
        proc.wait()
        try:
            yield folder
        finally:
            for leftover in alive([*turn, supervisor]):  # agy-sim, when no lifeline ended it
                with contextlib.suppress(psutil.Error):
                    leftover.kill()
            gone_within([*turn, supervisor], GONE_WITHIN)
    assert agy_processes(tmp_path / "agy-state") == []


@pytest.mark.slow
def test_the_next_start_sweeps_a_killed_hosts_image_folder_and_keeps_a_live_owners(
    tmp_path: Path,
) -> None:
    with killed_mid_turn(tmp_path, with_lifeline=False) as folder:
        pass
    # Before: the folder, the user's image inside, stayed in the temp folder for good.
    assert folder.is_dir()
    live = tmp_path / "tmp" / f"{owned_prefix('images')}live"  # this test process owns it
    live.mkdir()
    env = {k: v for k, v in turn_env(tmp_path).items() if k != "AGY_SIM_SCENARIO"}
    with host(PLAIN_HOST, env, tmp_path) as proc:
        assert read_line(proc, "ended ") == "stop"
        assert proc.wait(STARTUP) == 0
    assert not folder.exists()
    assert live.is_dir() and image_folders(tmp_path) == [live]


@pytest.mark.slow
def test_the_lifeline_removes_the_image_folder_of_a_killed_host(tmp_path: Path) -> None:
    with killed_mid_turn(tmp_path, with_lifeline=True) as folder:
        # "Gone" polled with a bound, as the lifeline's other tests do.
        deadline = time.monotonic() + GONE_WITHIN
        while folder.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not folder.exists()


def test_the_sweep_removes_only_folders_of_owners_that_are_gone(tmp_path: Path) -> None:
    me = psutil.Process()
    stamp = start_stamp(me.pid)
    ended = psutil.Popen(["true"])
    ended.wait()
    names = {
        "live images": f"agy-provider-images-{me.pid}-{stamp}-abc",
        "dead images": f"agy-provider-images-{ended.pid}-{stamp + 1}-abc",
        "dead replay": f"agy-provider-replay-{ended.pid}-{stamp + 1}-abc",
        "dead bridge": f"agy-provider-mcp-{ended.pid}-{stamp + 1}-abc",
        "reused pid": f"agy-provider-images-{me.pid}-{stamp - 500}-abc",
        "older version": "agy-provider-images-x1y2z3",
        "another kind": f"agy-provider-other-{ended.pid}-{stamp + 1}-abc",
        "not ours": "something-else-1-2-",
    }
    for name in names.values():
        (tmp_path / name).mkdir()
    (tmp_path / f"agy-provider-images-{ended.pid}-{stamp + 1}-file").write_text("a file")
    removed = sweep_stale_folders(str(tmp_path))
    gone = ("dead images", "dead replay", "dead bridge", "reused pid")
    assert sorted(removed) == sorted(str(tmp_path / names[k]) for k in gone)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == sorted(
        names[k] for k in names if k not in gone
    )


def test_a_process_sweeps_a_parent_once_and_names_its_folders_after_itself(
    tmp_path: Path,
) -> None:
    ended = psutil.Popen(["true"])
    ended.wait()
    dead = tmp_path / f"agy-provider-replay-{ended.pid}-1-abc"
    dead.mkdir()
    folder = Path(make_owned_folder("images", str(tmp_path)))
    assert not dead.exists()  # the first folder of this process swept first
    assert folder.name.startswith(owned_prefix("images")) and folder.stat().st_mode & 0o777 == 0o700
    dead.mkdir()
    sweep_once(str(tmp_path))  # once per process and parent: not again
    assert dead.is_dir()
    with pytest.raises(ValueError):
        owned_prefix("../x")
