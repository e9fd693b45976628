"""`agy-sim record`: regenerates `fixtures/` from the simulator, reproducibly.

Owns the fixture set: conversation databases, RPC step captures (poll and stream shape) and
stream-json captures, plus the README that says what each one is.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from agy_provider.sim import descriptors as pb
from agy_provider.sim.engine import Clock
from agy_provider.sim.engine import Simulator
from agy_provider.sim.output import StreamJsonPrinter
from agy_provider.sim.payloads import IdSource
from agy_provider.sim.scenario import load_scenario
from agy_provider.sim.step_reader import stream_shape

__all__ = ["FIXTURES", "record", "record_main"]

START = 1_782_172_656.0  # 2026-06-22T23:57:36Z: every recorded timestamp counts from here
SEED = 20260622
CWD = "/home/user/project"
# The fast-forward factor for recording: scenario delays shrink to milliseconds.
SPEED = 200.0


@dataclass(frozen=True)
class Fixture:
    name: str
    scenario: str
    prompts: tuple[str, ...]
    answer: dict[str, Any] | None
    description: str


_FOCUS_ANSWER = {"question": "What would you like to focus on?", "selectedOptionIds": ["2"]}

FIXTURES: tuple[Fixture, ...] = (
    Fixture("simple-thinking", "default", ("hi",), None,
            "one turn: user input, history, a planner answer with thinking in chunks, checkpoint"),
    Fixture("two-turn", "two-turn", ("count", "again"), None,
            "two turns: history (98) rows on both, one checkpoint (23) after the first, a system message (101)"),
    Fixture("tool-run", "tools", ("look around",), None,
            "run_command and view_file as GENERIC (132) steps with the legacy step at 140.2.6 (exit code, output)"),
    Fixture("permission-allowed", "permission", ("pwd",), {"permission": {"allow": True}},
            "a command WAITING (9) for permission, allowed over the control channel, then DONE"),
    Fixture("permission-denied", "permission", ("pwd",), {"permission": {"allow": False}},
            "the same command denied: ERROR (7) with 'user denied permission', then the follow-up answer"),
    Fixture("question", "question", ("help me",), {"askQuestion": {"responses": [_FOCUS_ANSWER]}},
            "an ask_question (138) step WAITING with options 1..3, answered with option 2"),
    Fixture("quota-error", "quota-error", ("hi",), None,
            "the model call fails: planner ERROR (7), then ERROR_MESSAGE (17) with 429 RESOURCE_EXHAUSTED at 24.3"),
    Fixture("corrupt-row", "corrupt-row", ("hi",), None,
            "row 2's step_payload is truncated garbage that does not parse; row 3 is healthy"),
)  # fmt: skip


def _answer(sim: Simulator, cid: str, index: int, answer: dict[str, Any]) -> None:
    for _ in range(2000):
        if sim.answer(cid, index, answer)[0]:
            return
        time.sleep(0.001)


def _render(step: Any) -> dict[str, Any]:
    rendered: dict[str, Any] = json_format.MessageToDict(step, descriptor_pool=pb.POOL)
    generic = rendered.get("generic")
    if isinstance(generic, dict) and isinstance(generic.get("args"), dict):
        generic["args"] = dict(sorted(generic["args"].items()))  # map order is not stable
    return rendered


def _dump(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _record_one(fixture: Fixture, out: Path, work: Path, seed: int) -> dict[str, Any]:
    clock = Clock(SPEED, START)
    sim = Simulator(load_scenario(fixture.scenario), work, clock=clock, ids=IdSource(seed))
    conversation = sim.open()
    snapshots: dict[int, Any] = {}
    waiting: dict[int, dict[str, Any]] = {}
    lines: list[dict[str, Any]] = []

    def keep(cid: str, index: int, step: Any) -> None:
        if cid != conversation.id:
            return
        snapshots[index] = _render(step)
        if step.status == pb.STEP_STATUS["CORTEX_STEP_STATUS_WAITING"]:
            waiting[index] = snapshots[index]
            if fixture.answer is not None:
                # Answer from another thread, as the language server would, once the step waits.
                threading.Thread(target=_answer, args=(sim, cid, index, fixture.answer)).start()

    sim.listeners.append(keep)
    for prompt in fixture.prompts:
        lines.append({"event": "init", "conversation_id": conversation.id,
                      "init": {"cwd": CWD, "tools": ["ask_question", "run_command", "view_file"],
                               "permission_mode": "request-review"}})  # fmt: skip
        printer = StreamJsonPrinter(conversation.id, lines.append, now=clock.now)
        sim.listeners.append(printer)
        started = clock.now()
        result = sim.run_turn(conversation, prompt)
        result.duration_seconds = clock.now() - started
        sim.listeners.remove(printer)
        lines.append({"event": "result", "result": result.to_json()})
    conversation.writer.close(checkpoint=True)
    for child in list(sim.conversations.values()):
        child.writer.close()
    steps = [snapshots[i] for i in sorted(snapshots)]
    shutil.copyfile(conversation.writer.path, out / "db" / f"{fixture.name}.db")
    _dump(out / "rpc" / f"{fixture.name}.poll.json", {"steps": steps})
    _dump(out / "rpc" / f"{fixture.name}.stream.json", {"steps": [stream_shape(s) for s in steps]})
    if waiting:
        _dump(
            out / "rpc" / f"{fixture.name}.waiting.poll.json",
            {"steps": [waiting[i] for i in sorted(waiting)]},
        )
    ndjson = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    (out / "stream-json" / f"{fixture.name}.ndjson").write_text(ndjson, encoding="utf-8")
    return {"conversation_id": conversation.id, "steps": len(steps), "waiting": bool(waiting)}


_README_HEAD = """# Fixtures (made by agy-sim)

Regenerate with `agy-sim record --out fixtures/` (reproducible: fixed clock starting
2026-06-22T23:57:36Z and seeded uuids). Nothing here is real agy output; the real captures live in
`../shared/reference/` and the conformance tests hold the simulator against them.

- `db/<name>.db` — a conversation database with agy's 7-table schema, checkpointed (WAL mode in the
  header, no `-wal`/`-shm`). `trajectory_meta.cascade_id` is the conversation id below.
- `rpc/<name>.poll.json` — `{"steps": [...]}`: every step's last state as `GetCascadeTrajectorySteps`
  renders it (protobuf JSON, camelCase, enums by name, int64 as strings), with `metadata.toolCall`
  and `plannerResponse.toolCalls`.
- `rpc/<name>.stream.json` — the same steps in the `StreamAgentStateUpdates` shape (those two dropped).
- `rpc/<name>.waiting.poll.json` — steps captured while WAITING (permission or question requests).
- `stream-json/<name>.ndjson` — what `agy -p --output-format stream-json` printed for the turn(s):
  `init`, `step_update` lines and one `result` per turn.

| name | conversation id | steps | what it shows |
|---|---|---|---|
"""


def record(out: Path) -> list[str]:
    """Write every fixture under `out`; returns the names written."""
    for sub in ("db", "rpc", "stream-json"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    table = []
    with tempfile.TemporaryDirectory(prefix="agy-sim-record-") as tmp:
        for number, fixture in enumerate(FIXTURES):
            work = Path(tmp) / str(number)
            work.mkdir()
            info = _record_one(fixture, out, work, SEED + number)
            table.append(
                f"| `{fixture.name}` | `{info['conversation_id']}` | {info['steps']} | {fixture.description} |"
            )
    (out / "README.md").write_text(_README_HEAD + "\n".join(table) + "\n", encoding="utf-8")
    return [f.name for f in FIXTURES]


def record_main(argv: Sequence[str]) -> int:
    """`agy-sim record [--out DIR]`."""
    parser = argparse.ArgumentParser(prog="agy-sim record", description="regenerate fixtures/")
    parser.add_argument("--out", default="fixtures", help="output folder (default: fixtures)")
    args = parser.parse_args(list(argv))
    names = record(Path(args.out))
    print(f"recorded {len(names)} fixtures into {args.out}")
    return 0
