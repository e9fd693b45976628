"""A scripted Gemini API on loopback: answers `streamGenerateContent?alt=sse` from scenario data.

Google's runtime (localharness) calls it as its model. Each model name is one script: a list of
replies, each taken once, in order, by the first request it matches (so a subagent's calls and
its parent's can interleave). Nothing here calls out: it binds 127.0.0.1 only.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Mapping
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from typing import Any

__all__ = ["Reply", "ScriptedGemini"]

# A reply is data:
#   {"chunks": [[part, ...], ...], "usage": {...}, "finish": "STOP", "match": "substr",
#    "delay": seconds between chunks, "gate": "name"}
# or an HTTP failure: {"status": 429, "message": "...", "code_name": "RESOURCE_EXHAUSTED"}.
# `parts` are Gemini parts: {"text": ...}, {"text": ..., "thought": true}, {"functionCall": {...}}.
# `match` must occur in the JSON of the request's last content entry; `gate` holds the reply's
# last chunk until the test opens that gate; `after` holds the whole reply until the reply whose
# `match` equals it has been sent, plus `after_delay` seconds (so a parent answers only once its
# subagent has answered and gone idle).
Reply = Mapping[str, Any]

_PATH = re.compile(r"^/v1beta/models/([^/:]+):streamGenerateContent")
_FALLBACK: Reply = {"chunks": [[{"text": "(no scripted reply)"}]]}
# Never wait on a gate forever: a test that forgets to open one still ends.
_GATE_TIMEOUT = 60.0


class ScriptedGemini:
    """The server: `add(model, replies)`, then point `GeminiAPIEndpoint(base_url=url)` at it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scripts: dict[str, list[Reply]] = {}
        self._used: dict[str, set[int]] = {}
        self._gates: dict[str, threading.Event] = {}
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.unmatched: list[str] = []
        server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}"

    def start(self) -> ScriptedGemini:
        self._thread.start()
        return self

    def close(self) -> None:
        for gate in self._gates.values():
            gate.set()
        self._server.shutdown()
        self._server.server_close()

    def add(self, model: str, replies: Sequence[Reply]) -> None:
        with self._lock:
            self._scripts[model] = list(replies)
            self._used[model] = set()

    def gate(self, name: str) -> threading.Event:
        with self._lock:
            return self._gates.setdefault(name, threading.Event())

    def calls(self, model: str) -> list[dict[str, Any]]:
        return [body for m, body in self.requests if m == model]

    # -- serving ---------------------------------------------------------------------------

    def _pick(self, model: str, body: dict[str, Any]) -> Reply:
        contents = body.get("contents") or [{}]
        last = json.dumps(contents[-1])
        with self._lock:
            self.requests.append((model, body))
            script = self._scripts.get(model, [])
            used = self._used.setdefault(model, set())
            for n, reply in enumerate(script):
                if n in used:
                    continue
                if reply.get("match") and reply["match"] not in last:
                    continue
                used.add(n)
                if reply.get("match"):
                    self._gates.setdefault("sent:" + reply["match"], threading.Event())
                return reply
            self.unmatched.append(f"{model}: {last[:200]}")
            return _FALLBACK

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                found = _PATH.match(self.path)
                if found is None:
                    self._fail(404, "NOT_FOUND", f"no such path {self.path}")
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    self._fail(400, "INVALID_ARGUMENT", "body is not JSON")
                    return
                reply = outer._pick(found.group(1), body)
                if "status" in reply:
                    self._fail(reply["status"], reply.get("code_name", ""), reply.get("message", ""))
                    return
                self._stream(found.group(1), reply)

            def _fail(self, status: int, code_name: str, message: str) -> None:
                data = json.dumps(
                    {"error": {"code": status, "message": message, "status": code_name}}
                ).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, model: str, reply: Reply) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                if reply.get("after"):
                    outer.gate("sent:" + reply["after"]).wait(_GATE_TIMEOUT)
                    # …and give the other side a moment to act on it (a subagent to go idle).
                    time.sleep(float(reply.get("after_delay", 0.0)))
                chunks: list[list[dict[str, Any]]] = list(reply.get("chunks") or [[]])
                gate = outer.gate(reply["gate"]) if reply.get("gate") else None
                for n, parts in enumerate(chunks):
                    last = n == len(chunks) - 1
                    if last and gate is not None:
                        gate.wait(_GATE_TIMEOUT)
                    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}}
                    # Gemini names the model that answered on every chunk.
                    event: dict[str, Any] = {
                        "candidates": [candidate],
                        "modelVersion": reply.get("model_version", model + "-001"),
                    }
                    if last:
                        candidate["finishReason"] = reply.get("finish", "STOP")
                        event["usageMetadata"] = reply.get(
                            "usage", {"promptTokenCount": 10, "candidatesTokenCount": 5}
                        )
                    try:
                        self.wfile.write(b"data: " + json.dumps(event).encode() + b"\r\n\r\n")
                        self.wfile.flush()
                    except OSError:
                        return  # the runtime hung up (a cancelled call)
                    if not last and reply.get("delay"):
                        time.sleep(float(reply["delay"]))
                if reply.get("match"):
                    outer.gate("sent:" + reply["match"]).set()
                self.close_connection = True

        return Handler
