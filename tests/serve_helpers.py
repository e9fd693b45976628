"""The serve tests' shared parts: the real server started in-process on a free loopback port (the
`served` fixture), `agy-provider serve` as a real process, and the tools and schemas they ask for.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from host_helpers import TOOL_PARAMETERS
from live_helpers import agy_processes
from live_helpers import leftovers
from optional import need

from agy_provider.hosts.serve.app import ServeServer
from agy_provider.hosts.serve.app import ServeSettings

openai = need("openai", "the openai SDK", "serve")
anthropic = need("anthropic", "the anthropic SDK", "serve")

LOOKUP_OPENAI = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Look up an order's status by its id.",
        "parameters": TOOL_PARAMETERS,
    },
}
LOOKUP_ANTHROPIC = {
    "name": "lookup_order",
    "description": "Look up an order's status by its id.",
    "input_schema": TOOL_PARAMETERS,
}
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
}


@dataclasses.dataclass
class Served:
    """A running server: its base URL (no `/v1`), token, and this test's agy state folder."""

    base: str
    token: str
    server: ServeServer
    app: Path

    def openai(self, token: str | None = None) -> Any:
        return openai.AsyncOpenAI(
            base_url=f"{self.base}/v1", api_key=token or self.token, max_retries=0
        )

    def anthropic(self, token: str | None = None) -> Any:
        return anthropic.AsyncAnthropic(
            base_url=self.base, api_key=token or self.token, max_retries=0
        )

    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"}


async def start_server(
    app: Path, **settings: Any
) -> tuple[Served, asyncio.Event, asyncio.Task[None]]:
    token = secrets.token_urlsafe(24)
    server = ServeServer(ServeSettings(token=token, port=0, **settings))
    stop = asyncio.Event()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(server.run(stop, ready.set_result))
    waiting: set[asyncio.Future[Any]] = {ready, task}
    await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()  # it failed to start: say why
    return Served(f"http://127.0.0.1:{ready.result()}", token, server, app), stop, task


@pytest.fixture(name="served")
async def served_fixture(live_env: Path) -> AsyncIterator[Served]:
    """The server on a free port of 127.0.0.1; afterwards no agy of the test may be left."""
    running, stop, task = await start_server(live_env)
    try:
        yield running
    finally:
        stop.set()
        await task
    assert not leftovers(live_env)


async def until_no_agy(app: Path) -> None:
    """Return once no agy process of this test is alive (a hang bound only, never a measure)."""
    for _ in range(1000):
        if not await asyncio.to_thread(agy_processes, app):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"agy still runs: {leftovers(app)}")


class ServeProcess:
    """`agy-provider serve` as a real process; its stderr read until it says where it listens."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        argv = [sys.executable, "-m", "agy_provider.cli", "serve", "--port", "0", *args]
        self.proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self.proc.stderr is not None
        self.lines: list[str] = []
        for line in self.proc.stderr:
            self.lines.append(line)
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)/v1", line)
            if found:
                self.base = found[1]
            if "OPENAI_BASE_URL" in line:  # the last line it prints at start
                break
        else:
            raise AssertionError(f"serve did not start: {''.join(self.lines)}")

    def finish(self, signum: int) -> tuple[int, str]:
        self.proc.send_signal(signum)
        out, err = self.proc.communicate(timeout=120)
        return self.proc.returncode, "".join(self.lines) + err + out
