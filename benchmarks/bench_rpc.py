"""Issue 5's targets for the rpc event source, in one run.

1. Frame parsing: MB/s of `ConnectStreamDecoder` (envelopes + JSON) on large frames. Goal ≥ 50 MB/s.
2. Frame → event latency: a real loopback HTTP/1.1 server sends Connect frames (each carrying its
   send time) at random intervals; the real `ConnectClient.stream` → `decode_json_step` →
   `StepAssembler` path turns them into pi events. Goal p50 ≤ 10 ms. Reported next to the sqlite
   event source's commit → event latency measured in the same run (`bench_sqlite_source.py`'s
   writer and reader, imported).
3. Idle stream CPU: the client waiting on an open stream that sends nothing for 10 s. Goal: none.

Run: .venv/bin/python benchmarks/bench_rpc.py
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for bench_sqlite_source

import bench_sqlite_source as sqlite_bench

from agy_provider.agy.rpcjson import decode_json_step
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import StepStatus
from agy_provider.assembly.assembler import StepAssembler
from agy_provider.rpc.client import ConnectClient
from agy_provider.wire.connect import ConnectStreamDecoder
from agy_provider.wire.connect import encode_json_envelope

FRAMES = 120
IDLE_SECONDS = 10.0


def planner_json(index: int, text: str, status: str = "CORTEX_STEP_STATUS_GENERATING") -> dict:
    return {
        "type": "CORTEX_STEP_TYPE_PLANNER_RESPONSE",
        "status": status,
        "metadata": {"sourceTrajectoryStepInfo": {"stepIndex": index, "cascadeId": "c"}},
        "plannerResponse": {"modifiedResponse": text},
    }


def user_json() -> dict:
    return {
        "type": "CORTEX_STEP_TYPE_USER_INPUT",
        "status": "CORTEX_STEP_STATUS_DONE",
        "metadata": {"sourceTrajectoryStepInfo": {"cascadeId": "c"}},
        "userInput": {"userResponse": "hi"},
    }


def update(steps: list[dict], indices: list[int]) -> dict:
    return {
        "update": {"mainTrajectoryUpdate": {"stepsUpdate": {"indices": indices, "steps": steps}}}
    }


# -- 1. frame parsing -------------------------------------------------------------------------


def bench_parsing() -> float:
    text = "All work and no play makes agy a dull model. " * 23_000  # ~1 MiB of text per frame
    frame = encode_json_envelope(update([planner_json(1, text)], [1]))
    body = frame * 32
    best = float("inf")
    for _ in range(5):
        decoder = ConnectStreamDecoder()
        started = time.perf_counter()
        count = 0
        for at in range(0, len(body), 65536):
            decoder.feed(body[at : at + 65536])
            count += sum(1 for _ in decoder.messages())
        best = min(best, time.perf_counter() - started)
        assert count == 32
    rate = len(body) / best / 1e6
    print(
        f"frame parsing: {len(body) / 1e6:.1f} MB in 32 frames of {len(frame) / 1e6:.2f} MB, 64 KiB reads"
    )
    print(
        f"  {rate:.0f} MB/s (envelopes + json.loads), goal >= 50 MB/s: {'PASS' if rate >= 50 else 'FAIL'}"
    )
    return rate


# -- a tiny Connect server on loopback --------------------------------------------------------


async def serve(frames: asyncio.Queue[bytes | None]) -> tuple[asyncio.AbstractServer, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/connect+json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        await writer.drain()
        while (frame := await frames.get()) is not None:
            writer.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            await writer.drain()
        end = encode_json_envelope({}, end_stream=True)
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(end), end))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def bench_frame_latency() -> list[float]:
    frames: asyncio.Queue[bytes | None] = asyncio.Queue()
    server, port = await serve(frames)
    client = ConnectClient(f"http://127.0.0.1:{port}", stream_read_timeout=30)
    assembler = StepAssembler(model="bench")
    assembler.feed([decode_json_step(user_json(), index=0)])
    latencies: list[float] = []
    rng = random.Random(5)

    async def produce() -> None:
        text = ""
        for n in range(FRAMES):
            await asyncio.sleep(rng.uniform(0.02, 0.06))
            text += f"chunk {n} |{time.time():.6f}| "
            frames.put_nowait(encode_json_envelope(update([planner_json(1, text)], [1])))
        frames.put_nowait(None)

    producer = asyncio.create_task(produce())
    async for message in client.stream("StreamAgentStateUpdates", {"conversationId": "c"}):
        raw = message["update"]["mainTrajectoryUpdate"]["stepsUpdate"]
        step = decode_json_step(raw["steps"][0], index=raw["indices"][0])
        for event in assembler.feed([step]):
            if event.type == "text_delta":
                sent = float(event.delta.rsplit("|", 2)[-2])
                latencies.append(time.time() - sent)
    await producer
    await client.aclose()
    server.close()
    assert step.kind is StepKind.ASSISTANT and step.status is StepStatus.GENERATING
    return latencies


async def bench_idle_cpu() -> float:
    frames: asyncio.Queue[bytes | None] = asyncio.Queue()
    server, port = await serve(frames)
    client = ConnectClient(f"http://127.0.0.1:{port}", stream_read_timeout=IDLE_SECONDS * 3)

    async def consume() -> None:
        async for _ in client.stream("StreamAgentStateUpdates", {"conversationId": "c"}):
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.5)  # connected and waiting
    cpu = time.process_time()
    await asyncio.sleep(IDLE_SECONDS)
    used = time.process_time() - cpu
    frames.put_nowait(None)
    await task
    await client.aclose()
    server.close()
    return used / IDLE_SECONDS * 100


async def sqlite_latency(commits: int = 100, seed: int = 4) -> list[float]:
    """The sqlite event source's commit -> event latency, with bench_sqlite_source's writer."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "latency.db"
        writer = sqlite_bench.WriterProcess(db, seed, commits)
        lat = sqlite_bench.Latencies(commits)
        try:
            await sqlite_bench.read_ours(db, 0, writer, lat)
        finally:
            writer.finish()
        return [lat.seen[k] for k in sorted(lat.seen)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def main() -> None:
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    bench_parsing()
    latencies = asyncio.run(bench_frame_latency())
    ms = [x * 1000 for x in latencies]
    p50 = statistics.median(ms)
    print(f"frame -> event latency over loopback HTTP ({len(ms)} frames):")
    print(
        f"  p50 {p50:.2f} ms  p90 {percentile(ms, 90):.2f} ms  p99 {percentile(ms, 99):.2f} ms  "
        f"max {max(ms):.2f} ms; goal p50 <= 10 ms: {'PASS' if p50 <= 10 else 'FAIL'}"
    )
    theirs = [x * 1000 for x in asyncio.run(sqlite_latency())]
    print(
        f"  sqlite source, commit -> event, same run ({len(theirs)} commits): "
        f"p50 {statistics.median(theirs):.2f} ms  p99 {percentile(theirs, 99):.2f} ms"
    )
    idle = asyncio.run(bench_idle_cpu())
    print(
        f"idle stream: {idle:.3f}% of one core over {IDLE_SECONDS:.0f} s with no frames "
        f"(goal: no CPU): {'PASS' if idle < 0.1 else 'FAIL'}"
    )


if __name__ == "__main__":
    main()
