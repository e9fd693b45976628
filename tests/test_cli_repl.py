"""The interactive chat (`agy-provider chat` with no prompt, `cli/repl.py`) driven as a person
drives it: a real pseudo-terminal, keys sent as bytes, agy-sim as agy.

Expectations come from the scenario files, never from an earlier run. HOME is a temporary folder
in every test; the REPL's processes are followed through psutil by its pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import pty
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from live_helpers import scenario_answer
from sim_support import cli_env

from agy_provider.sim.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
# Generous: a busy 2-core machine can take seconds to start Python, agy-sim and its server.
TIMEOUT = 180.0
PROMPT = b"agy> "


def _env(home: Path, **extra: str) -> dict[str, str]:
    # The warm pool's agy-sim starts in 2.5 s by default: not the point here.
    return cli_env(home, TERM="xterm", AGY_SIM_COLD_START_MS="100", **extra)


class Terminal:
    """`agy-provider chat` on a pseudo-terminal: `send` keys, `expect` what the screen gets."""

    def __init__(
        self,
        home: Path,
        *args: str,
        python_args: tuple[str, ...] = ("-m", "agy_provider.cli"),
        **extra: str,
    ) -> None:
        argv = [sys.executable, *python_args, "chat", "--agy-bin", "agy-sim", *args]
        pid, fd = pty.fork()
        if pid == 0:  # the child: exec at once
            os.chdir(home)
            os.execve(sys.executable, argv, _env(home, **extra))
        self.pid, self.fd = pid, fd
        self.process = psutil.Process(pid)
        self.screen = b""
        self._seen = 0  # `expect` looks only past what it matched last

    def expect(self, text: bytes, within: float = TIMEOUT) -> bytes:
        """Read until `text` arrives after the last match (at most `within` seconds); what came
        up to its end."""
        deadline = time.monotonic() + within
        while (found := self.screen.find(text, self._seen)) < 0:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.fd], [], [], max(0.0, left))
            if not ready:
                raise AssertionError(f"{text!r} never came; the screen:\n{self.text()}")
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:  # the other end closed
                chunk = b""
            if not chunk:
                raise AssertionError(f"{text!r} never came before the end:\n{self.text()}")
            self.screen += chunk
        start, self._seen = self._seen, found + len(text)
        return self.screen[start : self._seen]

    def send(self, keys: bytes) -> None:
        os.write(self.fd, keys)

    def turn(self, line: str) -> bytes:
        """Type `line`, Enter; what the turn showed up to the next prompt."""
        self.send(line.encode() + b"\r")
        return self.expect(PROMPT)

    def second_ctrl_c_leaves(self) -> int:
        """After a Ctrl-C at the prompt: the REPL says how to leave, a second Ctrl-C in a row
        does; its exit status."""
        self.expect(b"Ctrl-C again or Ctrl-D to leave")
        self.expect(PROMPT)
        self.send(b"\x03")
        return self.exit_code()

    def agys(self) -> list[psutil.Process]:
        """The agy-sim processes under the REPL now."""
        found = []
        for child in self.process.children(recursive=True):
            try:
                if any("agy-sim" in part for part in child.cmdline()):
                    found.append(child)
            except psutil.Error:
                continue
        return found

    def exit_code(self) -> int:
        """Read to the end, then the REPL's exit status."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], deadline - time.monotonic())
            try:
                chunk = os.read(self.fd, 4096) if ready else b""
            except OSError:
                chunk = b""
            if not chunk:
                break
            self.screen += chunk
        try:
            code = self.process.wait(TIMEOUT)
        except psutil.TimeoutExpired:
            raise AssertionError(f"the REPL never ended; the screen:\n{self.text()}") from None
        os.close(self.fd)
        assert code is not None
        return code

    def text(self) -> str:
        return self.screen.decode("utf-8", "replace")

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _conversations(home: Path) -> list[dict[str, object]]:
    state = home / ".local" / "state" / "agy-provider" / "sim-state" / "conversations"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agy_provider.cli",
            "conversations",
            "--folder",
            str(state),
            "--json",
        ],
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    return [json.loads(line) for line in done.stdout.splitlines()]


def _gone(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Which of `procs` are still alive after they had time to end (waited on, not slept)."""
    _, alive = psutil.wait_procs(procs, timeout=30)
    return alive


@pytest.mark.slow
def test_turns_continue_one_conversation_then_model_new_history_and_ctrl_d(tmp_path: Path) -> None:
    answer = scenario_answer("default").encode()
    term = Terminal(tmp_path)
    try:
        term.expect(b"/help lists commands")
        term.expect(PROMPT)
        assert answer in term.turn("hello there")
        second = term.turn("and again")
        assert answer in second and b"[gemini-3.8-flash-medium" in second
        shown = term.turn("/help")
        assert all(c in shown for c in (b"/model [NAME]", b"/new", b"/exit", b"Ctrl-D"))
        assert b"the next turns use gemini-3.7-flash-low" in term.turn(
            "/model gemini-3.7-flash-low"
        )
        assert b"not a model id agy accepts" in term.turn("/model --oops")  # refused, kept
        third = term.turn("third")
        assert answer in third and b"[gemini-3.7-flash-low" in third  # the model switched
        assert b"starts a new conversation" in term.turn("/new")
        assert answer in term.turn("a new one")
        # Up walks the history: the last line comes back on the prompt, ready to edit.
        term.send(b"\x1b[A")
        term.expect(b"a new one")
        term.send(b"\x15")  # Ctrl-U: the line is empty again
        children = term.process.children(recursive=True)
        term.send(b"\x04")  # Ctrl-D
        assert term.exit_code() == 0, term.text()
    finally:
        term.kill()
    assert _gone(children) == []  # nothing the REPL started outlives it
    turns = sorted(int(c["turns"]) for c in _conversations(tmp_path))  # type: ignore[call-overload]
    assert turns == [1, 3]  # three turns of one conversation, then /new's
    history = tmp_path / ".local" / "state" / "agy-provider" / "chat_history"
    assert history.read_text().splitlines()[-3:] == ["third", "/new", "a new one"]
    assert history.stat().st_mode & 0o777 == 0o600


@pytest.mark.slow
def test_ctrl_c_aborts_a_slow_turn_and_keeps_the_repl(tmp_path: Path) -> None:
    # slow.json with minutes between chunks: the abort, not the answer, must end the turn.
    scenario = json.loads((ROOT / "agy_provider/sim/scenarios/slow.json").read_text())
    scenario["turns"][0]["steps"][0]["chunk_ms"] = 60_000
    (tmp_path / "slower.json").write_text(json.dumps(scenario))
    step = load_scenario("slow").turns[0].steps[0]
    thinking, late = step.thinking[0].encode(), step.text[-2].encode()  # type: ignore[union-attr]
    term = Terminal(tmp_path, AGY_SIM_SCENARIO="slower.json", AGY_SIM_SPEED="1")
    try:
        term.expect(PROMPT)
        term.send(b"take your time\r")
        term.expect(thinking)
        running = term.agys()
        assert running, term.text()
        term.send(b"\x03")  # Ctrl-C
        term.expect(b"SIGINT received: stopping agy")
        term.expect(b"aborted")
        term.expect(PROMPT)  # the REPL goes on
        assert _gone(running) == []  # that turn's agy is gone
        assert late not in term.screen  # the answer's later chunks never came
        term.send(b"half typed")
        term.send(b"\x03")  # at the prompt: the line is dropped
        assert term.second_ctrl_c_leaves() == 0, term.text()
    finally:
        term.kill()
    assert b"half typed\r\n" not in term.screen.split(b"Ctrl-C again")[1]  # never sent as a turn


@pytest.mark.slow
def test_ctrl_c_while_a_permission_question_waits_leaves_the_next_line_to_the_repl(
    tmp_path: Path,
) -> None:
    # The thread that asked used to stay in its read of the terminal after the turn ended: the
    # person's next line went to it, and the REPL never saw it.
    scenario = json.loads((ROOT / "agy_provider/sim/scenarios/permission.json").read_text())
    scenario["turns"][0]["steps"][0]["tools"][0]["permission"]["timeout_ms"] = 120_000
    (tmp_path / "perm-long.json").write_text(json.dumps(scenario))
    term = Terminal(tmp_path, AGY_SIM_SCENARIO="perm-long.json")
    try:
        term.expect(PROMPT)
        term.send(b"where am I?\r")
        term.expect(b"Allow? [y/N] ")
        term.send(b"\x03")  # Ctrl-C while the question waits
        term.expect(b"SIGINT received: stopping agy")
        term.expect(b"aborted")
        term.expect(PROMPT)
        # The REPL answers at once; a swallowed line would leave the screen still.
        term.send(b"/help\r")
        shown = term.expect(b"Ctrl-D leaves.", within=20.0)
        assert b"/model [NAME]" in shown
        term.expect(PROMPT)
        term.send(b"\x04")  # Ctrl-D: nothing else reads the terminal either
        assert term.exit_code() == 0, term.text()
    finally:
        term.kill()
    assert scenario_answer("permission").encode() not in term.screen  # never allowed
    assert b"answering step" not in term.screen  # nothing was sent to the turn that was over


def test_a_question_reads_one_line_and_stops_reading_when_its_turn_ends() -> None:
    import io

    from agy_provider.cli.chat_turn import TerminalAsker

    keys, line_end = os.openpty()  # the person's side, and the chat's
    shown = io.StringIO()
    with os.fdopen(line_end, encoding="utf-8") as terminal:
        asker = TerminalAsker(terminal, shown, lambda: None)
        os.write(keys, "ja, gewiß\nthe next line\n".encode())
        assert asker.ask("Allow? [y/N] ") == "ja, gewiß"  # exactly one line, nothing past it
        assert os.read(line_end, 100) == b"the next line\n"
        answers: list[str] = []
        waiting = threading.Thread(
            target=lambda: answers.append(asker.ask("Allow? [y/N] ")), daemon=True
        )
        waiting.start()
        while shown.getvalue().count("Allow?") < 2:
            time.sleep(0.01)
        asker.end()  # the turn is over while the question waits
        os.write(keys, b"/help\n")
        assert os.read(line_end, 100) == b"/help\n"  # the line is left to the REPL
        asker.say("late\n")  # and nothing more is shown
        assert shown.getvalue() == "Allow? [y/N] " * 2
        # Unanswered: nothing goes back to a turn that is over (its thread, a daemon, waits).
        assert waiting.is_alive() and answers == []
    os.close(keys)


# `python -c` this: the CLI, with CPython's input hook set to libc's pause(). CPython's readline
# loop calls the hook after its select() says a key waits and before readline reads that key, so
# the REPL stops right there until a signal comes: a Ctrl-C then lands in that window every time,
# not now and then. The REPL, readline, the terminal and the signals are all real.
_PAUSE_BEFORE_READLINE_READS = """
import ctypes, runpy
hook = ctypes.c_void_p.in_dll(ctypes.pythonapi, "PyOS_InputHook")
hook.value = ctypes.cast(ctypes.CDLL(None).pause, ctypes.c_void_p).value
runpy.run_module("agy_provider.cli", run_name="__main__", alter_sys=True)
"""


def _paused(pid: int) -> bool:
    """The REPL's main thread waits in pause(), i.e. in the input hook (x86-64 Linux names it)."""
    return "pause" in Path(f"/proc/{pid}/wchan").read_text()


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.machine() != "x86_64",
    reason="sees pause() by its name in /proc/<pid>/wchan (x86-64 Linux)",
)
def test_ctrl_c_just_as_readline_takes_a_key_clears_the_line(tmp_path: Path) -> None:
    # The terminal's Ctrl-C used to discard the keys readline had been told were there: readline
    # then waited, deaf to signals, for a key that was gone — a frozen REPL.
    term = Terminal(tmp_path, python_args=("-c", _PAUSE_BEFORE_READLINE_READS))
    try:
        term.send(b"half typed")  # typed ahead: readline's first select() finds it
        term.expect(PROMPT)
        deadline = time.monotonic() + TIMEOUT
        while not _paused(term.pid):
            assert time.monotonic() < deadline, f"never paused; the screen:\n{term.text()}"
            time.sleep(0.01)
        term.send(b"\x03")  # Ctrl-C between select() and readline's read
        assert term.second_ctrl_c_leaves() == 0, term.text()
    finally:
        term.kill()
    assert b"half typed" not in term.screen.split(b"Ctrl-C again")[1]  # the line was dropped


@pytest.mark.slow
def test_sigterm_during_a_turn_aborts_it_and_leaves(tmp_path: Path) -> None:
    scenario = json.loads((ROOT / "agy_provider/sim/scenarios/slow.json").read_text())
    scenario["turns"][0]["steps"][0]["chunk_ms"] = 60_000
    (tmp_path / "slower.json").write_text(json.dumps(scenario))
    term = Terminal(tmp_path, AGY_SIM_SCENARIO="slower.json", AGY_SIM_SPEED="1")
    try:
        term.expect(PROMPT)
        term.send(b"take your time\r")
        term.expect(b"Thinking")
        children = term.process.children(recursive=True)
        term.process.send_signal(signal.SIGTERM)
        term.expect(b"SIGTERM received: stopping agy")
        assert term.exit_code() == 128 + signal.SIGTERM, term.text()
    finally:
        term.kill()
    assert _gone(children) == []


def test_without_a_terminal_and_a_prompt_it_is_a_usage_error_as_before(tmp_path: Path) -> None:
    for stdin in (subprocess.DEVNULL, None):
        done = subprocess.run(
            [sys.executable, "-m", "agy_provider.cli", "chat", "--agy-bin", "agy-sim"],
            env=_env(tmp_path),
            cwd=tmp_path,
            stdin=stdin,
            input="piped words\n" if stdin is None else None,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 2, done.stderr
        assert "pipe it in with -" in done.stderr and done.stdout == ""


def test_the_relay_wakes_the_main_thread_for_a_signal_another_thread_took() -> None:
    # Python runs handlers on the main thread only once a call there is interrupted: a SIGINT
    # the kernel gave another thread would leave the main thread's read waiting for a key.
    from agy_provider.cli.repl import SignalRelay

    relay = SignalRelay()
    ran: list[int] = []

    def on_sigint(signum: int, frame: object) -> None:
        relay.handled += 1
        ran.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    read, write = os.pipe()
    main_tid = threading.get_native_id()

    def other_thread() -> None:
        # Once the main thread sleeps in its read, the signal goes to this thread alone.
        stat = Path(f"/proc/self/task/{main_tid}/stat")
        while stat.read_text().rsplit(")", 1)[1].split()[0] != "S":
            os.sched_yield()
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    # Were the relay broken, the read must still end (and the test fail) rather than hang.
    rescued: list[bool] = []

    def rescue_read() -> None:
        rescued.append(True)
        os.write(write, b"x")

    rescue = threading.Timer(30.0, rescue_read)
    relay.start()
    try:
        rescue.start()
        threading.Thread(target=other_thread, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            os.read(read, 1)
    finally:
        rescue.cancel()
        relay.close()
        signal.signal(signal.SIGINT, previous)
        os.close(read)
        os.close(write)
    assert not rescued, "the main thread slept through the signal"
    assert ran == [signal.SIGINT] and relay.handled == 1


def test_a_signal_between_the_prompt_and_a_turn_waits_for_whichever_comes_next() -> None:
    # Between the prompt's handlers and a turn's, Python's own SIGINT handler would raise
    # KeyboardInterrupt wherever the REPL was and end it: the REPL's handler keeps the signal
    # for the next of them instead.
    import concurrent.futures
    import io

    from agy_provider.cli.repl import SignalRelay
    from agy_provider.cli.repl import TurnLoop
    from agy_provider.cli.repl import _read_line
    from agy_provider.cli.repl import _signals_abort
    from agy_provider.pi.options import AbortSignal

    def signalled(signum: int) -> None:
        os.kill(os.getpid(), signum)
        deadline = time.monotonic() + 10
        while signum not in relay.pending and time.monotonic() < deadline:
            time.sleep(0.001)  # the handler runs on this thread, at the next interruption

    relay = SignalRelay()
    relay.start()
    turns = TurnLoop()
    turns.start()
    previous = signal.signal(signal.SIGINT, relay.between)
    try:
        signalled(signal.SIGINT)  # after a turn: the next prompt takes it as its Ctrl-C
        assert relay.pending == [signal.SIGINT]
        with pytest.raises(KeyboardInterrupt):
            _read_line(io.StringIO(), relay)  # before it reads anything
        assert relay.pending == [] and signal.getsignal(signal.SIGINT) == relay.between

        signalled(signal.SIGINT)  # after the line was read: the turn takes it, and aborts
        abort = AbortSignal()
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with _signals_abort(turns, relay, abort, future, io.StringIO()) as received:
            assert received == [signal.SIGINT] and relay.pending == []
            deadline = time.monotonic() + 10
            while not abort.aborted and time.monotonic() < deadline:
                time.sleep(0.001)
            assert abort.aborted and not future.cancelled()
        assert signal.getsignal(signal.SIGINT) == relay.between
        assert relay.handled == 2
    finally:
        signal.signal(signal.SIGINT, previous)
        turns.close()
        relay.close()
