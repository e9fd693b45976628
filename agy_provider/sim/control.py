"""The parent side of the control channel to the simulated language server (see CONTRACT.md).

Owns spawning `agy_provider.sim.server` as our child and the NDJSON ops over the socketpair.

Failure to start the server is logged and the parent carries on with database-only operation,
so the simulator works while the server is missing or broken (`AGY_SIM_NO_SERVER=1` skips it).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

from agy_provider.sim.engine import Conversation
from agy_provider.sim.engine import Simulator
from agy_provider.sim.state import AppState

__all__ = ["ServerLink", "control_lines"]

# One control message is a small JSON object; anything longer than this is a broken peer.
MAX_LINE = 1 << 20


class ServerLink:
    """Spawns the language server child and serves its requests against `simulator`.

    `run_message(conversation_id, text, model)` runs a turn for `send_message` (in a thread).
    """

    def __init__(
        self,
        simulator: Simulator,
        state: AppState,
        *,
        csrf_token: str | None,
        log_file: str | None,
        run_message: Callable[[str, str, str], None],
    ) -> None:
        self.simulator = simulator
        self.state = state
        self.csrf_token = csrf_token
        self.log_file = log_file
        self.run_message = run_message
        self.process: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._send_lock = threading.Lock()
        self.ready = threading.Event()
        self.ports: dict[str, int] = {}

    def start(self) -> bool:
        """Spawn the child; False (logged) when it cannot run."""
        if os.environ.get("AGY_SIM_NO_SERVER") == "1":
            return False
        try:
            found = importlib.util.find_spec("agy_provider.sim.server") is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            self.state.log(
                "language server unavailable: agy_provider.sim.server not importable", level="W"
            )
            return False
        parent, child = socket.socketpair()
        argv = [
            sys.executable, "-m", "agy_provider.sim.server",
            "--app-dir", str(self.state.root),
            "--control-fd", str(child.fileno()),
            "--parent-pid", str(os.getpid()),
        ]  # fmt: skip
        if self.csrf_token:
            argv += ["--csrf-token", self.csrf_token]
        argv += ["--log-file", str(self.log_file or self.state.log_path)]
        try:
            self.process = subprocess.Popen(
                argv, pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL
            )
        except OSError as exc:
            self.state.log(f"language server failed to start: {exc}", level="E")
            parent.close()
            child.close()
            return False
        finally:
            if self.process is not None:
                child.close()
        self._sock = parent
        threading.Thread(target=self._read_loop, name="control-reader", daemon=True).start()
        return True

    # --- parent → child --------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        sock = self._sock
        if sock is None:
            return
        data = (json.dumps(message) + "\n").encode()
        with self._send_lock:
            try:
                sock.sendall(data)
            except OSError as exc:
                self.state.log(f"language server control channel closed: {exc}", level="W")
                self._sock = None

    def conversation(self, conversation: Conversation) -> None:
        self.send(
            {
                "op": "conversation",
                "id": conversation.id,
                "db": str(conversation.writer.path),
                "trajectoryId": conversation.trajectory_id,
            }
        )

    def status(self, conversation_id: str, running: bool) -> None:
        self.send(
            {"op": "status", "id": conversation_id, "status": "RUNNING" if running else "IDLE"}
        )

    def changed(self, conversation_id: str) -> None:
        self.send({"op": "changed", "id": conversation_id})

    # --- child → parent --------------------------------------------------------------------

    def _read_loop(self) -> None:
        sock = self._sock
        if sock is None:
            return

        def oversized() -> None:
            self.state.log("language server sent an oversized control line", level="W")

        for line in control_lines(sock, oversized):
            self._handle_line(line)
        self.state.log("language server control channel ended", level="W")

    def _handle_line(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            self.state.log("language server sent malformed control JSON", level="W")
            return
        if not isinstance(message, dict):
            return
        op = message.get("op")
        if op == "ready":
            self.ports = {
                k: int(message[k]) for k in ("https", "http") if isinstance(message.get(k), int)
            }
            self.ready.set()
            return
        seq = message.get("seq")
        try:
            reply = self._dispatch(op, message)
        except Exception as exc:  # a bad request must not kill the channel
            reply = {"ok": False, "error": str(exc)}
        if seq is not None:
            self.send({"op": "reply", "seq": seq, **reply})

    def _dispatch(self, op: Any, message: dict[str, Any]) -> dict[str, Any]:
        cid = str(message.get("id") or "")
        if op == "interaction":
            answer: dict[str, Any] = {
                k: message[k] for k in ("permission", "askQuestion") if k in message
            }
            index = int(message.get("stepIndex", 0))
            ok, error = self.simulator.answer(cid, index, answer)
            self.state.log(f"interaction for step {index}: {json.dumps(answer)} -> {error or 'ok'}")
            return {"ok": True} if ok else {"ok": False, "error": error}
        if op == "cancel":
            indices = message.get("stepIndices")
            self.state.log(f"cancel requested for conversation {cid}, steps {indices or 'all'}")
            self.simulator.cancel(
                cid, [int(i) for i in indices] if isinstance(indices, list) else None
            )
            return {"ok": True}
        if op == "start_cascade":
            conversation = self.simulator.open(cid or None)
            return {"ok": True, "id": conversation.id}
        if op == "send_message":
            text, model = str(message.get("text", "")), str(message.get("model", ""))
            threading.Thread(target=self.run_message, args=(cid, text, model), daemon=True).start()
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.process.kill()


def control_lines(
    sock: socket.socket, oversized: Callable[[], None] = lambda: None
) -> Iterator[bytes]:
    """The control lines read from `sock` (without their newline) until it closes or fails.

    A line growing past `MAX_LINE` is dropped, and `oversized` told, so a broken peer cannot
    make the reader hold without bound.
    """
    buffer = b""
    while True:
        try:
            data = sock.recv(65536)
        except OSError:
            return
        if not data:
            return
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line
        if len(buffer) > MAX_LINE:
            oversized()
            buffer = b""
