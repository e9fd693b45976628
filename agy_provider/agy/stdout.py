"""What agy's stream-json stdout tells a live turn: the conversation id it states, its `result`.

Owns reading agy's stdout while it runs (sans-I/O: feed it bytes); the steps come from the source.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from agy_provider.agy.argv import valid_conversation_id
from agy_provider.errors import FramingError
from agy_provider.wire.ndjson import LineDecoder

__all__ = ["MAX_CAPTURE_BYTES", "StdoutEvents"]

log = logging.getLogger(__name__)

# How much of agy's stdout/stderr we keep: enough for a crash report, bounded for a runaway log.
MAX_CAPTURE_BYTES = 64 * 1024


class StdoutEvents:
    """What agy's stream-json stdout says that the turn needs (sans-I/O: feed it bytes).

    Only the facts are kept, never the stream: the conversation id agy states (`init`, or the
    first event naming one), its last `result`, and a bounded tail of lines that are not JSON
    (agy prints errors such as "Error: authentication required" there, AGY-FORMATS §2.2).
    """

    def __init__(self) -> None:
        self._lines = LineDecoder()
        self._broken = False
        self.conversation_id = ""
        self.result: dict[str, Any] | None = None
        self.text = bytearray()

    def feed(self, data: bytes) -> bool:
        """Take a chunk; True when it made the conversation id known."""
        if self._broken:
            return False
        had_id = bool(self.conversation_id)
        try:
            self._lines.feed(data)
            for line in self._lines.lines():
                self._line(line)
        except FramingError as exc:
            log.warning("agy's stdout is not readable stream-json (%s); ignoring the rest", exc)
            self._broken = True
        return not had_id and bool(self.conversation_id)

    def _line(self, line: bytes) -> None:
        if self.conversation_id and line.startswith(b"{") and b'"result"' not in line:
            return  # a step update: the turn's steps come from its source, not from here
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            event = None
        if not isinstance(event, dict):
            self.text += line[:4096] + b"\n"
            if len(self.text) > MAX_CAPTURE_BYTES:
                del self.text[: len(self.text) - MAX_CAPTURE_BYTES]
            return
        self._take(event)

    def _take(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if not self.conversation_id:
            stated = event.get("conversation_id")
            if isinstance(stated, str) and valid_conversation_id(stated):
                self.conversation_id = stated
        if kind == "result" and isinstance(event.get("result"), dict):
            self.result = event["result"]
