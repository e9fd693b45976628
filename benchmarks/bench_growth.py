"""Issue 18, a 1 MB answer: CPU per delta as one planner step grows, through the sqlite and rpc sources.

Per source, one answer of `--size` bytes grows in `--deltas` equal steps. A writer process makes
each step (sqlite: agy-sim's `ConversationWriter` rewrites the row in place; rpc: a loopback
Connect server sends the step as agy's `StreamAgentStateUpdates` frame, rendered by agy-sim's own
`render_step`/`stream_shape`), in lockstep with the reader: the reader says `go`, the writer
commits or sends delta k and says so, and only then the reader's clock starts. The reader is the
real source (`SqliteEventSource.poll`, or `ConnectClient.stream` → `RpcEventSource`'s update
path → `poll`) feeding a `StepAssembler`, until the delta's text came out as a `text_delta`.
Figure: the reader process's CPU time (`time.process_time`, every thread) per delta, the first and
the last 10 % of deltas; a flat cost per delta shows last ≈ first, a quadratic one last ≫ first.

Baseline in the same run: `--base DIR` runs the same readers against another checkout (e.g. a
worktree at the branch point, with its `agy_provider/plugins` link), each side in its own
process with `PYTHONPATH` set to its tree. Run:
`.venv/bin/python benchmarks/bench_growth.py --base /work/wt-growth-base` (~1 min).

Issue 31's comparison: `--sizes 262144,1048576 --chunk 4096 --rounds 3` measures each answer
size in deltas of `--chunk` characters, sizes and sides interleaved round by round, and prints,
per source and side, the per-delta CPU at each size, the whole answer's CPU ratio and the
per-delta ratio between the largest and the smallest size (medians over the rounds), then each
of issue 31's goals against its figure, ours beside the baseline's: 4x the answer costs at most
5x the CPU; the last 10 % of deltas at most 1.5x the first 10 %; at most 1.5 ms per delta at the
largest size (sqlite and rpc). `--sources stream-json` adds the stream-json source for
reference: a writer process prints agy's `step_update` lines with each delta's `text_delta`, in
lockstep, and the reader reads its stdout as the runner does (64 KiB reads into `StdoutEvents`)
until the delta came out of the `StreamJsonEventSource` and the assembler.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

GENERATING, DONE = "CORTEX_STEP_STATUS_GENERATING", "CORTEX_STEP_STATUS_DONE"
CONVERSATION = "bench-growth"
# Mostly ASCII, as answers are, with the odd multibyte character (a dash, an accent, an emoji):
# one is enough to take every text off Python's ASCII-only fast paths.
LINE = "All work and no play makes agy a dull model — café ☕ {n:06d}.\n"


def answer_text(size: int, *, ascii_only: bool = False) -> str:
    """`size` characters of answer (about as many UTF-8 bytes), deterministic."""
    parts: list[str] = []
    total = n = 0
    while total < size:
        line = LINE.format(n=n)
        if ascii_only:
            line = line.encode("ascii", "replace").decode()
        parts.append(line)
        total += len(line)
        n += 1
    return "".join(parts)[:size]


def cuts(size: int, deltas: int) -> list[int]:
    """Where the text stands after each delta (character counts, the last is `size`)."""
    return [size * (k + 1) // deltas for k in range(deltas)]


# -- the writers (separate processes, lockstep on stdin/stdout) ----------------------------------


def sqlite_writer_main(db: str, size: int, deltas: int, ascii_only: bool) -> None:
    from agy_provider.sim.bulk import _step
    from agy_provider.sim.bulk import planner_step
    from agy_provider.sim.writer import ConversationWriter

    text = answer_text(size, ascii_only=ascii_only)
    writer = ConversationWriter(db, CONVERSATION)
    user = _step("USER_INPUT")
    user.user_input.user_response = "write me a megabyte"
    writer.append(user)
    idx = writer.append(planner_step(""))
    print(f"ready {idx}", flush=True)
    for k, end in enumerate(cuts(size, deltas)):
        if sys.stdin.readline().strip() != "go":
            break
        status = DONE if k == deltas - 1 else GENERATING
        writer.update(idx, planner_step(text[:end], "", status=status))
        print("committed", flush=True)
    writer.close()


def rpc_frame(index: int, text: str, status: str) -> bytes:
    """The frame agy-sim's language server sends when the planner row `index` changed."""
    from agy_provider.sim.bulk import planner_step
    from agy_provider.sim.step_reader import render_step
    from agy_provider.sim.step_reader import stream_shape
    from agy_provider.wire.connect import encode_json_envelope

    step = planner_step(text, "", status=status)
    info = step.metadata.source_trajectory_step_info
    info.trajectory_id, info.step_index, info.cascade_id = CONVERSATION, index, CONVERSATION
    rendered = render_step(step.SerializeToString(), 0, 0)
    update = {
        "conversationId": CONVERSATION,
        "status": "CASCADE_RUN_STATUS_RUNNING",
        "mainTrajectoryUpdate": {
            "stepsUpdate": {"indices": [index], "steps": [stream_shape(rendered)]},
            "status": "CASCADE_RUN_STATUS_RUNNING",
        },
    }
    return encode_json_envelope({"update": update})


def rpc_server_main(size: int, deltas: int, ascii_only: bool) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_rpc  # its loopback Connect server, which sends what its queue is given

    text = answer_text(size, ascii_only=ascii_only)

    async def serve() -> None:
        frames: asyncio.Queue[bytes | None] = asyncio.Queue()
        server, port = await bench_rpc.serve(frames)
        print(f"ready {port}", flush=True)
        loop = asyncio.get_running_loop()
        for k, end in enumerate(cuts(size, deltas)):
            # Built before the reader asks for it: only the send is in the reader's window.
            frame = rpc_frame(1, text[:end], DONE if k == deltas - 1 else GENERATING)
            if (await loop.run_in_executor(None, sys.stdin.readline)).strip() != "go":
                break
            frames.put_nowait(frame)
        frames.put_nowait(None)  # the clean end of the stream
        # The reader closes our stdin once it has read that end.
        while await loop.run_in_executor(None, sys.stdin.readline):
            pass
        server.close()

    asyncio.run(serve())


def streamjson_writer_main(size: int, deltas: int, ascii_only: bool) -> None:
    """agy's stdout for one growing answer: `init`, then one `step_update` line per delta."""
    text = answer_text(size, ascii_only=ascii_only)
    out = sys.stdout.buffer
    out.write(json.dumps({"event": "init", "conversation_id": CONVERSATION}).encode() + b"\n")
    out.flush()
    start = 0
    for end in cuts(size, deltas):
        if sys.stdin.readline().strip() != "go":
            break
        update = {
            "conversation_id": CONVERSATION,
            "step_index": 1,
            "state": "ACTIVE",
            "step_type": "agent_response",
            "text_delta": text[start:end],
        }
        line = json.dumps({"event": "step_update", "step_update": update}, separators=(",", ":"))
        out.write(line.encode() + b"\n")
        out.flush()
        start = end


class Peer:
    """A writer process driven in lockstep: `step()` asks for the next delta and waits for it."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        first = self.stdout.readline().split()
        if not first or first[0] != "ready":
            raise SystemExit(f"the writer did not start: {self.proc.args}")
        self.ready = int(first[1])

    def step(self, *, wait: bool = True) -> None:
        self.stdin.write("go\n")
        self.stdin.flush()
        if wait and not self.stdout.readline().strip():
            raise SystemExit("the writer stopped early")

    def finish(self) -> None:
        self.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- the readers (run in a child process with PYTHONPATH = the tree measured) ---------------------


def _delta_chars(events: list[Any]) -> int:
    return sum(len(e.delta) for e in events if getattr(e, "type", "") == "text_delta")


async def measure_sqlite(size: int, deltas: int, ascii_only: bool) -> list[float]:
    from agy_provider.plugins.sqlite_source import SqliteEventSource

    from agy_provider.assembly.assembler import StepAssembler

    with tempfile.TemporaryDirectory(prefix="agy-bench-growth-") as tmp:
        db = Path(tmp) / "growth.db"
        peer = Peer(["--sqlite-writer", str(db), str(size), str(deltas), str(int(ascii_only))])
        source = SqliteEventSource(db, min_index=-1)
        await source.open()
        assembler = StepAssembler(model="bench")
        assembler.feed(await source.poll(force=True))  # the user step and the placeholder
        cpu: list[float] = []
        streamed = 0
        try:
            for end in cuts(size, deltas):
                peer.step()  # committed before the clock starts
                start = time.process_time()
                while streamed < end:
                    streamed += _delta_chars(assembler.feed(await source.poll()))
                    if streamed < end:
                        await source.wait(0.05)
                cpu.append(time.process_time() - start)
        finally:
            await source.aclose()
            peer.finish()
        if streamed != size:
            raise SystemExit(f"sqlite: streamed {streamed} characters of {size}")
        return cpu


async def measure_rpc(size: int, deltas: int, ascii_only: bool) -> list[float]:
    from agy_provider.plugins.rpc_source import RpcEventSource

    from agy_provider.assembly.assembler import StepAssembler
    from agy_provider.rpc.client import ConnectClient

    peer = Peer(["--rpc-server", str(size), str(deltas), str(int(ascii_only))])
    turn = types.SimpleNamespace(
        binding=types.SimpleNamespace(conversation_id=CONVERSATION), min_index=-1
    )
    source = RpcEventSource(turn)
    client = ConnectClient(f"http://127.0.0.1:{peer.ready}", stream_read_timeout=60)
    assembler = StepAssembler(model="bench")
    from agy_provider.agy.rpcjson import decode_json_step

    user = {
        "type": "CORTEX_STEP_TYPE_USER_INPUT",
        "status": "CORTEX_STEP_STATUS_DONE",
        "userInput": {"userResponse": "write me a megabyte"},
    }
    assembler.feed([decode_json_step(user, index=0)])
    cpu: list[float] = []
    streamed = 0
    ends = cuts(size, deltas)
    updates = client.stream("StreamAgentStateUpdates", {"conversationId": CONVERSATION})
    try:
        # The server sends delta k when told; the reader's clock runs from then (idle while the
        # frame is on its way) until the delta came out of the assembler.
        peer.step(wait=False)
        start = time.process_time()
        async for message in updates:
            source._take_update(message)  # the source's own stream path, as `_run` calls it
            streamed += _delta_chars(assembler.feed(await source.poll()))
            if streamed >= ends[len(cpu)]:
                cpu.append(time.process_time() - start)
                if len(cpu) == deltas:
                    continue  # read on to the clean end
                peer.step(wait=False)
                start = time.process_time()
    finally:
        await updates.aclose()
        await client.aclose()
        peer.finish()
    if streamed != size or len(cpu) != deltas:
        raise SystemExit(f"rpc: streamed {streamed} characters of {size} in {len(cpu)} deltas")
    return cpu


async def measure_streamjson(size: int, deltas: int, ascii_only: bool) -> list[float]:
    from agy_provider.plugins.streamjson_source import StreamJsonEventSource

    from agy_provider.agy.rpcjson import decode_json_step
    from agy_provider.agy.stdout import StdoutEvents
    from agy_provider.assembly.assembler import StepAssembler

    argv = [__file__, "--streamjson-writer", str(size), str(deltas), str(int(ascii_only))]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    events = StdoutEvents()
    source = StreamJsonEventSource(events, min_index=-1)
    await source.open()
    assembler = StepAssembler(model="bench")
    user = {
        "type": "CORTEX_STEP_TYPE_USER_INPUT",
        "status": "CORTEX_STEP_STATUS_DONE",
        "userInput": {"userResponse": "write me a megabyte"},
    }
    assembler.feed([decode_json_step(user, index=0)])
    cpu: list[float] = []
    streamed = lines = 0
    try:
        for k, end in enumerate(cuts(size, deltas)):
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
            start = time.process_time()
            while lines < k + 2:  # `init` and this delta's line, read as the runner reads
                chunk = await proc.stdout.read(65536)
                if not chunk:
                    raise SystemExit("stream-json: the writer stopped early")
                events.feed(chunk)
                lines += chunk.count(b"\n")
            while streamed < end:
                streamed += _delta_chars(assembler.feed(await source.poll()))
                if streamed < end:
                    await source.wait(0.05)  # a long text's snapshot is due within FLUSH_EVERY
            cpu.append(time.process_time() - start)
    finally:
        proc.stdin.close()
        await proc.wait()
        await source.aclose()
    if streamed != size:
        raise SystemExit(f"stream-json: streamed {streamed} characters of {size}")
    return cpu


def measure_main(source: str, size: int, deltas: int, ascii_only: bool) -> None:
    run = {"sqlite": measure_sqlite, "rpc": measure_rpc, "stream-json": measure_streamjson}[source]
    cpu = asyncio.run(run(size, deltas, ascii_only))
    print(json.dumps(cpu))


# -- what remains: one late delta's parts, timed alone (this tree only) --------------------------


def _best(run: Any, repeat: int = 15) -> float:
    """Least thread CPU time of `run()` over `repeat` calls, in ms (thread_time: no other thread
    is timed, and it never counts time spent waiting for the CPU on a loaded machine)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.thread_time()
        run()
        best = min(best, time.thread_time() - start)
    return best * 1000


def parts_main(size: int, deltas: int, ascii_only: bool) -> None:
    """The last delta's work, part by part: what each source still does over the whole text."""
    import sqlite3

    from agy_provider.agy.growing_text import GrowingTexts
    from agy_provider.agy.rows import decode_step_row
    from agy_provider.agy.rpcjson import CheckedTexts
    from agy_provider.agy.rpcjson import decode_json_step
    from agy_provider.agy.step import Step
    from agy_provider.agy.step import StepKind
    from agy_provider.agy.step import StepStatus
    from agy_provider.assembly.assembler import StepAssembler
    from agy_provider.sim.bulk import planner_step
    from agy_provider.wire import jsontext

    try:
        from agy_provider.wire.growing_json import GrowingJson
    except ImportError:  # a tree from before issue 31
        GrowingJson = None

    text = answer_text(size, ascii_only=ascii_only)
    old_end, end = cuts(size, deltas)[-2:]
    payloads = [
        planner_step(text[:n], "", status=GENERATING).SerializeToString() for n in (old_end, end)
    ]
    frames = [rpc_frame(1, text[:n], GENERATING)[5:] for n in (old_end, end)]
    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="agy-bench-growth-") as tmp:
        # As the source reads it: a WAL database another connection has just rewritten the
        # row in, read through a connection of its own (SQLite reads every page of it again).
        writer = sqlite3.connect(Path(tmp) / "row.db", isolation_level=None)
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("CREATE TABLE steps(idx INTEGER PRIMARY KEY, step_payload BLOB)")
        writer.execute("INSERT INTO steps VALUES (1, ?)", (payloads[0],))
        reader = sqlite3.connect(f"file:{Path(tmp) / 'row.db'}?mode=ro", uri=True)
        timed: list[float] = []
        for n in range(15):
            writer.execute("UPDATE steps SET step_payload = ? WHERE idx = 1", (payloads[n % 2],))
            start = time.thread_time()
            reader.execute("SELECT step_payload FROM steps WHERE idx = 1").fetchone()
            timed.append(time.thread_time() - start)
        rows.append(
            (f"sqlite: SELECT the rewritten row ({len(payloads[1]):,} B)", min(timed) * 1000)
        )
        reader.close()
        writer.close()
        # The source's own read of it (a blob handle for a large payload since issue 31).
        try:
            from agy_provider.agy.database import open_conversation_db
            from agy_provider.agy.database import read_snapshot
            from agy_provider.agy.database import read_step_rows
            from agy_provider.sim.writer import ConversationWriter

            steps = [planner_step(text[:n], "", status=GENERATING) for n in (old_end, end)]
            conversation = ConversationWriter(Path(tmp) / "conversation.db", CONVERSATION)
            index = conversation.append(steps[0])
            source_conn = open_conversation_db(Path(tmp) / "conversation.db")
            timed = []
            for n in range(15):
                conversation.update(index, steps[n % 2])
                start = time.thread_time()
                with read_snapshot(source_conn):
                    read_step_rows(source_conn, [index])
                timed.append(time.thread_time() - start)
            rows.append(("sqlite: read_step_rows of the rewritten row", min(timed) * 1000))
            source_conn.close()
            conversation.close()
        except ImportError:
            pass

    def grown_row() -> None:
        texts = GrowingTexts()
        decode_step_row(1, 15, 8, payloads[0], texts=texts)
        start = time.thread_time()
        decode_step_row(1, 15, 8, payloads[1], texts=texts)
        timed.append(time.thread_time() - start)

    timed: list[float] = []
    rows.append(
        ("sqlite: decode the row afresh", _best(lambda: decode_step_row(1, 15, 8, payloads[1])))
    )
    for _ in range(15):
        grown_row()
    rows.append(("sqlite: decode the row, GrowingTexts", min(timed) * 1000))
    rows.append(
        (
            f"rpc: jsontext.loads of the frame ({len(frames[1]):,} B)",
            _best(lambda: jsontext.loads(frames[1])),
        )
    )
    raws = [
        jsontext.loads(f)["update"]["mainTrajectoryUpdate"]["stepsUpdate"]["steps"][0]
        for f in frames
    ]
    timed = []
    for _ in range(15 if GrowingJson is not None else 0):
        growing = GrowingJson()
        growing.loads(frames[0])
        start = time.thread_time()
        growing.loads(frames[1])
        timed.append(time.thread_time() - start)
    if timed:
        rows.append(("rpc: GrowingJson.loads of the frame after the last", min(timed) * 1000))
    rows.append(("rpc: decode_json_step afresh", _best(lambda: decode_json_step(raws[1], index=1))))
    timed = []
    for _ in range(15):
        checked = CheckedTexts()
        decode_json_step(raws[0], index=1, texts=checked)
        start = time.thread_time()
        decode_json_step(raws[1], index=1, texts=checked)
        timed.append(time.thread_time() - start)
    rows.append(("rpc: decode_json_step, CheckedTexts", min(timed) * 1000))
    steps = [
        Step(index=1, kind=StepKind.ASSISTANT, status=StepStatus.GENERATING, text=text[:n])
        for n in (old_end, end)
    ]
    user = Step(index=0, kind=StepKind.USER, status=StepStatus.DONE)
    timed = []
    for _ in range(15):
        assembler = StepAssembler(model="bench")
        assembler.feed([user, steps[0]])
        start = time.thread_time()
        assembler.feed([steps[1]])
        timed.append(time.thread_time() - start)
    rows.append(("both: StepAssembler.feed of the delta", min(timed) * 1000))
    print("\nthe last delta's parts, this tree alone (ms of thread CPU, best of 15):")
    for name, value in rows:
        print(f"  {name:<52} {value:6.2f}")


# -- the comparison -------------------------------------------------------------------------------


def tree_label(tree: Path) -> str:
    marker = tree / "COMMIT"
    if marker.exists():
        return marker.read_text().strip()[:10]
    found = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    )
    label = found.stdout.strip() or "?"
    return label + (" + edits" if dirty.stdout.strip() else "")


def run_side(
    tree: Path, source: str, args: argparse.Namespace, size: int, deltas: int
) -> list[float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    argv = [sys.executable, __file__, "--measure", source, str(size), str(deltas)]
    argv.append(str(int(args.ascii)))
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, cwd=tree)
    if done.returncode != 0:
        raise SystemExit(f"{source} on {tree} failed:\n{done.stderr[-3000:]}")
    values: list[float] = json.loads(done.stdout.strip().splitlines()[-1])
    return values


def summary(cpu: list[float]) -> tuple[float, float, float]:
    tenth = max(1, len(cpu) // 10)
    first = statistics.median(cpu[:tenth]) * 1000
    last = statistics.median(cpu[-tenth:]) * 1000
    return first, last, sum(cpu)


# Issue 31's goals: (figure, how it is shown, the bound, the sources it binds).
GOALS = (
    ("growth", "{n}x the answer: whole-answer CPU ratio", 5.0, ("sqlite", "rpc", "stream-json")),
    ("flat", "last 10 % / first 10 % of deltas at {size}", 1.5, ("sqlite", "rpc", "stream-json")),
    ("per_delta", "mean CPU per delta at {size}, ms", 1.5, ("sqlite", "rpc")),
)


def print_goals(
    figures: dict[tuple[str, str], dict[str, float]],
    configs: list[tuple[int, int]],
    sides: list[str],
    rounds: int,
) -> None:
    """Each goal against ours, the baseline's figure beside it (medians over the rounds)."""
    if len(configs) < 2:
        return
    small, large = configs[0][0], configs[-1][0]
    print(f"\ngoals (issue 31; medians of {rounds} round(s)); ours, then the baseline's")
    for source in dict.fromkeys(source for source, _ in figures):
        for key, label, bound, binds in GOALS:
            ours = figures[(source, "ours")][key]
            shown = label.format(n=f"{large / small:.0f}", size=f"{large:,}")
            verdict = ("PASS" if ours <= bound else "FAIL") if source in binds else "reference"
            line = f"  {source:<11} {shown:<48} {ours:6.2f} (goal <= {bound}) {verdict}"
            if "base" in sides:
                line += f"   base {figures[(source, 'base')][key]:6.2f}"
            print(line)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--sqlite-writer":
        db, size, deltas, ascii_only = sys.argv[2:6]
        sqlite_writer_main(db, int(size), int(deltas), ascii_only == "1")
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--rpc-server":
        size, deltas, ascii_only = sys.argv[2:5]
        rpc_server_main(int(size), int(deltas), ascii_only == "1")
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--streamjson-writer":
        size, deltas, ascii_only = sys.argv[2:5]
        streamjson_writer_main(int(size), int(deltas), ascii_only == "1")
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--parts":
        size, deltas, ascii_only = sys.argv[2:5]
        parts_main(int(size), int(deltas), ascii_only == "1")
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--measure":
        source, size, deltas, ascii_only = sys.argv[2:6]
        measure_main(source, int(size), int(deltas), ascii_only == "1")
        return 0
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=1_000_000, help="answer size in characters")
    parser.add_argument("--deltas", type=int, default=400)
    parser.add_argument("--sizes", help="answer sizes to compare (comma-separated); see --chunk")
    parser.add_argument("--chunk", type=int, help="characters per delta (deltas = size / chunk)")
    parser.add_argument("--sources", default="sqlite,rpc", help="of sqlite, rpc, stream-json")
    parser.add_argument("--base", type=Path, help="a checkout to measure as the baseline")
    parser.add_argument("--rounds", type=int, default=1, help="runs per side, interleaved")
    parser.add_argument("--ascii", action="store_true", help="an all-ASCII answer")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")] if args.sizes else [args.size]
    configs = [(n, n // args.chunk if args.chunk else args.deltas) for n in sizes]
    ours = Path(__file__).resolve().parent.parent
    trees = [("base", args.base.resolve())] if args.base else []
    trees.append(("ours", ours))
    load = os.getloadavg()
    shown = ", ".join(f"{n:,} characters in {d} deltas" for n, d in configs)
    print(
        f"bench_growth: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load "
        f"{load[0]:.2f}, {os.cpu_count()} cores; answers of {shown} "
        f"({'ASCII' if args.ascii else 'mostly ASCII, some multibyte'}), {args.rounds} round(s)"
    )
    for name, tree in trees:
        print(f"  {name}: {tree} at {tree_label(tree)}")
    print("\nreader CPU per delta (ms, median of the first / last 10 % of deltas, and the mean)")
    figures: dict[tuple[str, str], dict[str, float]] = {}
    for source in args.sources.split(","):
        results: dict[tuple[str, int], list[list[float]]] = {}
        for _round in range(args.rounds):
            for size, deltas in configs:
                for name, tree in trees:
                    cpu = run_side(tree, source, args, size, deltas)
                    results.setdefault((name, size), []).append(cpu)
        for name, _tree in trees:
            means: dict[int, float] = {}
            totals: dict[int, float] = {}
            for size, _deltas in configs:
                runs = results[(name, size)]
                for cpu in runs:
                    first, last, total = summary(cpu)
                    print(
                        f"  {source:<11} {name:<4} {size:>9,}  first {first:6.2f}  last {last:6.2f}"
                        f"  last/first {last / first:5.2f}x  mean {total / len(cpu) * 1000:6.2f}"
                        f"  whole answer {total:6.2f} s CPU"
                    )
                means[size] = statistics.median(sum(c) / len(c) for c in runs) * 1000
                totals[size] = statistics.median(sum(c) for c in runs)
            small, large = configs[0][0], configs[-1][0]
            flat = statistics.median(summary(c)[1] / summary(c)[0] for c in results[(name, large)])
            figures[(source, name)] = {
                "growth": totals[large] / totals[small],
                "flat": flat,
                "per_delta": means[large],
            }
            if len(configs) > 1:
                print(
                    f"  {source:<11} {name:<4} {large / small:.0f}x the answer: whole answer "
                    f"{totals[large] / totals[small]:5.2f}x the CPU, per delta "
                    f"{means[large] / means[small]:5.2f}x ({means[small]:.2f} -> "
                    f"{means[large]:.2f} ms, medians of {args.rounds})"
                )
    print_goals(figures, configs, [name for name, _ in trees], args.rounds)
    # What is still proportional to the whole text, in this tree: one late delta's parts.
    size, deltas = configs[-1]
    argv = [sys.executable, __file__, "--parts", str(size), str(deltas)]
    argv.append(str(int(args.ascii)))
    env = dict(os.environ, PYTHONPATH=str(ours))
    subprocess.run(argv, env=env, check=True, cwd=ours)
    return 0


if __name__ == "__main__":
    sys.exit(main())
