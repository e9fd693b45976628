"""Benchmark: what `agy-provider serve` adds on top of the provider (issue 19's goals).

1. First SSE chunk vs the in-process first event of the same turn: the server (in this process)
   records, through an `observe_event` plugin, when each turn's first delta (thinking or text)
   was pushed to its stream; a client in another process records when the SSE chunk carrying
   it arrived. Both read CLOCK_MONOTONIC (`time.monotonic`), which is one clock for every
   process on Linux. Goal: ≤ 10 ms (median and p90 printed; each of `--rounds` turns one after
   another).
2. 20 concurrent streaming clients (another process, one asyncio task each): every one must end
   with the scenario's text; the server's loop lag meanwhile (a 5 ms sleeper recording how late
   it wakes), goal p99 ≤ 20 ms. Baseline in the same run: 20 concurrent `stream_simple` turns in
   process, no server, with the same probe.
3. A client closing its stream after the first delta (5 times, the slow scenario): ms until its
   turn's `aborted` event and until no agy-sim process is left (goal ≤ 200 ms).
4. The Responses API (issue 30): `POST /v1/responses` streamed, `--rounds` turns one after
   another: the first `response.output_text.delta` against the in-process first *text* delta of
   the same turn (goal ≤ 10 ms), and every delta against its own push (no added lateness),
   printed beside the same figures for Chat Completions' `content` chunks in the same run.
5. With `--many N` (issue 29: N = 50), N streaming clients at once through serve with the
   provider's default settings (warm pool, `event_source` auto, `cold_starts` from the CPU
   count) and agy-sim at speed 1 with its 2.5 s cold start for every agy (warm and `-p`), each
   side in a fresh server process: every client must end with the scenario's text in ≥ 2 text
   deltas; first text p99 ≤ 2 × ceil(N / cold_starts) × 2.5 s; the server's loop lag p99 ≤ 50 ms.
   Baseline in the same run: `cold_starts` 1000 (no admission: every agy starts at once, as
   before the queue existed).

Run: `.venv/bin/python benchmarks/bench_serve.py [--rounds 10] [--clients 20] [--many 50]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for live_support

import live_support as live

from agy_provider.hookspecs import hookimpl

FIRST_CHUNK_GOAL_MS = 10.0
LAG_P99_GOAL_MS = 20.0
MANY_LAG_P99_GOAL_MS = 50.0
COLD_START_S = 2.5  # agy-sim's default, and real agy's 2.3-2.8 s (AGY-FORMATS §2.4)
UNBOUNDED = 1000  # `cold_starts` at its maximum: no turn ever waits (the baseline)


# --- the client side (run as `bench_serve.py --client …` in its own process) --------------------


async def _client_stream(http: Any, body: dict[str, Any]) -> dict[str, Any]:
    first = float("nan")
    text = ""
    async with http.stream("POST", "/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            for choice in json.loads(line[6:])["choices"]:
                delta = choice["delta"]
                if (delta.get("reasoning_content") or delta.get("content")) and first != first:
                    first = time.monotonic()
                text += delta.get("content") or ""
    return {"first": first, "text": text, "status": response.status_code}


async def _client_chat_text(http: Any, body: dict[str, Any]) -> list[float]:
    """When each of a Chat Completions stream's `content` chunks arrived."""
    arrived = []
    async with http.stream("POST", "/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            said = line.startswith("data: {") and '"content":"' in line
            if said and any(c["delta"].get("content") for c in json.loads(line[6:])["choices"]):
                arrived.append(time.monotonic())
    return arrived


async def _client_responses(http: Any) -> dict[str, Any]:
    """When each of a Responses stream's `response.output_text.delta`s arrived, and its text."""
    body = {"model": "default", "stream": True, "input": "hi"}
    arrived = []
    text = ""
    async with http.stream("POST", "/v1/responses", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {") and "response.output_text.delta" in line:
                arrived.append(time.monotonic())
                text += json.loads(line[6:])["delta"]
    return {"arrived": arrived, "text": text}


async def _client(base: str, token: str, rounds: int, clients: int) -> None:
    import httpx

    body = {"model": "default", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    limits = httpx.Limits(max_connections=clients + 1)
    async with httpx.AsyncClient(
        base_url=base, headers={"authorization": f"Bearer {token}"}, timeout=120, limits=limits
    ) as http:
        sequential = [await _client_stream(http, body) for _ in range(rounds)]
        # Chat's first text and the Responses API's, alternating, so load drifts hit both alike.
        chat_text: list[list[float]] = []
        responses: list[dict[str, Any]] = []
        for _ in range(rounds):
            chat_text.append(await _client_chat_text(http, body))
            responses.append(await _client_responses(http))
        started = time.monotonic()
        concurrent = await asyncio.gather(*(_client_stream(http, body) for _ in range(clients)))
        wall = time.monotonic() - started
    print(
        json.dumps(
            {
                "sequential": sequential,
                "chat_text": chat_text,
                "responses": responses,
                "concurrent": concurrent,
                "wall": wall,
            }
        )
    )


async def _many_stream(http: Any, body: dict[str, Any]) -> dict[str, Any]:
    sent = time.monotonic()
    first = float("nan")
    text, deltas, status, error = "", 0, 0, ""
    try:
        async with http.stream("POST", "/v1/chat/completions", json=body) as response:
            status = response.status_code
            async for line in response.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                for choice in json.loads(line[6:])["choices"]:
                    content = choice["delta"].get("content") or ""
                    if content:
                        deltas += 1
                        if first != first:
                            first = time.monotonic()
                    text += content
    except Exception as exc:  # a client that failed is counted, not fatal
        error = f"{type(exc).__name__}: {exc}"
    return {"first": first - sent, "text": text, "deltas": deltas, "status": status, "error": error}


async def _many_client(base: str, token: str, clients: int) -> None:
    import httpx

    body = {"model": "default", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    limits = httpx.Limits(max_connections=clients + 1)
    async with httpx.AsyncClient(
        base_url=base, headers={"authorization": f"Bearer {token}"}, timeout=600, limits=limits
    ) as http:
        started = time.monotonic()
        results = await asyncio.gather(*(_many_stream(http, body) for _ in range(clients)))
        wall = time.monotonic() - started
    print(json.dumps({"clients": results, "wall": wall}))


# --- the server side -------------------------------------------------------------------------------


class FirstDeltas:
    """`observe_event`: when each turn pushed its first thinking or text delta (monotonic)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.texts: list[list[float]] = []  # each turn's text deltas, when pushed
        self.aborted: list[float] = []  # when a turn's `error` (reason aborted) was produced
        self._seen: list[Any] = []  # the turns themselves: an id() may be reused once one is gone
        self._seen_text: list[Any] = []

    @hookimpl
    def observe_event(self, event: Any, turn: Any) -> None:
        if event.type == "error" and event.reason == "aborted":
            self.aborted.append(time.monotonic())
        if event.type == "text_delta" and event.delta:
            if not any(t is turn for t in self._seen_text):
                self._seen_text.append(turn)
                self.texts.append([])
            # A turn's deltas all come before the next turn starts (the rounds run one by one).
            self.texts[-1].append(time.monotonic())
        if event.type in ("thinking_delta", "text_delta") and not any(
            t is turn for t in self._seen
        ):
            self._seen.append(turn)
            self.times.append(time.monotonic())


async def with_server(rounds: int, clients: int) -> tuple[dict[str, Any], list[float], Any]:
    from agy_provider.hosts.serve.app import ServeServer
    from agy_provider.hosts.serve.app import ServeSettings
    from agy_provider.plugin_manager import get_plugin_manager

    observer = FirstDeltas()
    get_plugin_manager().register(observer, name="bench-first-deltas")
    token = secrets.token_urlsafe(24)
    server = ServeServer(ServeSettings(token=token, port=0))
    stop = asyncio.Event()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    serving = asyncio.ensure_future(server.run(stop, ready.set_result))
    port = await ready
    await live.timed_turn("sqlite")  # imports, plugins, agy's version: once, before measuring
    observer.times.clear()
    probe = live.LagProbe()
    leaving = await clients_leaving(port, token, observer)
    observer.times.clear()  # the sequential rounds' first deltas only, from here
    observer.texts.clear()
    client = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--client",
        f"http://127.0.0.1:{port}",
        token,
        str(rounds),
        str(clients),
        stdout=asyncio.subprocess.PIPE,
    )
    assert client.stdout is not None
    # The lag probe runs while the concurrent clients do (the sequential rounds come first).
    while len(observer.times) < 3 * rounds:
        await asyncio.sleep(0.01)
    probe.start()
    out = await client.stdout.read()
    await client.wait()
    await probe.stop()
    stop.set()
    await serving
    get_plugin_manager().unregister(name="bench-first-deltas")
    # The turns' text deltas, in the client's order: its plain rounds, then chat and Responses
    # alternating.
    texts = observer.texts[rounds : 3 * rounds]
    pushed = {"chat_text": texts[0::2], "responses": texts[1::2]}
    return {**json.loads(out), "leaving": leaving, "pushed": pushed}, observer.times[:rounds], probe


async def clients_leaving(port: int, token: str, observer: FirstDeltas, trials: int = 5) -> Any:
    """A client that closes its stream after the first delta: ms until its turn's `aborted`
    event, and until no agy process is left (polled every 5 ms)."""
    import httpx

    from agy_provider.live.runner import find_agy
    from agy_provider.live.warm.pool import POOL

    body = {"model": "default", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    # The warm-up turn's agy (and its spare) stay warm in the pool: ended first, so that "no agy
    # left" speaks of each leaving client's turn alone (an aborted turn's agy is never kept).
    POOL.shutdown()
    os.environ["AGY_SIM_SCENARIO"] = "slow"  # a turn that surely still runs when the client goes
    os.environ["AGY_SIM_SPEED"] = "1"
    sim = find_agy("agy-sim")
    to_abort, to_gone = [], []
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}",
            headers={"authorization": f"Bearer {token}"},
            timeout=60,
        ) as http:
            for _ in range(trials):
                before = len(observer.aborted)
                async with http.stream("POST", "/v1/chat/completions", json=body) as response:
                    async for line in response.aiter_lines():
                        if "reasoning_content" in line:
                            break
                    left = time.monotonic()
                while not await asyncio.to_thread(_no_sim_left, sim):
                    await asyncio.sleep(0.005)
                to_gone.append((time.monotonic() - left) * 1000)
                while len(observer.aborted) == before:
                    await asyncio.sleep(0.005)
                to_abort.append((observer.aborted[-1] - left) * 1000)
    finally:
        os.environ.pop("AGY_SIM_SCENARIO", None)
        os.environ["AGY_SIM_SPEED"] = live.SIM_SPEED
    return {"abort": to_abort, "gone": to_gone}


def _no_sim_left(sim: str) -> bool:
    import psutil

    state = os.environ["ANTIGRAVITY_APP_DATA_DIR"]
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            if sim in " ".join(proc.info["cmdline"] or []) and (
                (proc.info["environ"] or {}).get("ANTIGRAVITY_APP_DATA_DIR") == state
            ):
                return False
        except psutil.Error:
            continue
    return True


class TurnEnds:
    """`observe_event`: the source each turn read its first text from (the final drain reads
    the database whatever streamed), and at its final event its wait in the queue."""

    def __init__(self) -> None:
        self.sources: list[str] = []
        self.waits: list[float] = []
        self._seen: list[Any] = []

    @hookimpl
    def observe_event(self, event: Any, turn: Any) -> None:
        if event.type == "text_delta" and not any(t is turn for t in self._seen):
            self._seen.append(turn)
            self.sources.append(turn.source)
        if event.type in ("done", "error"):
            admission = getattr(turn.process, "admission", None)
            self.waits.append(getattr(admission, "waited", 0.0))


async def many_side(clients: int) -> dict[str, Any]:
    """One side of part 4, in a fresh process: a server, a warm-up turn (its agys then ended),
    then `clients` streaming clients at once from another process, the loop lag meanwhile."""
    from agy_provider.hosts.serve.app import ServeServer
    from agy_provider.hosts.serve.app import ServeSettings
    from agy_provider.live.warm.pool import POOL
    from agy_provider.plugin_manager import get_plugin_manager

    try:
        from agy_provider.live.admission import COLD_STARTS
    except ImportError:  # a tree from before the queue (`--baseline-tree`)
        COLD_STARTS = None
    ends = TurnEnds()
    token = secrets.token_urlsafe(24)
    server = ServeServer(ServeSettings(token=token, port=0))
    stop = asyncio.Event()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    serving = asyncio.ensure_future(server.run(stop, ready.set_result))
    port = await ready
    await live.timed_turn("auto")  # imports, plugins, agy's version: once, before measuring
    await asyncio.to_thread(POOL.shutdown)  # the batch starts with no agy warm, no spare
    get_plugin_manager().register(ends, name="bench-turn-ends")
    probe = live.LagProbe()
    probe.start()
    client = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--many-client",
        f"http://127.0.0.1:{port}",
        token,
        str(clients),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await client.communicate()
    await probe.stop()
    stop.set()
    await serving
    get_plugin_manager().unregister(name="bench-turn-ends")
    p50, p99, worst = probe.summary()
    return {
        **json.loads(out),
        "lag": [p50, p99, worst],
        # The bound the turns configured (from AGY_COLD_STARTS); None: no queue in this tree.
        "admitted": COLD_STARTS.limit if COLD_STARTS is not None else None,
        "sources": ends.sources,
        "waits": ends.waits,
    }


async def _many_side_process(clients: int, cold_starts: int, tree: str = "") -> dict[str, Any]:
    env = {
        **os.environ,
        # Another tree (`--baseline-tree`): its provider and agy-sim, this script.
        **({"PYTHONPATH": tree} if tree else {}),
        "AGY_COLD_STARTS": str(cold_starts),
        "AGY_SIM_SPEED": "1",
        # Every agy's cold start, `-p` too (agy-sim's `-p` default is the scenario's 150 ms).
        "AGY_SIM_COLD_START_MS": str(int(COLD_START_S * 1000)),
        "AGY_TURN_TIMEOUT": "600",
        "AGY_IDLE_TIMEOUT": "600",
    }
    env.pop("AGY_EVENT_SOURCE", None)  # the default: auto (rpc, beside the database)
    side = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--many-side",
        str(clients),
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await side.communicate()
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


def many_report(name: str, side: dict[str, Any], expected: str) -> tuple[str, bool]:
    clients = side["clients"]
    n = len(clients)
    right = sum(c["text"] == expected for c in clients)
    streamed = sum(c["text"] == expected and c["deltas"] >= 2 for c in clients)
    firsts = [c["first"] for c in clients if c["first"] == c["first"]]
    p50, p99 = live.percentile(firsts, 50), live.percentile(firsts, 99)
    lag50, lag99, lagmax = side["lag"]
    admitted = side["admitted"] or UNBOUNDED  # a tree without the queue starts all at once
    sources: dict[str, int] = {}
    for source in side["sources"]:
        sources[source or "-"] = sources.get(source or "-", 0) + 1
    waits = sorted(side["waits"])
    bound = 2 * math.ceil(n / admitted) * COLD_START_S
    print(f"   {name} (cold_starts {admitted}, {side['wall']:.1f} s wall):")
    print(f"     {right}/{n} complete, {streamed}/{n} streamed (≥ 2 text deltas)")
    print(f"     first text p50 {p50:.2f} s  p99 {p99:.2f} s  max {max(firsts, default=0):.2f} s")
    print(f"     server loop lag p50 {lag50:.2f} ms  p99 {lag99:.2f} ms  max {lagmax:.1f} ms")
    print(f"     source of the first text: {sources}; queue wait max {max(waits, default=0):.2f} s")
    errors = sorted({c["error"] or str(c["status"]) for c in clients if c["text"] != expected})
    if errors:
        print(f"     failed clients: {errors[:3]}")
    ok = streamed == n and p99 <= bound and lag99 <= MANY_LAG_P99_GOAL_MS
    return (
        f"{name}: {streamed}/{n} streamed, first text p99 {p99:.2f} s (goal ≤ {bound:.1f} s), "
        f"loop lag p99 {lag99:.2f} ms (goal ≤ {MANY_LAG_P99_GOAL_MS:.0f} ms): "
        f"{'PASS' if ok else 'FAIL'}"
    ), ok


async def run_many(clients: int, runs: int, expected: str, tree: str = "") -> list[str]:
    print(
        f"\n4. {clients} streaming clients at once, default settings, agy-sim cold start "
        f"{COLD_START_S} s, speed 1 (each side a fresh server process):"
    )
    verdicts = []
    for run in range(runs):
        # The baseline first, then the queue, alternating when there are several runs.
        sides = [("baseline (no admission)", UNBOUNDED, ""), ("admission", 0, "")]
        if tree:
            sides.insert(0, (f"baseline ({_tree_name(tree)})", UNBOUNDED, tree))
        for name, cold_starts, where in sides:
            side = await _many_side_process(clients, cold_starts, where)
            verdict, _ = many_report(f"{name}, run {run + 1}", side, expected)
            verdicts.append(verdict)
    return verdicts


def _tree_name(tree: str) -> str:
    commit = Path(tree) / "COMMIT"
    return commit.read_text().strip()[:7] if commit.exists() else tree


async def baseline(clients: int) -> tuple[int, Any]:
    probe = live.LagProbe()
    probe.start()
    turns = await asyncio.gather(*(live.timed_turn("sqlite") for _ in range(clients)))
    await probe.stop()
    return sum(t.ok for t in turns), probe


def lag_text(probe: Any) -> tuple[str, float]:
    p50, p99, worst = probe.summary()
    return f"lag p50 {p50:5.2f} ms  p99 {p99:6.2f} ms  max {worst:6.1f} ms", p99


def scenario_text() -> str:
    from agy_provider.sim.scenario import PlannerSpec
    from agy_provider.sim.scenario import load_scenario

    steps = load_scenario("default").turn(0).steps
    return "".join(c for s in steps if isinstance(s, PlannerSpec) for c in s.text)


async def run(rounds: int, clients: int) -> list[str]:
    expected = scenario_text()
    base_ok, base_probe = await baseline(clients)
    result, server_firsts, probe = await with_server(rounds, clients)
    verdicts = []
    gaps = [
        (r["first"] - t) * 1000 for r, t in zip(result["sequential"], server_firsts, strict=True)
    ]
    median, p90 = live.median(gaps), live.percentile(gaps, 90)
    print(f"\n1. first SSE chunk after the in-process first delta, {rounds} turns one at a time:")
    print(f"   median {median:.2f} ms  p90 {p90:.2f} ms  max {max(gaps):.2f} ms")
    verdicts.append(
        f"first SSE chunk: median {median:.2f} ms, p90 {p90:.2f} ms (goal ≤ {FIRST_CHUNK_GOAL_MS} ms)"
        f": {'PASS' if p90 <= FIRST_CHUNK_GOAL_MS else 'FAIL'}"
    )
    texts = [r["text"] for r in result["concurrent"]]
    right = sum(t == expected for t in texts)
    served_lag, p99 = lag_text(probe)
    base_lag, base_p99 = lag_text(base_probe)
    print(f"\n2. {clients} concurrent streaming clients ({result['wall']:.2f} s wall):")
    print(f"   serve:    {right}/{clients} with the scenario's text; server loop {served_lag}")
    print(f"   baseline: {base_ok}/{clients} stream_simple turns done in process; loop {base_lag}")
    verdicts.append(
        f"{clients} clients: {right}/{clients} right, server loop lag p99 {p99:.2f} ms "
        f"(baseline {base_p99:.2f} ms; goal ≤ {LAG_P99_GOAL_MS} ms): "
        f"{'PASS' if right == clients and p99 <= LAG_P99_GOAL_MS else 'FAIL'}"
    )
    leaving = result["leaving"]
    worst_gone = max(leaving["gone"])
    print("\n3. a client leaving after the first delta, 5 times (slow scenario, speed 1):")
    print(f"   to the turn's aborted event: {', '.join(f'{x:.0f}' for x in leaving['abort'])} ms")
    print(f"   until no agy-sim is left:    {', '.join(f'{x:.0f}' for x in leaving['gone'])} ms")
    verdicts.append(
        f"client leaving: agy gone within {worst_gone:.0f} ms at worst (goal ≤ 200 ms): "
        f"{'PASS' if worst_gone <= 200 else 'FAIL'}"
    )
    verdicts.append(responses_figure(result, expected))
    return verdicts


def _lateness(arrived: list[list[float]], pushed: list[list[float]]) -> tuple[list, list]:
    """(each turn's first delta's lateness, every delta's), ms: arrival at the client minus
    the in-process push of the same delta (the n-th of its turn)."""
    firsts, every = [], []
    for client, server in zip(arrived, pushed, strict=True):
        assert len(client) == len(server), (len(client), len(server))
        late = [(c - t) * 1000 for c, t in zip(client, server, strict=True)]
        firsts.append(late[0])
        every += late
    return firsts, every


def responses_figure(result: dict[str, Any], expected: str) -> str:
    """4. The Responses API's text deltas after the in-process ones, beside Chat's."""
    pushed = result["pushed"]
    right = sum(r["text"] == expected for r in result["responses"])
    firsts, every = _lateness([r["arrived"] for r in result["responses"]], pushed["responses"])
    chat_firsts, chat_every = _lateness(result["chat_text"], pushed["chat_text"])
    median, p90 = live.median(firsts), live.percentile(firsts, 90)
    print(f"\n4. text deltas after the same in-process text deltas, {len(firsts)} turns each:")
    for name, first, all_ in (
        ("Responses (response.output_text.delta)", firsts, every),
        ("Chat Completions (content chunk)      ", chat_firsts, chat_every),
    ):
        print(
            f"   {name}: first median {live.median(first):.2f} ms  p90 "
            f"{live.percentile(first, 90):.2f} ms; every delta ({len(all_)}) median "
            f"{live.median(all_):.2f} ms  p90 {live.percentile(all_, 90):.2f} ms"
        )
    print(f"   {right}/{len(firsts)} Responses streams with the scenario's text")
    verdict = "PASS" if p90 <= FIRST_CHUNK_GOAL_MS and right == len(firsts) else "FAIL"
    return (
        f"Responses first text delta: median {median:.2f} ms, p90 {p90:.2f} ms; every delta "
        f"p90 {live.percentile(every, 90):.2f} ms (Chat's {live.percentile(chat_every, 90):.2f}"
        f" ms; goal ≤ {FIRST_CHUNK_GOAL_MS} ms): {verdict}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--client", nargs=4, metavar=("BASE", "TOKEN", "ROUNDS", "CLIENTS"))
    parser.add_argument("--many", type=int, default=0, help="part 4 alone with N clients")
    parser.add_argument("--many-runs", type=int, default=1)
    parser.add_argument(
        "--baseline-tree",
        default="",
        help="with --many: also run the baseline on this tree (a `git archive` of main, "
        "see benchmarks/README.md), the code before the queue itself",
    )
    parser.add_argument("--many-side", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--many-client", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        base, token, rounds, clients = args.client
        asyncio.run(_client(base, token, int(rounds), int(clients)))
        return 0
    if args.many_client:
        base, token, clients = args.many_client
        asyncio.run(_many_client(base, token, int(clients)))
        return 0
    if args.many_side:
        print(json.dumps(asyncio.run(many_side(args.many_side))))
        return 0
    live.run_header("bench_serve: agy-provider serve on top of the provider")
    with live.private_world("bench-serve-"):
        if args.many:
            verdicts = asyncio.run(
                run_many(args.many, args.many_runs, scenario_text(), args.baseline_tree)
            )
        else:
            # Both sides read the database (the server's turns take the source from the config).
            os.environ["AGY_EVENT_SOURCE"] = "sqlite"
            verdicts = asyncio.run(run(args.rounds, args.clients))
    print("\nverdicts:")
    for verdict in verdicts:
        print(f"  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
