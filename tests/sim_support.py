"""Shared helpers for the agy-sim tests: running the simulator, and the real reference schema."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference"
REAL_FDS = REFERENCE / "schema" / "antigravity_schema.fds"
AGY_PROVIDER = os.path.join(os.path.dirname(sys.executable), "agy-provider")
# Generous: a busy 2-core machine can take seconds to start Python, agy-sim and its server.
STARTUP = 90.0


def sim_env(
    app_dir: Path, scenario: str = "default", speed: float = 10, **extra: str
) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ANTIGRAVITY_APP_DATA_DIR=str(app_dir),
        AGY_SIM_NO_SERVER="1",
        AGY_SIM_SCENARIO=scenario,
        AGY_SIM_SPEED=str(speed),
    )
    env.update(extra)
    return env


def sim_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "agy_provider.sim.cli", *args]


def run_sim(
    app_dir: Path,
    *args: str,
    scenario: str = "default",
    speed: float = 10,
    timeout: float = 120,  # only bounds a hang: a busy machine may be many times slower
    cwd: Path | None = None,
    **extra: str,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        sim_argv(*args),
        env=sim_env(app_dir, scenario, speed, **extra),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or app_dir.parent,
    )


def databases(app_dir: Path) -> list[Path]:
    return sorted((app_dir / "conversations").glob("*.db"))


def rows(db: Path) -> list[tuple[int, int, int, bytes | None, bytes | None]]:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return conn.execute(
            "SELECT idx, step_type, status, error_details, step_payload FROM steps ORDER BY idx"
        ).fetchall()


_REAL: Any = None


def real_pool() -> Any:
    """The real schema as a DescriptorPool (well-known types first, then every file in order)."""
    global _REAL
    if _REAL is None:
        from agy_provider.sim.descriptors import load_descriptor_set

        _REAL = load_descriptor_set(REAL_FDS)
    return _REAL


def real_class(full_name: str) -> Any:
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(real_pool().FindMessageTypeByName(full_name))


def schema_problems(message: Any, path: str = "") -> list[str]:
    """Unknown fields and undeclared enum values anywhere in `message`, Any payloads included."""
    from google.protobuf import unknown_fields
    from google.protobuf.descriptor import FieldDescriptor

    problems = []
    if len(unknown_fields.UnknownFieldSet(message)):
        problems.append(f"{path or message.DESCRIPTOR.full_name}: unknown fields")
    if message.DESCRIPTOR.full_name == "google.protobuf.Any" and message.type_url:
        inner = real_class(message.type_url.split("/", 1)[1])()
        inner.ParseFromString(message.value)
        problems += schema_problems(inner, f"{path}<Any>")
    for field, value in message.ListFields():
        where = f"{path}.{field.name}"
        values = value if field.is_repeated else [value]
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            values = (
                [value[k] for k in value]
                if field.message_type.fields_by_name["value"].message_type
                else []
            )
            for v in values:
                problems += schema_problems(v, where)
            continue
        for v in values:
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                problems += schema_problems(v, where)
            elif (
                field.type == FieldDescriptor.TYPE_ENUM
                and v not in field.enum_type.values_by_number
            ):
                problems.append(f"{where}: enum value {v} not in {field.enum_type.full_name}")
    return problems


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a new user: HOME is `home`, nothing points at any agy state."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGY_", "ANTIGRAVITY_", "XDG_")) and k != "PYTEST_CURRENT_TEST"
    }
    env.update(HOME=str(home), AGY_SIM_SPEED="4", PATH="/usr/bin:/bin")
    env.update(extra)
    return env


def run_cli(
    home: Path, *args: str, timeout: float = STARTUP, **extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGY_PROVIDER, *args],
        env=cli_env(home, **extra),
        cwd=home,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


STREAM_IO = ("--input-format", "stream-json", "--output-format", "stream-json")


def user_line(content: Any) -> bytes:
    """One stream-json input turn (AGY-FORMATS §2.4): `content` is a string or a block list."""
    return (json.dumps({"event": "user", "message": {"content": content}}) + "\n").encode()


class PersistentSim:
    """One agy-sim run as one agy for many turns (`--input-format stream-json`, no `-p`), driven
    over real pipes. stdout and stderr are read by threads, so a silent sim fails a wait after
    `timeout` instead of stalling the test; `AGY_SIM_COLD_START_MS` defaults to 0 here."""

    def __init__(
        self,
        app_dir: Path,
        *args: str,
        scenario: str = "default",
        speed: float = 10,
        timeout: float = STARTUP,
        **extra: str,
    ) -> None:
        extra.setdefault("AGY_SIM_COLD_START_MS", "0")
        self.timeout = timeout
        self.proc = subprocess.Popen(
            sim_argv(*STREAM_IO, *args),
            env=sim_env(app_dir, scenario, speed, **extra),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=app_dir.parent,
        )
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._stderr: list[bytes] = []
        self._readers = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self._lines.put)),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self._stderr.append)),
        ]
        for reader in self._readers:
            reader.daemon = True
            reader.start()

    @staticmethod
    def _pump(stream: Any, put: Any) -> None:
        for line in iter(stream.readline, b""):
            put(line)
        put(b"")  # end of stream

    def next_line(self) -> str:
        """The next stdout line; "" once stdout has ended."""
        try:
            line = self._lines.get(timeout=self.timeout)
        except queue.Empty:
            raise AssertionError(f"agy-sim printed nothing for {self.timeout} s") from None
        if line == b"":
            self._lines.put(b"")  # stays ended
        return line.decode()

    def next_event(self) -> dict[str, Any]:
        line = self.next_line()
        assert line, f"stdout ended; stderr: {self.stderr()}"
        event: dict[str, Any] = json.loads(line)
        return event

    def send(self, raw: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(raw)
        self.proc.stdin.flush()

    def turn(self, content: Any) -> list[dict[str, Any]]:
        """Send one user turn and read every event up to its `result` (included)."""
        self.send(user_line(content))
        return self.until_result()

    def until_result(self) -> list[dict[str, Any]]:
        events = [self.next_event()]
        while events[-1]["event"] != "result":
            events.append(self.next_event())
        return events

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def wait(self) -> int:
        """The exit code, once stdout and stderr have ended too."""
        code = self.proc.wait(timeout=self.timeout)
        for reader in self._readers:
            reader.join(timeout=self.timeout)
        return code

    def rest(self) -> list[str]:
        """Every stdout line left (after `wait`)."""
        lines = []
        while line := self.next_line():
            lines.append(line)
        return lines

    def stderr(self) -> str:
        return b"".join(self._stderr).decode()

    def __enter__(self) -> PersistentSim:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
