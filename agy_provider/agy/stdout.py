"""What agy's stream-json stdout tells a live turn: the conversation id it states, its `result`,
and the turn's event lines kept raw for a stdout event source (sans-I/O: feed it bytes).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any
from typing import Final

from agy_provider.agy.argv import valid_conversation_id
from agy_provider.errors import FramingError
from agy_provider.wire.ndjson import LineDecoder

__all__ = ["MAX_CAPTURE_BYTES", "MAX_EVENT_BYTES", "StdoutEvents"]

log = logging.getLogger(__name__)

# How much of agy's stdout/stderr we keep: enough for a crash report, bounded for a runaway log.
MAX_CAPTURE_BYTES = 64 * 1024
# How many bytes of event lines one turn keeps for a stdout event source. A delta line is its
# text plus ~200 bytes of envelope, so a 1 MB answer in 20-character deltas is ~11 MB of lines;
# 64 MiB is several such answers with their tool outputs, and still a bound on a runaway agy.
# Past it lines are no longer kept and `incomplete` says so (the source then reports the stream
# incomplete; the facts — id, result, notes — are still read).
MAX_EVENT_BYTES: Final = 64 * 1024 * 1024

Listener = Callable[[], None]


class StdoutEvents:
    """What agy's stream-json stdout says that the turn needs (sans-I/O: feed it bytes).

    The facts: the conversation id agy states (`init`, or the first event naming one, a step
    update's body included), its last `result`, and a bounded tail of lines that are not JSON
    (agy prints errors such as "Error: authentication required" there, AGY-FORMATS §2.2).

    The stream: every line that is a JSON object (`init`, `step_update`, `result`, …) is kept
    raw, without its newline, in order (`lines_from`), up to `MAX_EVENT_BYTES`; step updates are
    kept without being parsed, so a turn nobody reads this way pays only the copy of its lines.
    Listeners (`add_listener`) are called, on the feeding thread, after every feed or end of input
    that added lines or ended the stream; they must return at once and not feed.
    """

    def __init__(self) -> None:
        self._lines = LineDecoder()
        self._broken = False
        self._ended = False
        self.conversation_id = ""
        self.result: dict[str, Any] | None = None
        self.text = bytearray()
        self._kept: list[bytes] = []
        self.kept_bytes = 0
        self.incomplete = False  # lines past MAX_EVENT_BYTES (or after a framing error) were lost
        self._listeners: list[Listener] = []

    # -- input -------------------------------------------------------------------------------

    def feed(self, data: bytes) -> bool:
        """Take a chunk; True when it made the conversation id known."""
        if self._broken or self._ended:
            return False
        had_id = bool(self.conversation_id)
        count = len(self._kept)
        try:
            self._lines.feed(data)
            for line in self._lines.lines():
                self._line(line)
        except FramingError as exc:
            log.warning("agy's stdout is not readable stream-json (%s); ignoring the rest", exc)
            self._broken = self.incomplete = True
        if len(self._kept) != count or self._broken:
            self._notify()
        return not had_id and bool(self.conversation_id)

    def end_of_input(self) -> None:
        """agy's stdout ended: take its last line (if it had no newline) and say so to listeners."""
        if self._ended:
            return
        self._ended = True
        if not self._broken:
            try:
                tail = self._lines.end_of_input()
            except FramingError as exc:
                log.warning("agy's stdout ended in a line that cannot be read: %s", exc)
                self.incomplete = True
                tail = None
            if tail is not None:
                self._line(tail)
        self._notify()

    @property
    def ended(self) -> bool:
        """True once `end_of_input` was called (or the stream broke): no line will be added."""
        return self._ended or self._broken

    # -- the kept lines ----------------------------------------------------------------------

    @property
    def line_count(self) -> int:
        """How many event lines are kept: positions for `lines_from`."""
        return len(self._kept)

    def lines_from(self, start: int) -> list[bytes]:
        """The kept event lines from position `start` on (raw JSON, no newline), in order."""
        return self._kept[start:]

    def add_listener(self, listener: Listener) -> None:
        """Call `listener()` after each feed that added lines (or ended the stream)."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        """Stop calling `listener` (absent: nothing happens)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _notify(self) -> None:
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:  # a listener's bug must not stop agy's stdout being read
                log.exception("a stdout listener failed")

    # -- lines -------------------------------------------------------------------------------

    def _keep(self, line: bytes) -> None:
        if self.incomplete:
            return
        if self.kept_bytes + len(line) > MAX_EVENT_BYTES:
            log.warning(
                "agy's stdout passed %d bytes of events in one turn; the rest is not kept",
                MAX_EVENT_BYTES,
            )
            self.incomplete = True
            return
        self._kept.append(line)
        self.kept_bytes += len(line)

    def _line(self, line: bytes) -> None:
        if line.startswith(b"{") and self.conversation_id and b'"result"' not in line:
            self._keep(line)  # a step update: kept for a stdout source, never parsed here
            return
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            event = None
        if not isinstance(event, dict):
            self.text += line[:4096] + b"\n"
            if len(self.text) > MAX_CAPTURE_BYTES:
                del self.text[: len(self.text) - MAX_CAPTURE_BYTES]
            return
        self._keep(line)
        self._take(event)

    def _take(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if not self.conversation_id:
            stated = event.get("conversation_id")
            body = event.get("step_update")
            if stated is None and isinstance(body, dict):
                # A turn fed without its process's `init` (a warm agy) names it in its steps.
                stated = body.get("conversation_id")
            if isinstance(stated, str) and valid_conversation_id(stated):
                self.conversation_id = stated
        if kind == "result" and isinstance(event.get("result"), dict):
            self.result = event["result"]
