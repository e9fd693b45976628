"""Benchmark: `POST /v1/messages/count_tokens` (issue 28, item 3).

1. Speed: a ~100k-token Messages request (prose, code, JSON tool results, a little CJK, tools)
   counted in process — the estimate alone (`estimate_context`), and the whole of what the route
   does (JSON parse, conversion, estimate). Goal: ≤ 5 ms for the estimate. Baseline in the same
   run: `len(body) / 4`, the cheapest count there is.
2. Against agy-sim: serve on agy-sim in this process; for each scenario, `count_tokens` of a
   request and the input agy-sim reports for that request's turn (`input_tokens` +
   `cache_read_input_tokens` of the answer), side by side. agy-sim's figure is the scenario
   file's own number (captured from real agy, whose system prompt and tools dominate it), not a
   count of the request: the table shows how far apart the two are, and why.

Run: `.venv/bin/python benchmarks/bench_count_tokens.py [--rounds 50]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for live_support

import live_support as live

GOAL_MS = 5.0
SCENARIOS = ("default", "thinking", "two-turn", "tools", "subagent", "slow")

PROSE = (
    "The provider keeps one agy conversation per client and resends only the newest message; "
    "when the transcript diverges it starts again with the history as a preamble. "
)
CODE = """def place(self, ask: ServeAsk, owner: Owner) -> Placement:
    messages = self._verified(ask.context.messages, owner.key)
    restored = self.delivered.restore(messages, owner.key)
    if not conversation and owner.key:
        conversation = self._mains.get(owner.key, "")
"""
TOOL_JSON = json.dumps(
    {
        "files": [
            {"path": f"src/module_{i}.py", "lines": 120 + i, "ok": i % 3 == 0} for i in range(8)
        ]
    }
)
CJK = "会话的所有者由客户端自己的信号决定。"


def big_request(target_tokens: int = 100_000) -> dict[str, Any]:
    """A Messages request of about `target_tokens` (by this estimator), in realistic pieces."""
    from agy_provider.hosts.serve.convert import anthropic_ask
    from agy_provider.hosts.serve.tokens import estimate_context

    tools = [
        {
            "name": f"tool_{i}",
            "description": "Read a file of the project and return its lines.",
            "input_schema": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["path"],
            },
        }
        for i in range(12)
    ]
    messages: list[dict[str, Any]] = []
    body = {"model": "default", "system": PROSE * 20, "tools": tools, "messages": messages}
    turn = 0
    while True:
        turn += 1
        call = f"toolu_{turn:06d}"
        messages += [
            {"role": "user", "content": PROSE * 4 + CJK},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": PROSE + CODE},
                    {"type": "tool_use", "id": call, "name": "tool_1", "input": {"path": "a.py"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call, "content": TOOL_JSON + CODE * 3}
                ],
            },
            {"role": "assistant", "content": PROSE * 2},
        ]
        if turn % 20 == 0 and estimate_context(anthropic_ask(body).context) >= target_tokens:
            return body


def speed(rounds: int) -> str:
    from agy_provider.hosts.serve.convert import anthropic_ask
    from agy_provider.hosts.serve.tokens import estimate_context

    body = big_request()
    raw = json.dumps(body).encode()
    context = anthropic_ask(body).context
    tokens = estimate_context(context)

    def timed(work: Any) -> list[float]:
        out = []
        for _ in range(rounds):
            started = time.perf_counter()
            work()
            out.append((time.perf_counter() - started) * 1000)
        return out

    estimate = timed(lambda: estimate_context(context))
    whole = timed(lambda: estimate_context(anthropic_ask(json.loads(raw)).context))
    naive = timed(lambda: len(raw) // 4)
    print(
        f"\n1. speed: a request of {tokens:,} estimated tokens ({len(raw) / 1e6:.2f} MB of JSON, "
        f"{len(body['messages'])} messages), {rounds} rounds"
    )
    for name, values in (
        ("estimate_context", estimate),
        ("parse + convert + estimate", whole),
        ("baseline len(body)/4", naive),
    ):
        print(
            f"   {name:28} median {statistics.median(values):7.3f} ms   "
            f"p90 {live.percentile(values, 90):7.3f} ms"
        )
    median = statistics.median(estimate)
    return (
        f"count_tokens estimate of a 100k-token request: median {median:.2f} ms (goal ≤ "
        f"{GOAL_MS:g} ms): {'PASS' if median <= GOAL_MS else 'FAIL'}"
    )


async def against_sim() -> list[tuple[str, int, int]]:
    import httpx

    from agy_provider.hosts.serve.app import ServeServer
    from agy_provider.hosts.serve.app import ServeSettings

    token = secrets.token_urlsafe(24)
    server = ServeServer(ServeSettings(token=token, port=0))
    stop = asyncio.Event()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    serving = asyncio.ensure_future(server.run(stop, ready.set_result))
    port = await ready
    rows = []
    body = {
        "model": "default",
        "max_tokens": 256,
        "system": "You are a careful coding assistant.",
        "messages": [{"role": "user", "content": "Look at the project and tell me what it does."}],
    }
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}",
            headers={"authorization": f"Bearer {token}"},
            timeout=120,
        ) as http:
            for scenario in SCENARIOS:
                os.environ["AGY_SIM_SCENARIO"] = scenario
                counted = (await http.post("/v1/messages/count_tokens", json=body)).json()
                answer = (await http.post("/v1/messages", json=body)).json()
                usage = answer.get("usage") or {}
                reported = usage.get("input_tokens", 0) + usage.get("cache_read_input_tokens", 0)
                rows.append((scenario, counted["input_tokens"], reported))
    finally:
        stop.set()
        await serving
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    live.run_header("bench_count_tokens: serve's local input-token estimate")
    verdict = speed(args.rounds)
    with live.private_world("bench-count-tokens-"):
        os.environ["AGY_EVENT_SOURCE"] = "sqlite"
        rows = asyncio.run(against_sim())
    print("\n2. against agy-sim (its figure is the scenario file's number, not a count):")
    print(f"   {'scenario':12} {'count_tokens':>12} {'agy-sim input':>14} {'ratio':>7}")
    for scenario, counted, reported in rows:
        ratio = counted / reported if reported else float("nan")
        print(f"   {scenario:12} {counted:12,} {reported:14,} {ratio:7.3f}")
    within = sum(1 for _, c, r in rows if r and abs(c - r) <= 0.15 * r)
    print(f"\nverdicts:\n  {verdict}")
    print(
        f"  within 15% of agy-sim's reported input: {within}/{len(rows)} scenarios (agy-sim's "
        "figure is scripted per scenario and includes agy's own prompt: not a measure of the "
        "estimate)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
