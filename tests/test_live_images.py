"""Images in the newest user message reach a real agy-sim turn as files it views, and go away.

agy-sim views each file the prompt names (a `view_file` step, read from its `--add-dir` roots)
and answers with each file's size and sha256 (scenario `view-image`), so the answer proves the
staged file was read through the folder given to agy. The folder is gone after the turn, however
it ended; a bad image is refused before agy starts.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest
from image_helpers import image
from image_helpers import png
from live_helpers import MODEL
from live_helpers import expect_done
from live_helpers import expect_error
from live_helpers import leftovers
from live_helpers import scenario_answer

from agy_provider.hookspecs import hookimpl
from agy_provider.live.provider import stream_simple
from agy_provider.live.provider import wait_for_turns
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.options import AbortSignal
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.pi.types import UserMessage
from agy_provider.plugin_manager import get_plugin_manager
from agy_provider.sim.image_views import VIEWED_IMAGES_PLACEHOLDER

pytestmark = pytest.mark.slow

_STAGED = re.compile(r"view the file (/[^\n]+)")


JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(range(64)) + b"\xff\xd9"


def summary(files: list[tuple[str, bytes]]) -> str:
    """What agy-sim says it saw: each staged file's name, size and sha256 prefix."""
    return "; ".join(
        f"{name}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:12]}"
        for name, data in files
    )


class FolderWatcher:
    """Looks at the staged folder while agy runs (at its first event after `start`)."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.modes: dict[str, int] = {}

    @hookimpl
    def observe_event(self, event: AssistantMessageEvent, turn: Any) -> None:
        if event.type == "start" or self.modes:
            return
        self.prompts.append(turn.prompt)
        for path in _STAGED.findall(turn.prompt):
            self.modes[path] = stat.S_IMODE(os.stat(path).st_mode)
            folder = os.path.dirname(path)
            self.modes[folder] = stat.S_IMODE(os.stat(folder).st_mode)


@pytest.fixture
def watcher() -> Any:
    pm = get_plugin_manager()
    plugin = FolderWatcher()
    pm.register(plugin, name="test-image-folder")
    yield plugin
    pm.unregister(name="test-image-folder")


async def image_turn(
    blocks: list[Any], signal: AbortSignal | None = None
) -> tuple[list[AssistantMessageEvent], AssistantMessage]:
    context = Context(messages=[UserMessage(content=blocks, timestamp=0)])
    stream = stream_simple(MODEL, context, SimpleStreamOptions(signal=signal))
    events = []
    async for event in stream:
        events.append(event)
        if signal is not None and event.type == "thinking_delta":
            signal.abort("test")  # agy is viewing the images
    message = await stream.result()
    await wait_for_turns()
    return events, message


async def test_agy_views_the_staged_images_and_the_folder_is_removed(
    live_env: Path, recorder: Any, watcher: FolderWatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "view-image")
    picture, photo = png(), JPEG
    events, message = await image_turn(
        [
            TextContent(text="What is in these?"),
            image(picture, "image/png"),
            image(photo, "image/jpeg"),
        ]
    )
    expected = scenario_answer("view-image").replace(
        VIEWED_IMAGES_PLACEHOLDER, summary([("image-1.png", picture), ("image-2.jpg", photo)])
    )
    expect_done(events, message, expected)  # the sizes and digests of the files agy-sim read
    (prompt,) = watcher.prompts
    paths = _STAGED.findall(prompt)
    assert [os.path.basename(p) for p in paths] == ["image-1.png", "image-2.jpg"]
    assert prompt.startswith("What is in these?\n\nAttached image 1 (image/png): view the file ")
    folder = os.path.dirname(paths[0])
    assert watcher.modes[folder] == 0o700 and all(watcher.modes[p] == 0o600 for p in paths)
    thinking = "".join(b.thinking for b in message.content if isinstance(b, ThinkingContent))
    assert all(f"view_file {p}" in thinking for p in paths), thinking
    assert not os.path.exists(folder), "the turn's image folder outlived it"
    assert leftovers(live_env, recorder) == []


@pytest.mark.parametrize("ending", ["aborted", "error"])
async def test_the_folder_is_removed_when_the_turn_is_aborted_or_fails(
    live_env: Path,
    recorder: Any,
    watcher: FolderWatcher,
    monkeypatch: pytest.MonkeyPatch,
    ending: str,
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "view-image" if ending == "aborted" else "quota-error")
    signal = AbortSignal() if ending == "aborted" else None
    events, message = await image_turn([image(png(), "image/png")], signal=signal)
    expect_error(events, message, reason=ending)
    (prompt,) = watcher.prompts  # the folder existed while agy ran
    (path,) = _STAGED.findall(prompt)
    assert watcher.modes[path] == 0o600
    assert not os.path.exists(os.path.dirname(path))
    assert leftovers(live_env, recorder) == []


async def test_a_bad_image_is_refused_before_agy_starts(live_env: Path, recorder: Any) -> None:
    events, message = await image_turn(
        [TextContent(text="Look"), image(png(), "image/jpeg")]  # declared jpeg, bytes png
    )
    expect_error(events, message)
    assert "image 1 of the message is declared image/jpeg, but its bytes are image/png" in (
        message.error_message or ""
    )
    assert not list((live_env / "conversations").glob("*.db")), "agy was started"
    assert leftovers(live_env, recorder) == []
