"""One agy-sim process (`Session`): its state, simulator, server link and output, and agy's
headless behaviours it keeps (cold start, stdin hang, start log, the model chosen, exit codes).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from typing import Any
from typing import NoReturn

from agy_provider.errors import UsageError
from agy_provider.sim.commands import command_data
from agy_provider.sim.control import ServerLink
from agy_provider.sim.engine import Clock
from agy_provider.sim.engine import Conversation
from agy_provider.sim.engine import SimCrash
from agy_provider.sim.engine import Simulator
from agy_provider.sim.engine import TurnResult
from agy_provider.sim.output import StreamJsonPrinter
from agy_provider.sim.output import dumps
from agy_provider.sim.output import emit_line
from agy_provider.sim.payloads import IdSource
from agy_provider.sim.plays import TurnPlays
from agy_provider.sim.scenario import CatalogModel
from agy_provider.sim.scenario import Scenario
from agy_provider.sim.scenario import TurnPlay
from agy_provider.sim.state import AppState
from agy_provider.sim.state import default_app_dir
from agy_provider.sim.versions import NEWEST
from agy_provider.sim.versions import AgyVersion

__all__ = [
    "COLD_START_ENV",
    "PERSISTENT_COLD_START_MS",
    "VERSION",
    "Session",
    "fail",
    "parse_go_duration",
    "resolve_model",
]

# `agy --version` prints the bare version: the one imitated (`AGY_SIM_VERSION`, default NEWEST).
VERSION = NEWEST
# Record mode's fixed clock start (2026-06-22T23:57:36Z) and uuid seed.
DETERMINISTIC_START = 1_782_172_656.0
DETERMINISTIC_SEED = 20260622

# How long agy takes to start before its first line (scenario milliseconds, divided by
# AGY_SIM_SPEED like every delay): a scenario file's own `cold_start_ms`, else
# `AGY_SIM_COLD_START_MS`, else 2500 for one agy for many turns (real 1.1.18 printed `init`
# 2.3–2.8 s after spawn, AGY-FORMATS §2.4), else the scenario's default.
COLD_START_ENV = "AGY_SIM_COLD_START_MS"
PERSISTENT_COLD_START_MS = 2500
_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_TOOLS = [
    "ask_question",
    "run_command",
    "view_file",
    "write_to_file",
    "replace_file_content",
    "list_dir",
]


def parse_go_duration(text: str) -> float:
    """Seconds in a Go duration such as `5m0s`, `90s`, `1m30s`, `1.5h`; raises ValueError."""
    if text in ("0", "+0", "-0"):
        return 0.0
    body = text.lstrip("+")
    position, total = 0, 0.0
    while position < len(body):
        match = _GO_DURATION.match(body, position)
        if match is None:
            raise ValueError(f'time: invalid duration "{text}"')
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if not body:
        raise ValueError(f'time: invalid duration "{text}"')
    return total


def fail(message: str, code: int = 1) -> NoReturn:
    sys.stderr.write(f"Error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(code)


# How long after a turn's `result` its words on stderr come (ms, ÷ AGY_SIM_SPEED; default 0).
STDERR_LAG_ENV = "AGY_SIM_STDERR_LAG_MS"
# How long a resumed conversation loads before its turn (ms, ÷ AGY_SIM_SPEED; default 0).
LOAD_ENV = "AGY_SIM_LOAD_MS"


def start_log(what: str, at: float) -> None:
    """`AGY_SIM_START_LOG`: one line `<pid> <start|init> <monotonic seconds>` appended per
    event, so a test sees how many agys were starting at once (sim/CONTRACT.md)."""
    path = os.environ.get("AGY_SIM_START_LOG")
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{os.getpid()} {what} {at:.6f}\n".encode())
    finally:
        os.close(fd)
# A start that never ends (a sign-in prompt, a hung install): `all` (or `1`), `persistent` (one
# agy for many turns only) or `print` (`-p` only). After its cold start agy says on stderr what it
# waits for and waits forever, printing nothing more on stdout; a signal ends it.
HANG_AT_START_ENV = "AGY_SIM_HANG_AT_START"
HANG_AT_START_WORDS = (
    "Sign in to continue: open https://accounts.google.com/o/oauth2/auth in a browser "
    "(agy-sim: AGY_SIM_HANG_AT_START)"
)


def _float_env(name: str, default: float, floor: float) -> float:
    """The number in environment variable `name`, at least `floor`; `default` when unset or
    not a number."""
    try:
        return max(float(os.environ.get(name, "") or default), floor)
    except ValueError:
        return default


def _speed() -> float:
    return _float_env("AGY_SIM_SPEED", 1.0, 1e-3)


def _cold_start_ms(scenario: Scenario, persistent: bool) -> tuple[int, str]:
    """The cold start in scenario milliseconds, and where the number came from."""
    if scenario.cold_start_stated:
        return scenario.cold_start_ms, f"scenario {scenario.name!r}"
    raw = os.environ.get(COLD_START_ENV, "").strip()
    if raw:
        if not raw.isdigit():
            raise UsageError(
                f"{COLD_START_ENV} must be a whole number of milliseconds, not {raw!r}"
            )
        return int(raw), COLD_START_ENV
    if persistent:
        return PERSISTENT_COLD_START_MS, "the default for --input-format stream-json"
    return scenario.cold_start_ms, f"scenario {scenario.name!r}"


def resolve_model(scenario: Scenario, slug: str | None, effort: str | None) -> CatalogModel:
    """`--model`/`--effort` → one catalog entry, with agy's refusals."""
    slug = slug or scenario.model
    base = slug.split("-")[0]
    if effort and (base == "claude" or slug.startswith("gpt-oss")):
        fail(f'--effort is not supported for model "{slug}": it has no effort levels')
    if effort:
        tiered = re.sub(r"-(high|medium|low)$", "", slug)
        # 1.2.x's `max` runs the family's top tier (the catalog lists no -max slugs).
        found = scenario.find_model(f"{tiered}-{'high' if effort == 'max' else effort}")
        if found is None:
            fail(f'model "{slug}" does not support effort "{effort}"')
        return found
    found = scenario.find_model(slug)
    if found is None:
        # A tier family's base name picks its medium (or first) tier, as agy's picker does.
        family = [m for m in scenario.catalog if m.slug.startswith(slug + "-")]
        medium = [m for m in family if m.slug.endswith("-medium")]
        if not family:
            fail(f'model "{slug}" is not available. Run "agy models" to list available models')
        return (medium or family)[0]
    return found


class Session:
    """One agy-sim process: state, simulator, server link, output.

    Every stdout write holds `out`; while `muted`, lines from a turn still running are dropped
    (a persistent agy that was signalled prints its `result` and nothing after it).
    """

    def __init__(self, args: argparse.Namespace, scenario: Scenario, version: AgyVersion) -> None:
        self.args = args
        self.scenario = scenario
        self.version = version
        self.speed = _speed()
        self.state = AppState(default_app_dir(args.gemini_dir), args.log_file)
        deterministic = args.deterministic or os.environ.get("AGY_SIM_DETERMINISTIC") == "1"
        clock = Clock(self.speed, DETERMINISTIC_START if deterministic else None)
        ids = IdSource(DETERMINISTIC_SEED if deterministic else None)
        self.sim = Simulator(
            scenario,
            self.state.conversations,
            clock=clock,
            ids=ids,
            skip_permissions=args.dangerously_skip_permissions,
            version=version,
            mcp_roots=args.add_dir,
        )
        self.link = ServerLink(
            self.sim,
            self.state,
            csrf_token=args.csrf_token,
            log_file=args.log_file,
            run_message=self.run_message,
        )
        self.sim.on_commit = self.link.changed
        self.sim.on_conversation = self._opened
        self.stream = args.output_format == "stream-json"
        # agy drops a `-p` prompt given beside `--input-format stream-json` (§2.4).
        self.persistent = args.input_format == "stream-json"
        self.cold_start_ms, self.cold_start_source = _cold_start_ms(scenario, self.persistent)
        self.plays = TurnPlays(scenario)
        self.turns_started = 0
        self.out = threading.RLock()
        self.muted = False
        self._planned: str | None = None
        self._fresh = True
        self.init_sent = False

    def _opened(self, conversation: Conversation) -> None:
        if not self._fresh:
            # `AGY_SIM_LOAD_MS`: agy loading a resumed conversation; its server does not know it
            # meanwhile (`trajectory not found`), and the turn starts after.
            load = _float_env(LOAD_ENV, 0.0, 0.0) / 1000 / self.speed
            if load > 0:
                self.state.log(f"agy-sim loading conversation {conversation.id}: {load:.3f} s")
                time.sleep(load)
        self.link.conversation(conversation)

    def emit(self, event: dict[str, Any]) -> None:
        with self.out:
            if not self.muted:
                emit_line(sys.stdout, event)

    def play_for(self, prompt: str) -> TurnPlay | None:
        """Count a turn of this process and say what it plays (`sim/plays.py`)."""
        self.turns_started += 1
        try:
            return self.plays.for_turn(self.turns_started, prompt)
        except UsageError as exc:
            sys.stderr.write(f"warning: agy-sim: {exc}; this turn plays the process's scenario\n")
            sys.stderr.flush()
            return None

    def planned_id(self) -> str:
        """The conversation this run holds: the one resumed, else a new id.

        An id with no database is refused before 1.2; 1.2+ starts a new conversation instead,
        saying only `warning: conversation "<id>" not found` on stderr (AGY-FORMATS §2.3).
        """
        if self._planned is not None:
            return self._planned
        cid = self.args.conversation
        if cid is None and self.args.continue_:
            cid = self.state.last_conversation(os.getcwd())
        if cid is not None and not self.state.db_path(cid).exists():
            if not self.version.forks_unknown_conversation:
                fail(f"conversation {cid} not found")
            sys.stderr.write(f'warning: conversation "{cid}" not found\n')
            sys.stderr.flush()
            cid = None
        self._fresh = cid is None
        self._planned = cid or self.sim.ids.uuid()
        return self._planned

    def cold_start(self, since: float) -> None:
        """Sleep what is left of the cold start begun at `since` (monotonic); the log says how
        long it is and where that came from."""
        self.state.log(
            f"agy-sim cold start: {self.cold_start_ms} ms ({self.cold_start_source}), "
            f"AGY_SIM_SPEED {self.speed:g}"
        )
        start_log("start", since)
        remaining = since + self.cold_start_ms / 1000 / self.speed - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)
        hang = os.environ.get(HANG_AT_START_ENV, "").strip()
        if hang in ("1", "all", "persistent" if self.persistent else "print"):
            sys.stderr.write(HANG_AT_START_WORDS + "\n")
            sys.stderr.flush()
            while True:  # until a signal ends the process
                time.sleep(3600)

    def conversation(self) -> Conversation:
        """`-p`: the cold start, then the conversation (1.3.x printed `init` before it)."""
        self.cold_start(time.monotonic())
        return self.open_conversation()

    def open_conversation(self) -> Conversation:
        conversation = self.sim.open(self.planned_id())
        if self._fresh:
            self.state.log(f"Created conversation {conversation.id}")
        return conversation

    def command(self, name: str, model: CatalogModel) -> int:
        """A slash command agy answers itself (`-p /usage`): no model call, no conversation
        written; `command_result` then a zero-token `result` with `num_turns: 0`."""
        cid = self.planned_id()
        data = command_data(name, self.scenario, model.slug, time.time())
        result = TurnResult(cid, num_turns=0, version=self.version)
        command = {"name": name, "data": data}
        fmt = self.args.output_format
        if fmt == "stream-json":
            if not self.init_sent:
                self.init_event(cid, model)
            self.emit({"event": "command_result", "command": command})
            self.emit({"event": "result", "result": result.to_json()})
        elif fmt == "json":
            sys.stdout.write(dumps({**result.to_json(), "command": command}) + "\n")
        else:
            sys.stdout.write(json.dumps(data, indent=2) + "\n")
        sys.stdout.flush()
        return 0

    def run_turn(
        self,
        conversation: Conversation,
        prompt: str,
        model: CatalogModel,
        play: TurnPlay | None = None,
    ) -> TurnResult:
        args = self.args
        timeout = parse_go_duration(args.print_timeout)
        deadline = time.monotonic() + timeout if timeout > 0 else None
        printer = (
            StreamJsonPrinter(conversation.id, self.emit, version=self.version)
            if self.stream
            else None
        )
        if printer is not None:
            self.sim.listeners.append(printer)
        self.link.status(conversation.id, True)
        try:
            return self.sim.run_turn(
                conversation, prompt, model=model, deadline=deadline, play=play
            )
        finally:
            self.link.status(conversation.id, False)
            if printer is not None:
                self.sim.listeners.remove(printer)
            self.state.remember(os.getcwd(), conversation.id)

    def run_message(self, conversation_id: str, text: str, model: str) -> None:
        """A turn asked for over RPC (`SendUserCascadeMessage`)."""
        chosen = self.scenario.find_model(model) or resolve_model(self.scenario, None, None)
        try:
            self.sim.run_turn(self.sim.open(conversation_id), text, model=chosen)
        except SimCrash as crash:
            self.crash(crash)
        finally:
            self.link.status(conversation_id, False)

    def init_event(self, conversation_id: str, model: CatalogModel) -> None:
        """The first line: the conversation id, and (1.1.18+) the model by display name when
        `--model` chose one (1.3.2+: always)."""
        if self.args.dangerously_skip_permissions:
            mode = self.version.skip_permission_mode
        elif self.sim.strict:
            mode = "strict"
        else:
            mode = self.args.mode or "request-review"
        init: dict[str, Any] = {}
        if (self.args.model and self.version.new_stream_shapes) or (
            self.version.init_always_has_model
        ):
            init["model"] = model.name
        init.update(cwd=os.getcwd(), tools=_TOOLS, permission_mode=mode)
        start_log("init", time.monotonic())  # before it is out: no host saw it earlier
        self.emit({"event": "init", "conversation_id": conversation_id, "init": init})
        self.init_sent = True

    def report(self, result: TurnResult) -> None:
        fmt = self.args.output_format
        with self.out:
            if fmt == "stream-json":
                self.emit({"event": "result", "result": self._result_json(result)})
            elif fmt == "json":
                sys.stdout.write(dumps(self._result_json(result)) + "\n")
            elif result.response:
                sys.stdout.write(result.response + "\n")
            sys.stdout.flush()
        words = result.stderr or (
            f"Error: {result.error}" if result.status == "ERROR" and result.exit_code else ""
        )
        if words:
            # Two pipes: a reader may see the `result` well before the words that follow it.
            lag = _float_env(STDERR_LAG_ENV, 0.0, 0.0) / 1000 / self.speed
            if lag > 0:
                time.sleep(lag)
            sys.stderr.write(words + "\n")
        sys.stderr.flush()

    def _result_json(self, result: TurnResult) -> dict[str, Any]:
        """The `result` object; with `--json-schema`, its `structured_output`: the answer as
        JSON (the scenario's text; as a string when it is not JSON)."""
        body = result.to_json()
        if self.args.json_schema is not None and result.status == "SUCCESS":
            try:
                body["structured_output"] = json.loads(result.response)
            except ValueError:
                body["structured_output"] = result.response
        return body

    def crash(self, crash: SimCrash) -> NoReturn:
        """Die as agy does: its last words on stderr, the language server with it, no cleanup."""
        with self.out:
            sys.stdout.flush()
            sys.stderr.write(crash.message + "\n")
            sys.stderr.flush()
            self.link.close()
            os._exit(crash.exit_code)

    def close(self) -> None:
        self.link.close()
        for conversation in self.sim.conversations.values():
            conversation.writer.close()
