"""What `agy-provider status` and `doctor` report: agy, its sign-in, our settings and state, and
checks that each say how to fix what failed.

Read-only towards agy's files (databases through `agy/database.py`, `mode=ro`). The only process
started beyond `agy --version`, `agy models` and `agy -p /usage` (answered by agy itself, no
model call) is the language-server probe, and only for the
simulator: `agy-sim` with no prompt serves its server until stopped, in a temporary state folder,
so the probe costs no model tokens and leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from pathlib import Path

from agy_provider.agy.state_folder import is_simulator
from agy_provider.agy.state_folder import state_folder
from agy_provider.errors import AgyError

__all__ = [
    "Check",
    "Status",
    "agy_state_folder",
    "doctor_checks",
    "gather_status",
    "probe_language_server",
    "warm_rows",
    "warm_status",
]

# The simulator's binary name: it gets a state folder of its own, and a language-server probe.
# Databases opened by `doctor` at most (newest first): enough to find a pattern of failures.
DOCTOR_DATABASES = 50
# How long the simulator's language server may take to answer Heartbeat on a busy machine.
PROBE_TIMEOUT = 60.0


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """One doctor check: `state` is "ok", "warn" (works, but worth knowing), "fail" or "skip";
    `fix` says what to do when it is not ok."""

    name: str
    state: str
    detail: str
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, slots=True)
class Status:
    """`agy-provider status`: each row is (label, value); `problems` counts rows that say so."""

    rows: tuple[tuple[str, str], ...]
    problems: int = 0
    quota: tuple[dict[str, object], ...] | None = None  # agy's /usage windows, when it answered
    warm: tuple[dict[str, object], ...] = ()  # the warm agys of every host (`warm_status`)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"rows": dict(self.rows), "problems": self.problems}
        if self.quota is not None:
            out["quota"] = [dict(bucket) for bucket in self.quota]
        out["warm"] = [dict(entry) for entry in self.warm]
        return out


def warm_status(now: float | None = None) -> tuple[dict[str, object], ...]:
    """Every warm agy of every live host (`live/warm/registry`), with its idle time and RSS:
    `Status.warm` (and `--json`'s `warm`)."""
    import time

    from agy_provider.live.warm.registry import list_warm
    from agy_provider.live.warm.registry import rss_of

    now = time.time() if now is None else now
    return tuple(
        {
            **entry.to_json(),
            "idle_seconds": round(entry.idle_seconds(now), 1),
            "rss_bytes": rss_of(entry.pid),
        }
        for entry in list_warm()
    )


def warm_rows(warm: tuple[dict[str, object], ...]) -> list[tuple[str, str]]:
    """`status` rows for the warm agys: how many, then one per agy (state, idle time, RSS,
    conversation, key, host); "none running" when there is none."""
    if not warm:
        return [("warm agy", "none running")]
    rows = [("warm agy", f"{len(warm)} running")]
    for entry in warm:
        conversation = entry["conversation_id"]
        parts = [
            str(entry["state"]),
            f"idle {_duration(entry['idle_seconds'])}",
            _mebibytes(entry["rss_bytes"]),
            f"conversation {conversation}" if conversation else "no conversation (spare)",
            str(entry["key"]),
            f"host pid {entry['host_pid']}",
        ]
        rows.append((f"warm pid {entry['pid']}", " · ".join(p for p in parts if p)))
    return rows


def _duration(seconds: object) -> str:
    """`4s`, `3m12s`, `2h05m`: an idle time at a glance."""
    whole = int(seconds) if isinstance(seconds, int | float) else 0
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _mebibytes(size: object) -> str:
    return f"{size / 2**20:.1f} MiB" if isinstance(size, int) else "?"


def agy_state_folder(binary: str, app_data_dir: str = "") -> Path:
    """The state folder this agy writes: the configured one, `ANTIGRAVITY_APP_DATA_DIR`, the
    simulator's own for a binary named agy-sim, else `~/.gemini/antigravity-cli`."""
    return state_folder(binary, app_data_dir)


def _find(configured: str) -> tuple[str, str]:
    """(binary, "") or ("", why it was not found)."""
    from agy_provider.live.runner import find_agy

    try:
        return find_agy(configured), ""
    except AgyError as exc:
        return "", str(exc)


def _version(binary: str) -> str:
    import asyncio

    from agy_provider.live.runner import agy_version

    return asyncio.run(agy_version(binary))


def _signed_in(binary: str, *, fresh: bool) -> tuple[bool | None, str]:
    """(True, "N models") when agy lists models, (False, agy's reason) when it says it is signed
    out, (None, reason) when it fails otherwise."""
    from agy_provider.store.model_catalog import cached_models

    try:
        models = cached_models(binary, refresh=fresh)
    except AgyError as exc:
        text = str(exc)
        return (False if "sign in" in text or "signed in" in text else None), text
    return True, f"{len(models)} models"


def _count_sessions() -> tuple[Path, int, str]:
    from agy_provider.store.sessions import SessionStore
    from agy_provider.store.sessions import default_store_path

    path = default_store_path()
    if not path.exists():
        return path, 0, ""
    try:
        return path, len(SessionStore(path).all()), ""
    except (AgyError, OSError) as exc:
        return path, 0, str(exc)


def _databases(folder: Path) -> list[Path]:
    try:
        found = [p for p in folder.iterdir() if p.suffix == ".db"]
    except OSError:
        return []
    return sorted(found, key=lambda p: p.stat().st_mtime if p.exists() else 0, reverse=True)


def _quota(binary: str) -> tuple[list[tuple[str, str]], tuple[dict[str, object], ...] | None]:
    """Rows for agy's `/usage` windows (no model call, no tokens), and the windows as JSON.

    Never a problem of its own: an agy that cannot say (older than 1.1.18, offline) is reported
    as unknown; a quota used up is shown with when it resets.
    """
    from agy_provider.agy.usage_command import read_quota_usage
    from agy_provider.errors import QuotaExceededError

    try:
        report = read_quota_usage(binary)
    except QuotaExceededError as exc:
        return [("quota", f"exhausted: {exc}")], ()
    except AgyError as exc:
        return [("quota", f"unknown: {exc}")], None
    if not report.buckets:
        return [("quota", "agy reported no quota windows")], ()
    rows = [(f"quota {b.window}", b.describe()) for b in report.buckets]
    return rows, tuple(b.to_json() for b in report.buckets)


def gather_status(agy_bin: str = "") -> Status:
    """agy (where, version, signed in per the kept model list, its quota per `/usage`),
    settings, sessions, agy's saved conversations and the event sources. Raises `UsageError`
    for a broken config file."""
    from agy_provider.plugin_manager import event_sources
    from agy_provider.store.config import CONFIG_ENV
    from agy_provider.store.config import ENV_OVERRIDES
    from agy_provider.store.config import config_path
    from agy_provider.store.config import load_config

    config = load_config()
    rows: list[tuple[str, str]] = []
    problems = 0
    quota: tuple[dict[str, object], ...] | None = None
    binary, missing = _find(agy_bin or config.agy_bin)
    if binary:
        version = _version(binary) or "version unknown"
        rows.append(("agy", f"{binary} ({version})"))
        signed, said = _signed_in(binary, fresh=False)
        if signed:
            rows.append(("signed in", f"yes ({said})"))
        else:
            problems += 1
            rows.append(("signed in", f"{'no' if signed is False else 'unknown'}: {said}"))
        if signed:
            quota_rows, quota = _quota(binary)
            rows.extend(quota_rows)
    else:
        problems += 1
        rows.append(("agy", f"not found: {missing}"))
        rows.append(("signed in", "unknown (agy not found)"))
    path = config_path()
    where = str(path) if path.exists() else f"{path} (not created: defaults)"
    rows.append(("config", where + (f" [{CONFIG_ENV}]" if os.environ.get(CONFIG_ENV) else "")))
    overridden = [v for v in ENV_OVERRIDES if os.environ.get(v)]
    settings = " ".join(
        f"{k}={v}" for k, v in config.to_json().items() if v not in ("", None) and k != "csrf"
    )
    rows.append(
        ("settings", settings + (f" (from env: {', '.join(overridden)})" * bool(overridden)))
    )
    sessions_path, count, broken = _count_sessions()
    rows.append(("sessions", f"{count} in {sessions_path}" + (f" ({broken})" if broken else "")))
    state = agy_state_folder(binary or config.agy_bin or "agy", config.app_data_dir)
    conversations = state / "conversations"
    rows.append(("conversations", f"{len(_databases(conversations))} in {conversations}"))
    names = sorted(event_sources())
    rows.append(("event sources", f"{', '.join(names)} (configured: {config.event_source})"))
    warm = warm_status()
    rows.extend(warm_rows(warm))
    return Status(tuple(rows), problems, quota, warm)


def probe_language_server(binary: str, *, timeout: float = PROBE_TIMEOUT) -> tuple[bool, str]:
    """Start the simulator's language server alone (no turn, no tokens), wait until it answers
    Heartbeat over its Connect port, and stop it. Returns (answered, what happened)."""
    import asyncio

    return asyncio.run(_probe(binary, timeout))


async def _probe(binary: str, timeout: float) -> tuple[bool, str]:
    import asyncio
    import secrets
    import signal
    import subprocess
    import tempfile

    import psutil

    from agy_provider.rpc.language_server import connect_to_language_server

    token = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="agy-provider-doctor-") as scratch:
        log_file = os.path.join(scratch, "agy.log")
        env = {
            **os.environ,
            "ANTIGRAVITY_APP_DATA_DIR": os.path.join(scratch, "state"),
            "AGY_CLI_DISABLE_AUTO_UPDATE": "1",
        }
        proc = subprocess.Popen(
            [binary, f"--csrf_token={token}", "--log-file", log_file],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        try:
            root = psutil.Process(proc.pid)

            async def tree() -> list[psutil.Process]:
                def scan() -> list[psutil.Process]:
                    try:
                        return [root, *root.children(recursive=True)]
                    except psutil.Error:
                        return []

                return await asyncio.to_thread(scan)

            client = await connect_to_language_server(
                tree,
                csrf_token=token,
                exited=lambda: proc.poll() is not None,
                timeout=timeout,
                log_file=log_file,
            )
            url = client.base_url
            await client.aclose()
            return True, f"Heartbeat answered at {url}"
        except AgyError as exc:
            return False, str(exc)
        finally:
            for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    await asyncio.to_thread(proc.wait, wait)
                    break
                except subprocess.TimeoutExpired:
                    continue


def doctor_checks(agy_bin: str = "") -> list[Check]:
    """Every check, in order; none raises. A failed check's `fix` says what to do."""
    from agy_provider.errors import UsageError
    from agy_provider.live.runner import INSTALL_HINT
    from agy_provider.store.config import CONFIG_ENV
    from agy_provider.store.config import config_path
    from agy_provider.store.config import load_config

    checks: list[Check] = []
    try:
        config = load_config()
        checks.append(Check("config", "ok", f"{config_path()} reads"))
    except UsageError as exc:
        from agy_provider.store.config import Config

        config = Config()
        checks.append(
            Check("config", "fail", str(exc), f"fix or delete the file, or set {CONFIG_ENV}")
        )
    binary, missing = _find(agy_bin or config.agy_bin)
    if not binary:
        checks.append(Check("agy", "fail", missing, INSTALL_HINT))
    else:
        checks.append(Check("agy", "ok", binary))
        version = _version(binary)
        if version:
            checks.append(Check("agy --version", "ok", version))
        else:
            checks.append(
                Check(
                    "agy --version",
                    "fail",
                    f"{binary} --version printed nothing",
                    f"run `{binary} --version` yourself: agy may be broken or updating",
                )
            )
        checks.append(_path_check(binary))
        signed, said = _signed_in(binary, fresh=True)
        if signed:
            checks.append(Check("signed in", "ok", f"`agy models` lists {said}"))
        else:
            checks.append(
                Check(
                    "signed in",
                    "fail",
                    said,
                    f"run `{os.path.basename(binary)}` once in a terminal and sign in",
                )
            )
    state = agy_state_folder(binary or config.agy_bin or "agy", config.app_data_dir)
    checks.append(_state_check(state))
    checks.append(_writable_check("agy-provider state", _our_state_folder()))
    checks.append(_database_check(state / "conversations"))
    checks.append(_server_check(binary))
    checks.append(_sources_check(config.event_source))
    return checks


def _path_check(binary: str) -> Check:
    on_path = shutil.which(os.path.basename(binary))
    if on_path and os.path.realpath(on_path) == os.path.realpath(binary):
        return Check("PATH", "ok", f"{os.path.basename(binary)} is on PATH")
    folder = os.path.dirname(binary)
    if folder == os.path.dirname(sys.executable):
        where = "beside this Python (not on PATH)"
    else:
        where = "at its configured path (not on PATH)"
    return Check(
        "PATH",
        "warn",
        f"{binary} is used {where}",
        f'add it to PATH (export PATH="{folder}:$PATH") to run it yourself',
    )


def _our_state_folder() -> Path:
    from agy_provider.store.sessions import default_store_path

    return default_store_path().parent


def _state_check(state: Path) -> Check:
    conversations = state / "conversations"
    if not state.exists():
        return Check(
            "agy state folder",
            "warn",
            f"{state} does not exist yet",
            "run one turn (agy-provider chat 'hi') and agy creates it",
        )
    if not os.access(state, os.R_OK | os.X_OK) or (
        conversations.exists() and not os.access(conversations, os.R_OK | os.X_OK)
    ):
        return Check(
            "agy state folder",
            "fail",
            f"{state} is not readable",
            f"give yourself read access: chmod u+rx {state} {conversations}",
        )
    return Check("agy state folder", "ok", f"{state} is readable")


def _writable_check(name: str, folder: Path) -> Check:
    probe = folder
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if os.access(probe, os.W_OK | os.X_OK):
        return Check(name, "ok", f"{folder} is writable (sessions, model list)")
    return Check(
        name,
        "fail",
        f"{folder} is not writable: sessions cannot be continued",
        f"chmod u+w {probe}, or point AGY_PROVIDER_SESSIONS / XDG_STATE_HOME elsewhere",
    )


def _database_check(conversations: Path) -> Check:
    import sqlite3

    from agy_provider.agy.database import open_conversation_db
    from agy_provider.agy.database import user_step_indices

    paths = _databases(conversations)
    if not paths:
        return Check("databases", "skip", f"no conversations in {conversations} yet")
    failed: list[str] = []
    checked = paths[:DOCTOR_DATABASES]
    for path in checked:
        try:
            conn = open_conversation_db(path, snapshot=True)
            try:
                user_step_indices(conn)
            finally:
                conn.close()
        except (AgyError, OSError, sqlite3.Error) as exc:
            failed.append(f"{path.name}: {exc}")
    if failed:
        return Check(
            "databases",
            "fail",
            f"{len(failed)} of {len(checked)} unreadable — " + "; ".join(failed[:3]),
            "`agy-provider replay PATH --format steps` shows what is wrong with one; a file "
            "from a newer agy may need a newer agy-provider",
        )
    return Check("databases", "ok", f"{len(checked)} of {len(paths)} opened read-only")


def _server_check(binary: str) -> Check:
    if not binary:
        return Check("language server", "skip", "agy not found")
    if not is_simulator(binary):
        return Check(
            "language server",
            "skip",
            "agy starts its language server only inside a turn, and a turn costs tokens",
            "`agy-provider chat --backend rpc 'hi'` proves it (one short turn)",
        )
    answered, said = probe_language_server(binary)
    if answered:
        return Check("language server", "ok", said)
    return Check(
        "language server",
        "fail",
        said,
        "loopback ports may be blocked, or the machine too busy: run "
        f"`{binary} --log-file /tmp/agy.log` and read the log; turns fall back to the database",
    )


def _sources_check(configured: str) -> Check:
    from agy_provider.plugin_manager import event_sources

    try:
        names = sorted(event_sources())
    except AgyError as exc:
        return Check("event sources", "fail", str(exc), "uninstall or fix the plugin it names")
    if configured != "auto" and configured not in names:
        return Check(
            "event sources",
            "fail",
            f"configured {configured!r}, registered: {', '.join(names)}",
            "agy-provider config event_source auto",
        )
    return Check("event sources", "ok", f"{', '.join(names)} (configured: {configured})")
