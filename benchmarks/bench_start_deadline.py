"""Benchmark: a hung agy's turn ends or falls back within the start deadline + 1 s (issue 29).

agy-sim's fault `AGY_SIM_HANG_AT_START` makes agy hang after its cold start (2500 ms here, as
real agy's 2.3–2.8 s) without starting the turn, as a sign-in prompt or a broken install does.
Each case runs `--rounds` times in a fresh private world, two turns of one session each:
- `warm, hangs warm only` (`persistent`): the warm agy hangs, `agy -p` works: from the call to
  the fallback to `agy -p` (the provider's log line), and to `done`; then the next turn;
- `warm, hangs always` (`all`): to the fallback, then to the turn's `error` (its `agy -p` hangs
  too: a second deadline);
- `one-shot, hangs` (`AGY_WARM=0`, `all`): to the turn's `error`.
Goal: the fallback (or, one-shot, the error) within `--deadline` + 1 s. Baseline in the same run:
today's behaviour before the deadline, which is the same code with `start_timeout` at or above
`turn_timeout` (the start deadline is then off): the turn waits the whole `turn_timeout`, and so
does the next. The baseline's `turn_timeout` is `--turn-timeout` (10 s, not the default 600 s,
so that it runs quickly: its figures scale with it). Nothing here asserts a time.
Run: `.venv/bin/python benchmarks/bench_start_deadline.py [--deadline 3] [--turn-timeout 10]`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for live_support

import live_support as live

FALLBACK = "falls back to agy -p"
WORLD = re.compile(r"/\S*agy-bench-start-\w+")  # each round's own temp folder, in its errors


class FallbackLog(logging.Handler):
    """When the provider said a turn falls back to `agy -p` (perf_counter)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.at: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if FALLBACK in record.getMessage():
            self.at.append(time.perf_counter())


@dataclasses.dataclass
class Case:
    name: str
    hang: str  # AGY_SIM_HANG_AT_START
    warm: bool


CASES = (
    Case("warm, hangs warm only", "persistent", True),
    Case("warm, hangs always", "all", True),
    Case("one-shot, hangs", "all", False),
)


@dataclasses.dataclass
class Round:
    fallback: float = float("nan")  # seconds from the call to the fallback (nan: none)
    end: float = float("nan")  # seconds from the call to `done`/`error`
    ok: bool = False
    error: str = ""
    next_end: float = float("nan")  # the session's next turn, call to its end
    next_ok: bool = False


async def one_round(case: Case, start_timeout: float, turn_timeout: float) -> Round:
    from agy_provider.live.warm.pool import POOL

    os.environ.update(
        {
            "AGY_SIM_HANG_AT_START": case.hang,
            "AGY_WARM": "1" if case.warm else "0",
            "AGY_START_TIMEOUT": str(start_timeout),
            "AGY_TURN_TIMEOUT": str(turn_timeout),
            "AGY_IDLE_TIMEOUT": str(turn_timeout),
            "AGY_SIM_COLD_START_MS": "2500",
            "AGY_SIM_NO_SERVER": "1",
        }
    )
    POOL.forget_failed_starts()
    log = FallbackLog()
    logger = logging.getLogger("agy_provider")
    logger.addHandler(log)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    result = Round()
    try:
        first = await live.timed_turn("sqlite", session="s")
        result.ok, result.error, result.end = first.ok, first.error, first.end
        if log.at:
            result.fallback = log.at[0] - first.called_at
        second = await live.timed_turn("sqlite", session="s")
        result.next_ok, result.next_end = second.ok, second.end
    finally:
        logger.removeHandler(log)
        logger.setLevel(old_level)
        await asyncio.to_thread(POOL.shutdown)
    return result


def summary(values: list[float]) -> str:
    seen = [v for v in values if v == v]
    if not seen:
        return "     —"
    return f"{live.median(seen):6.2f} s (max {max(seen):.2f})"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deadline", type=float, default=3.0, help="start_timeout, seconds")
    parser.add_argument("--turn-timeout", type=float, default=10.0, help="seconds")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    live.run_header("Start deadline: a hung agy's turn (issue 29)")
    print(
        f"  start_timeout {args.deadline:g} s, turn_timeout {args.turn_timeout:g} s, agy-sim "
        f"cold start 2500 ms at AGY_SIM_SPEED {live.SIM_SPEED}, {args.rounds} rounds per case"
    )
    bound = args.deadline + 1.0
    # The process's first turn also imports the turn machinery (in a worker, ~0.5 s on a busy
    # machine): one ordinary turn first, so that the cases measure the deadline, not the import.
    with live.private_world("agy-bench-start-"):
        os.environ.update({"AGY_SIM_NO_SERVER": "1", "AGY_SIM_COLD_START_MS": "0"})
        warm_up = await live.timed_turn("sqlite")
        print(f"  warm-up turn (no fault): {'done' if warm_up.ok else warm_up.error}")
        from agy_provider.live.warm.pool import POOL

        await asyncio.to_thread(POOL.shutdown)
    verdicts = []
    for case in CASES:
        for label, start_timeout in (
            ("deadline", args.deadline),
            ("baseline", args.turn_timeout),  # at turn_timeout: the start deadline is off
        ):
            rounds = []
            for _ in range(args.rounds):
                with live.private_world("agy-bench-start-"):
                    rounds.append(await one_round(case, start_timeout, args.turn_timeout))
            ends = [r.end for r in rounds]
            falls = [r.fallback for r in rounds]
            outcome = ", ".join(sorted({"done" if r.ok else "error" for r in rounds}))
            nexts = ", ".join(sorted({"done" if r.next_ok else "error" for r in rounds}))
            print(f"\n  {case.name} — {label}")
            print(f"    to the fallback to agy -p   {summary(falls)}")
            print(f"    to the turn's end ({outcome:>5})  {summary(ends)}")
            print(f"    the next turn ({nexts:>5})      {summary([r.next_end for r in rounds])}")
            errors = {WORLD.sub("<world>", r.error)[:150] for r in rounds if r.error}
            for error in sorted(errors):
                print(f"    error: {error}")
            if label != "deadline":
                continue
            measured = falls if case.warm else ends
            worst = max((v for v in measured if v == v), default=float("nan"))
            passed = worst == worst and worst <= bound
            what = "fallback" if case.warm else "error"
            verdicts.append(
                f"  {case.name}: {what} within {worst:.2f} s, bound {bound:g} s: "
                f"{'PASS' if passed else 'FAIL'}"
            )
    print("\nGoal: the turn ends or falls back within start_timeout + 1 s")
    print("\n".join(verdicts))


if __name__ == "__main__":
    asyncio.run(main())
