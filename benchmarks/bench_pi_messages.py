"""Benchmark: what serve's pi route (`POST /pi/messages`, issue 32) adds to the first event over
`stream_simple` in process, the same turns alternating in one run.

Both in this process, agy-sim as agy (warm pool on, its defaults): `stream_simple` called directly,
and the same turn posted to an in-process `serve` by a bare HTTP/1.1 client on the same loop. Two
figures per side, each turn measured from the call (or the POST):
- the first event: `start` as the caller receives it (pi's first event; the route's part is the
  HTTP request, reading and placing it, and the first SSE frame);
- the first delta's lateness: when the caller received the turn's first thinking or text delta,
  minus when the turn pushed it (an `observe_event` plugin, one monotonic clock).
Goal: the pi route adds ≤ 5 ms to each (median) over `stream_simple`. Turns run one at a time,
`--settle` seconds apart once the one before has ended.

Run: `.venv/bin/python benchmarks/bench_pi_messages.py [--rounds 20]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for live_support

import live_support as live

from agy_provider.hookspecs import hookimpl

GOAL_MS = 5.0
BODY = {"model": "default", "context": {"messages": [{"role": "user", "content": "hi"}]}}


class FirstDeltas:
    """`observe_event`: when each turn pushed its first thinking or text delta (monotonic)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._seen: list[Any] = []

    @hookimpl
    def observe_event(self, event: Any, turn: Any) -> None:
        if event.type in ("thinking_delta", "text_delta") and not any(
            t is turn for t in self._seen
        ):
            self._seen.append(turn)
            self.times.append(time.monotonic())


async def direct(observer: FirstDeltas) -> tuple[float, float, float]:
    """One `stream_simple` turn: (ms to `start`, this process's CPU ms until then, ms its first
    delta came after its push)."""
    from agy_provider import Context
    from agy_provider import UserMessage
    from agy_provider import stream_simple

    t0, cpu0 = time.monotonic(), time.process_time()
    stream = stream_simple(live.model(), Context(messages=[UserMessage(content="hi", timestamp=0)]))
    start = delta = cpu = float("nan")
    async for event in stream:
        now = time.monotonic()
        if event.type == "start":
            start, cpu = now, time.process_time()
        elif event.type in ("thinking_delta", "text_delta") and delta != delta:
            delta = now
    return (start - t0) * 1000, (cpu - cpu0) * 1000, (delta - observer.times[-1]) * 1000


async def routed(port: int, token: str, observer: FirstDeltas) -> tuple[float, float, float]:
    """The same turn through `POST /pi/messages`: the same figures. The client is a bare HTTP/1.1
    request on a socket of this loop (what `curl` sends), so the figures are the server's and
    not an HTTP library's (httpx spends as much CPU as the server on a request)."""
    body = json.dumps(BODY).encode()
    head = (
        f"POST /pi/messages HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    t0, cpu0 = time.monotonic(), time.process_time()
    start = delta = cpu = float("nan")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head + body)
    seen = b""
    try:
        while chunk := await reader.read(65536):
            now = time.monotonic()
            seen += chunk
            if start != start and b'data: {"type":"start"}' in seen:
                start, cpu = now, time.process_time()
            if delta != delta and (
                b'"type":"thinking_delta"' in seen or b'"type":"text_delta"' in seen
            ):
                delta = now
            if b'"type":"done"' in seen or b'"type":"error"' in seen:
                break
    finally:
        writer.close()
        await writer.wait_closed()
    assert seen.startswith(b"HTTP/1.1 200"), seen[:200]
    return (start - t0) * 1000, (cpu - cpu0) * 1000, (delta - observer.times[-1]) * 1000


async def run(rounds: int, settle: float) -> dict[str, list[tuple[float, float, float]]]:
    from agy_provider.hosts.serve.app import ServeServer
    from agy_provider.hosts.serve.app import ServeSettings
    from agy_provider.live.provider import wait_for_turns
    from agy_provider.plugin_manager import get_plugin_manager

    observer = FirstDeltas()
    get_plugin_manager().register(observer, name="bench-pi-first-deltas")
    token = secrets.token_urlsafe(24)
    server = ServeServer(ServeSettings(token=token, port=0))
    stop = asyncio.Event()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    serving = asyncio.ensure_future(server.run(stop, ready.set_result))
    port = await ready
    results: dict[str, list[tuple[float, float, float]]] = {"stream_simple": [], "pi route": []}
    try:
        await direct(observer)  # imports, plugins, agy's version, the warm pool: once
        await routed(port, token, observer)
        for _ in range(rounds):  # alternating, so load drifts hit both alike
            # Each turn starts once the one before has settled (its session saved, its agy
            # handed back, the pool's next spare started): what is measured is the turn's
            # start, not the last one's tail.
            await wait_for_turns()
            await asyncio.sleep(settle)
            results["stream_simple"].append(await direct(observer))
            await wait_for_turns()
            await asyncio.sleep(settle)
            results["pi route"].append(await routed(port, token, observer))
    finally:
        stop.set()
        await serving
        get_plugin_manager().unregister(name="bench-pi-first-deltas")
    return results


def report(results: dict[str, list[tuple[float, float, float]]]) -> bool:
    heads = ("start med", "start p90", "CPU to start med", "delta late med", "delta late p90")
    fmt = "{:<14}" + " {:>17}" * len(heads)
    print(fmt.format("(ms)", *heads))
    medians = {}
    for name, rows in results.items():
        starts, cpus, lates = ([r[i] for r in rows] for i in range(3))
        medians[name] = (live.median(starts), live.median(cpus), live.median(lates))
        figures = (
            live.median(starts),
            live.percentile(starts, 90),
            live.median(cpus),
            live.median(lates),
            live.percentile(lates, 90),
        )
        print(fmt.format(name, *(f"{f:.2f}" for f in figures)))
    added = [medians["pi route"][i] - medians["stream_simple"][i] for i in range(3)]
    ok = added[0] <= GOAL_MS and added[2] <= GOAL_MS
    print(
        f"the pi route adds {added[0]:.2f} ms to the first event (`start`; {added[1]:.2f} ms of "
        f"CPU, client included) and {added[2]:.2f} ms to the first delta (medians; goal ≤ "
        f"{GOAL_MS:.0f} ms): {'met' if ok else 'NOT met'}"
    )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument(
        "--settle", type=float, default=1.0, help="seconds between turns (default 1)"
    )
    args = parser.parse_args()
    live.run_header("bench_pi_messages: serve's pi route over stream_simple")
    with live.private_world("bench-pi-messages-"):
        results = asyncio.run(run(args.rounds, args.settle))
    return 0 if report(results) else 1


if __name__ == "__main__":
    sys.exit(main())
