"""agy's state folder as the simulator keeps it: conversations, caches and the CLI log.

Owns the layout under `$ANTIGRAVITY_APP_DATA_DIR` (else a folder of the simulator's own, never the
real agy's `~/.gemini/antigravity-cli`) and agy's glog-style log lines.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import threading
from pathlib import Path

from agy_provider.agy.state_folder import simulator_state_dir

__all__ = ["CONVERSATION_ID", "AppState", "default_app_dir", "simulator_state_dir"]

# agy validates ids passed to --conversation: alphanumeric first, then [A-Za-z0-9-], at most 128.
CONVERSATION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")


def default_app_dir(gemini_dir: str | None = None) -> Path:
    """`$ANTIGRAVITY_APP_DATA_DIR`, else `<gemini_dir>/antigravity-cli` when `--gemini_dir` is
    given (the user pointed there), else `simulator_state_dir()`."""
    explicit = os.environ.get("ANTIGRAVITY_APP_DATA_DIR")
    if explicit:
        return Path(explicit)
    if gemini_dir:
        return Path(gemini_dir) / "antigravity-cli"
    return simulator_state_dir()


class AppState:
    """The state folder; `log_file` overrides `log/cli-<timestamp>.log`."""

    def __init__(self, root: Path, log_file: str | None = None) -> None:
        self.root = root
        self.conversations = root / "conversations"
        self.conversations.mkdir(parents=True, exist_ok=True)
        (root / "cache").mkdir(exist_ok=True)
        if log_file:
            self.log_path = Path(log_file)
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        else:
            (root / "log").mkdir(exist_ok=True)
            stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
            self.log_path = root / "log" / f"cli-{stamp}-{os.getpid()}.log"
        self._lock = threading.Lock()

    def db_path(self, conversation_id: str) -> Path:
        return self.conversations / f"{conversation_id}.db"

    def log(self, message: str, *, level: str = "I", source: str = "cli.go:412") -> None:
        """Append one glog line (`I1130 11:38:00.123456 4242 cli.go:412] message`)."""
        now = datetime.datetime.now()
        line = f"{level}{now:%m%d %H:%M:%S.%f} {os.getpid():7d} {source}] {message}\n"
        with self._lock, self.log_path.open("a", encoding="utf-8") as handle:
            handle.write(line)

    @property
    def _last_path(self) -> Path:
        return self.root / "cache" / "last_conversations.json"

    def last_conversation(self, cwd: str) -> str | None:
        """What `--continue` resumes for `cwd`."""
        try:
            data = json.loads(self._last_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        value = data.get(cwd) if isinstance(data, dict) else None
        return value if isinstance(value, str) else None

    def remember(self, cwd: str, conversation_id: str) -> None:
        with self._lock:
            try:
                data = json.loads(self._last_path.read_text(encoding="utf-8"))
                if not isinstance(data, dict):
                    data = {}
            except (OSError, ValueError):
                data = {}
            data[cwd] = conversation_id
            # Several agy processes share this file: each writes its own temp file, then renames.
            tmp = self._last_path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
            tmp.replace(self._last_path)
