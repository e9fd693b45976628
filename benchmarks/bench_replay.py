"""Benchmark: `agy-provider replay --turn all` end to end, as a subprocess, at four sizes.

Goal: a 10,000-step conversation of several megabytes replays in under 2 s with flat memory, and
time grows linearly with steps. Run: `.venv/bin/python benchmarks/bench_replay.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for live_support

import live_support as live

from agy_provider.sim.bulk import STEPS_PER_TURN
from agy_provider.sim.bulk import write_conversation

SIZES = (1_250, 2_500, 5_000, 10_000)
GOAL_SECONDS = 2.0
TEXT_SIZE = 600


# Peak RSS must be the replay's own. Linux carries a process's peak RSS (`ru_maxrss`) across
# exec, and a child that subprocess starts (vfork, or fork) begins in its parent's address space,
# so a child of this script — which has just written 10,000-row databases — reported at least this
# script's own peak (every size showed the same 25 MiB). So every measured command is started by
# a small launcher interpreter (-I -S, os and json only, ~8 MiB) that does nothing else: a child's
# `ru_maxrss` from `os.wait4` is then the larger of its own peak and the launcher's small one.
LAUNCHER = r"""
import json, os, resource, sys, time
for line in sys.stdin:
    job = json.loads(line)
    start = time.perf_counter()
    pid = os.posix_spawn(job["argv"][0], job["argv"], os.environ, file_actions=[
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
    ])
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    print(json.dumps([wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, code]), flush=True)
# Its own peak as its address space saw it (VmHWM): its ru_maxrss would include this script's.
hwm = [l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:")]
print(json.dumps(int(hwm[0]) if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss), flush=True)
"""


def direct_peak_rss(argv: list[str]) -> int:
    """Peak RSS (KiB) of a child started directly by this script: the figure the launcher avoids."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, cwd=os.path.dirname(argv[0]))
    _pid, _status, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    return usage.ru_maxrss


class Launcher:
    """The small process that starts each measured child (see LAUNCHER)."""

    def __init__(self, tmp: str) -> None:
        self.stderr = os.path.join(tmp, "child.stderr")
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", LAUNCHER],
            # An empty folder: `python -m` puts its cwd first on sys.path, and a checkout there
            # would shadow the code on PYTHONPATH (how the README measures an older commit).
            cwd=tmp,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, argv: list[str]) -> tuple[float, float, int]:
        """(wall seconds, child CPU seconds, child peak RSS in KiB) of one fresh child process."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"argv": argv, "stderr": self.stderr}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("the launcher process died")
        wall, cpu, rss, code = json.loads(line)
        if code != 0:
            with open(self.stderr, encoding="utf-8", errors="replace") as err:
                raise SystemExit(f"{argv} failed ({code}): {err.read()}")
        return wall, cpu, rss

    def close(self) -> int:
        """Stop the launcher; returns its own peak RSS in KiB (the floor under every figure)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        own = int(json.loads(self.proc.stdout.readline()))
        self.proc.wait(timeout=10)
        return own


def in_process(dbs: dict[int, Path], rounds: int) -> dict[int, float]:
    """Best CPU seconds of `agy_provider.cli.main(["replay", db, "--turn", "all"])` in this process.

    No interpreter start-up or imports in the figure, so the linearity of the replay itself shows
    through the noise of a busy machine. Rounds interleave the sizes.
    """
    import gc

    from agy_provider.cli import main as cli_main

    best: dict[int, float] = {}
    with open(os.devnull, "w") as devnull:
        for _ in range(rounds):
            for steps, db in dbs.items():
                gc.collect()
                start = time.process_time()
                cli_main(["replay", str(db), "--turn", "all"], out=devnull, err=devnull)
                spent = time.process_time() - start
                best[steps] = min(best.get(steps, spent), spent)
    return best


def replay_argv(db: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "agy_provider.cli", "replay", str(db), "--turn", "all", *extra]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="runs per measurement (best of)")
    args = parser.parse_args()
    live.run_header(
        f"bench_replay: `agy-provider replay DB --turn all` (events to /dev/null), best of {args.runs}"
    )
    print(
        f"  rows: write_conversation(turns=N, text_size={TEXT_SIZE}), {STEPS_PER_TURN} steps/turn"
    )

    with tempfile.TemporaryDirectory(prefix="agy-bench-replay-") as tmp:
        dbs: dict[int, Path] = {}
        for steps in SIZES:
            db = Path(tmp) / f"conv-{steps}.db"
            start = time.perf_counter()
            writer = write_conversation(
                db, f"bench-{steps}", turns=steps // STEPS_PER_TURN, text_size=TEXT_SIZE
            )
            actual = writer.step_count
            writer.close(checkpoint=True)
            dbs[actual] = db
            print(
                f"  wrote {actual:>6} steps: {db.stat().st_size / 1e6:6.2f} MB "
                f"({time.perf_counter() - start:.1f} s to write)"
            )

        # Every command once per round, rounds repeated: each size sees the same spread of load
        # from whatever else runs on the machine, and the best of the rounds is kept.
        commands: dict[str, list[str]] = {
            # A bare interpreter: the floor of every peak RSS below.
            "bare": [sys.executable, "-c", "pass"],
            # The fixed cost every run pays: interpreter start and our imports, no replay at all.
            "baseline": [sys.executable, "-c", "import agy_provider.cli"],
            **{str(steps): replay_argv(db) for steps, db in dbs.items()},
            "steps": replay_argv(dbs[max(dbs)], "--format", "steps"),
            "transcript": replay_argv(dbs[max(dbs)], "--format", "transcript"),
        }
        runs: dict[str, list[tuple[float, float, int]]] = {name: [] for name in commands}
        launcher = Launcher(tmp)
        for _ in range(args.runs):
            for name, argv in commands.items():
                runs[name].append(launcher.run(argv))
        launcher_rss = launcher.close()

        def best(name: str) -> tuple[float, float, int]:
            results = runs[name]
            return (
                min(r[0] for r in results),
                min(r[1] for r in results),
                max(r[2] for r in results),
            )

        def walls(name: str) -> str:
            return ", ".join(f"{r[0]:.2f}" for r in runs[name])

        start_wall, start_cpu, start_rss = best("baseline")
        print(
            f"\n  {args.runs} interleaved rounds; best wall and CPU time, highest peak RSS per command"
        )
        print(
            f"  peak RSS: every command is started by a small launcher (its own peak "
            f"{launcher_rss / 1024:.1f} MiB); bare `python -c pass` {best('bare')[2] / 1024:.1f} MiB "
            f"through it, {direct_peak_rss(commands['bare']) / 1024:.1f} MiB when this script "
            f"(peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MiB) starts it directly"
        )
        print(
            f"  baseline `python -c 'import agy_provider.cli'`: {start_wall:.3f} s wall, "
            f"{start_cpu:.3f} s CPU, peak RSS {start_rss / 1024:.1f} MiB  ({walls('baseline')})"
        )
        print(
            f"\n  {'steps':>6} {'MB':>6} {'best wall s':>12} {'CPU s':>7} {'µs/step':>8} "
            f"{'peak RSS MiB':>13}  runs (wall s)"
        )
        measured: dict[int, tuple[float, float, int]] = {}
        for steps, db in dbs.items():
            wall, cpu, rss = measured[steps] = best(str(steps))
            print(
                f"  {steps:>6} {db.stat().st_size / 1e6:>6.2f} {wall:>12.3f} {cpu:>7.3f} "
                f"{wall / steps * 1e6:>8.1f} {rss / 1024:>13.1f}  {walls(str(steps))}"
            )

        small, large = min(measured), max(measured)
        expected = large / small
        inner = in_process(dbs, min(args.runs, 3))
        print(
            f"\n  in this process (cli.main, no start-up), best CPU of {min(args.runs, 3)} interleaved rounds:"
        )
        for steps, spent in inner.items():
            print(f"    {steps:>6} steps: {spent:.3f} s, {spent / steps * 1e6:6.1f} µs/step")
        t_small, t_large = measured[small][0], measured[large][0]
        net_small, net_large = t_small - start_wall, t_large - start_wall
        c_small, c_large = measured[small][1], measured[large][1]
        print(f"\n  linearity ({large} vs {small} steps, linear expectation {expected:.2f}x):")
        print(f"    end to end, wall:                        {t_large / t_small:.2f}x")
        print(f"    end to end, child CPU:                   {c_large / c_small:.2f}x")
        print(f"    wall minus interpreter+imports baseline: {net_large / net_small:.2f}x")
        print(
            f"    CPU minus interpreter+imports baseline:  {(c_large - start_cpu) / (c_small - start_cpu):.2f}x"
        )
        print(f"    in process (cli.main), CPU:              {inner[large] / inner[small]:.2f}x")
        for steps, (wall, cpu, _rss) in measured.items():
            print(
                f"    {steps:>6} steps: {(wall - start_wall) / steps * 1e6:6.1f} µs/step wall, "
                f"{(cpu - start_cpu) / steps * 1e6:6.1f} µs/step CPU beyond the baseline"
            )
        rss_small, rss_large = measured[small][2], measured[large][2]
        mb_small, mb_large = dbs[small].stat().st_size, dbs[large].stat().st_size
        print(
            f"  memory: peak RSS {rss_small / 1024:.1f} -> {rss_large / 1024:.1f} MiB "
            f"(+{(rss_large - rss_small) / 1024:.1f} MiB) while the file grew "
            f"{mb_small / 1e6:.2f} -> {mb_large / 1e6:.2f} MB (+{(mb_large - mb_small) / 1e6:.2f} MB); "
            f"RSS growth / file growth = {(rss_large - rss_small) * 1024 / (mb_large - mb_small):.2f}"
        )
        print(
            f"          over the import baseline: {(rss_small - start_rss) / 1024:.1f} MiB at {small} "
            f"steps, {(rss_large - start_rss) / 1024:.1f} MiB at {large} steps; "
            f"{(rss_large - rss_small) / (large - small):.2f} KiB per extra step"
        )
        # "Flat" here: the 8x larger conversation needs at most 25% more peak RSS than the small one.
        flat = rss_large <= 1.25 * rss_small
        print(
            f"  memory flat (peak RSS at {large} <= 1.25x at {small} steps): "
            f"{rss_large / rss_small:.2f}x -> {'PASS' if flat else 'FAIL'}"
        )

        print(f"\n  other formats, {large} steps:")
        for fmt in ("steps", "transcript"):
            wall, cpu, rss = best(fmt)
            print(
                f"    --format {fmt:<11} {wall:.3f} s wall, {cpu:.3f} s CPU, "
                f"peak RSS {rss / 1024:.1f} MiB  ({walls(fmt)})"
            )

    median_large = statistics.median(r[0] for r in runs[str(large)])
    verdict = "PASS" if t_large < GOAL_SECONDS else "FAIL"
    print(
        f"\n  goal: {large} steps replay (--turn all, events) in < {GOAL_SECONDS:.0f} s: best "
        f"{t_large:.3f} s -> {verdict} (median of the {args.runs} runs {median_large:.3f} s, "
        f"{'PASS' if median_large < GOAL_SECONDS else 'FAIL'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
