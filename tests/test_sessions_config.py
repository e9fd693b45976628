"""Sessions store and config: atomic, multi-process safe, validated, never torn by kill -9."""

from __future__ import annotations

import errno
import json
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from agy_provider.errors import UsageError
from agy_provider.store.config import Config
from agy_provider.store.config import load_config
from agy_provider.store.config import save_config
from agy_provider.store.sessions import SessionRecord
from agy_provider.store.sessions import SessionStore
from agy_provider.store.sessions import valid_conversation_id

UUID = "2399249c-4a48-40f1-bf3b-4c6e5d3a5a0e"


def _writer(path: str, worker: int, count: int) -> None:
    store = SessionStore(Path(path))
    for n in range(count):
        store.put(f"w{worker}-{n}", SessionRecord(conversation_id=UUID, last_step_index=n))


def test_concurrent_writers_merge(tmp_path: Path) -> None:
    path = tmp_path / "sessions.json"
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_writer, args=(str(path), w, 15)) for w in range(4)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(60)
        assert p.exitcode == 0
    records = SessionStore(path).all()
    assert set(records) == {f"w{w}-{n}" for w in range(4) for n in range(15)}


def test_a_lookup_parses_its_own_line_and_a_save_only_the_records_it_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each turn reads the store and writes it: with many records, parsing all of them at every
    read was most of a turn's CPU, and keeping them parsed grew every host by megabytes. A
    lookup now parses one record, a save none, and a write of another process is read the same
    way."""
    path = tmp_path / "sessions.json"
    parsed: list[object] = []
    original = SessionRecord.from_json.__func__  # type: ignore[attr-defined]

    def from_json(cls: type[SessionRecord], data: Any) -> SessionRecord:
        parsed.append(data)
        return original(cls, data)  # type: ignore[no-any-return]

    monkeypatch.setattr(SessionRecord, "from_json", classmethod(from_json))
    store = SessionStore(path)
    store.put_many(
        {f"s{n}": SessionRecord(conversation_id=UUID, last_step_index=n) for n in range(300)}
    )
    for n in range(50):
        record = store.get(f"s{n}")
        assert record is not None and record.last_step_index == n
        SessionStore(path).put(f"new{n}", SessionRecord(conversation_id=UUID))
    assert len(parsed) == 50  # 50 lookups, 50 writes: one record parsed each lookup
    # One record per line, and JSON as a whole.
    lines = path.read_text().splitlines()
    assert len(lines) == 350 + 5 and json.loads(path.read_text())["version"] == 1
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from agy_provider.store.sessions import "
            "SessionRecord, SessionStore; SessionStore(Path(sys.argv[1])).put('other', "
            f"SessionRecord(conversation_id={UUID!r}, last_step_index=7))",
            str(path),
        ],
        check=True,
    )
    other, kept = store.get("other"), store.get("s3")
    assert other is not None and other.last_step_index == 7 and kept is not None
    assert len(parsed) == 52
    # What a caller gets is read-only: nothing it holds changes the store.
    with pytest.raises(TypeError):
        store.all()["s0"] = SessionRecord(conversation_id=UUID)  # type: ignore[index]
    assert len(store.all()) == 351  # a listing parses every record


def test_saves_at_the_same_time_share_writes_and_each_returns_once_its_record_landed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fifty turns ending together: a group commit, not fifty rewrites of the whole store."""
    import threading

    path = tmp_path / "sessions.json"
    writes: list[int] = []
    original = SessionStore._write_batch

    def write_batch(self: SessionStore, batch: Any) -> None:
        writes.append(len(batch))
        time.sleep(0.01)  # a write takes a while (fsync): others arrive meanwhile
        original(self, batch)

    monkeypatch.setattr(SessionStore, "_write_batch", write_batch)
    landed: dict[str, bool] = {}
    start = threading.Barrier(40)

    def save(n: int) -> None:
        start.wait()
        SessionStore(path).put(f"s{n}", SessionRecord(conversation_id=UUID, last_step_index=n))
        landed[f"s{n}"] = f"s{n}" in json.loads(path.read_text())["sessions"]  # on disk now

    threads = [threading.Thread(target=save, args=(n,)) for n in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert landed == {f"s{n}": True for n in range(40)}
    assert sum(writes) == 40 and len(writes) < 20  # every record written once, in few writes
    records = SessionStore(path).all()
    assert {k: r.last_step_index for k, r in records.items()} == {f"s{n}": n for n in range(40)}


def test_kill_9_mid_write_never_corrupts(tmp_path: Path) -> None:
    path = tmp_path / "sessions.json"
    SessionStore(path).put("seed", SessionRecord(conversation_id=UUID))
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from agy_provider.store.sessions import SessionRecord, SessionStore
        store = SessionStore(Path({str(path)!r}))
        n = 0
        while True:
            # A big store makes each write long enough to be killed inside it.
            store.put(f"s{{n % 400}}", SessionRecord(conversation_id={UUID!r}, last_step_index=n, agy_version="x" * 2000))
            n += 1
        """
    )
    for delay in (0.05, 0.13, 0.21, 0.34, 0.5):
        proc = subprocess.Popen([sys.executable, "-c", script])
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        data = json.loads(path.read_text())  # never torn: always valid JSON
        assert "seed" in data["sessions"]
        assert SessionStore(path).get("seed") is not None
    leftovers = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(leftovers) <= 5  # a killed writer may leave its temp file; never the store itself


def test_invalid_records_are_dropped_on_load(tmp_path: Path) -> None:
    path = tmp_path / "sessions.json"
    path.write_text(
        json.dumps(
            {
                "sessions": {
                    "good": {"conversation_id": UUID, "last_step_index": 3},
                    "flag": {"conversation_id": "-rf", "last_step_index": 3},
                    "index": {"conversation_id": UUID, "last_step_index": "x"},
                }
            }
        )
    )
    assert set(SessionStore(path).all()) == {"good"}
    path.write_text("{not json")
    assert SessionStore(path).all() == {}


def test_conversation_ids_that_could_be_flags_are_refused() -> None:
    assert valid_conversation_id(UUID)
    for bad in ("-x", "--conversation", "", "a b", "a/b", "x" * 129):
        assert not valid_conversation_id(bad)


def test_config_round_trip_and_env_overrides(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    assert load_config(path, env={}) == Config()
    save_config(
        Config(mode="plan", permissions="skip", model="gemini-3.7-flash", thinking="high"), path
    )
    loaded = load_config(path, env={})
    assert (loaded.mode, loaded.permissions, loaded.model, loaded.thinking) == (
        "plan",
        "skip",
        "gemini-3.7-flash",
        "high",
    )
    env = {"AGY_MODE": "accept-edits", "AGY_TURN_TIMEOUT": "42", "AGY_BIN": "/opt/agy"}
    overridden = load_config(path, env=env)
    assert (overridden.mode, overridden.turn_timeout, overridden.agy_bin) == (
        "accept-edits",
        42.0,
        "/opt/agy",
    )
    assert load_config(path, env={}).mode == "plan"  # env never written back


def test_config_rejects_bad_values(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"mode": "yolo"}))
    with pytest.raises(UsageError, match="mode must be one of"):
        load_config(path, env={})
    with pytest.raises(UsageError, match="idle_timeout must be a number of seconds greater than 0"):
        load_config(tmp_path / "none.json", env={"AGY_IDLE_TIMEOUT": "0"})
    path.write_text("[1]")
    with pytest.raises(UsageError, match="JSON object"):
        load_config(path, env={})


# -- a store that cannot be read or written: one warning, no traceback, no lost turn --------------


def _store_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "agy_provider.store.sessions" and r.levelno >= logging.WARNING
    ]


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"\xff\xfe garbage",
        b"[1, 2, 3]",
        b'{"sessions": [1, 2]}',
        b'{"sessions": "x"}',
        b"null",
        # Before: a RecursionError traceback from json.loads, not the store's one warning.
        b"[" * 100_000 + b"]" * 100_000,
        b'{"sessions": {"s": ' + b"[" * 300 + b"]" * 300 + b"}}",
    ],
    ids=[
        "garbage",
        "not-utf8",
        "a-list",
        "sessions-a-list",
        "sessions-a-string",
        "null",
        "100000-deep",
        "past-the-depth-bound",
    ],
)
def test_a_corrupt_store_warns_once_and_is_set_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes
) -> None:
    path = tmp_path / "sessions.json"
    path.write_bytes(content)
    store = SessionStore(path)
    with caplog.at_level(logging.WARNING):
        assert store.get("s") is None
        assert store.get("s") is None
        store.put("s", SessionRecord(conversation_id=UUID, last_step_index=4))
        assert SessionStore(path).get("s") == SessionRecord(
            conversation_id=UUID,
            last_step_index=4,
            updated_at=store.get("s").updated_at,  # type: ignore[union-attr]
        )
    warnings = _store_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert str(path) in warnings[0] and "corrupt" in warnings[0]
    assert "sessions.json.corrupt" in warnings[0]  # says where the old file goes
    assert (tmp_path / "sessions.json.corrupt").read_bytes() == content


def test_malformed_records_give_one_warning_naming_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "sessions.json"
    good = {"conversation_id": UUID, "last_step_index": 2}
    path.write_text(
        json.dumps(
            {
                "sessions": {
                    "good": good,
                    "number": 5,
                    "id-type": {"conversation_id": 7},
                    "stamp": {"conversation_id": UUID, "updated_at": [1]},
                    "bool-index": {"conversation_id": UUID, "last_step_index": True},
                }
            }
        )
    )
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert set(SessionStore(path).all()) == {"good"}
        assert SessionStore(path).get("number") is None
    warnings = _store_warnings(caplog)
    assert len(warnings) == 1, warnings
    for name in ("number", "id-type", "stamp", "bool-index"):
        assert repr(name) in warnings[0]
    assert str(path) in warnings[0]


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_a_full_disk_keeps_the_old_store_and_warns_once(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    failing: str,
) -> None:
    path = tmp_path / "sessions.json"
    store = SessionStore(path)
    store.put("old", SessionRecord(conversation_id=UUID, last_step_index=1))
    before = path.read_bytes()

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    # The edge where a full disk shows itself: the data's fsync, or the rename's directory entry.
    monkeypatch.setattr(os, failing, full)
    with caplog.at_level(logging.WARNING):
        for n in range(3):
            store.put(f"new{n}", SessionRecord(conversation_id=UUID))  # warns, never raises
    monkeypatch.undo()
    warnings = _store_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert str(path) in warnings[0] and "No space left on device" in warnings[0]
    assert "AGY_PROVIDER_SESSIONS" in warnings[0]  # what to do
    assert path.read_bytes() == before  # the old store is intact
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temp file left
    # Once the disk has room again, saving works and a later failure is reported afresh.
    store.put("new", SessionRecord(conversation_id=UUID))
    assert set(store.all()) == {"old", "new"}


_READ_ONLY_SCRIPT = f"""
import logging, os, sys
from pathlib import Path
from agy_provider.store.sessions import SessionRecord, SessionStore

logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
if os.geteuid() == 0:  # root writes anywhere: become nobody to meet a read-only folder
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
store = SessionStore(Path(sys.argv[1]))
seed = store.get("seed")
print("seed", seed.conversation_id if seed else None)
for n in range(3):
    print("put", store.put(f"new{{n}}", SessionRecord(conversation_id={UUID!r})))
print("new", store.get("new0"))
"""


def test_a_read_only_folder_warns_once_and_loses_nothing(tmp_path: Path) -> None:
    # A folder nobody but its owner can enter would fail for other reasons: use a world-readable one.
    with tempfile.TemporaryDirectory() as top:
        os.chmod(top, 0o755)
        folder = Path(top) / "state"
        folder.mkdir()
        path = folder / "sessions.json"
        SessionStore(path).put("seed", SessionRecord(conversation_id=UUID))
        os.chmod(path, 0o644)
        os.chmod(folder, 0o555)
        try:
            result = subprocess.run(
                [sys.executable, "-c", _READ_ONLY_SCRIPT, str(path)],
                capture_output=True,
                text=True,
                timeout=60,
            )
        finally:
            os.chmod(folder, 0o755)
    if result.returncode != 0 and "Operation not permitted" in result.stderr:
        pytest.skip("cannot drop root privileges here, so no folder is read-only to us")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout.splitlines() == [
        "seed " + UUID,
        "put None",
        "put None",
        "put None",
        "new None",
    ]
    warnings = [line for line in result.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1, result.stderr
    assert str(path) in warnings[0] and "Permission denied" in warnings[0]
    assert "writable" in warnings[0]


def test_an_unreadable_store_is_never_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A store path whose parent is a file: reading fails (not "missing"), so writing must not
    # replace what may be there, and both report once.
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    store = SessionStore(blocker / "sessions.json")
    with caplog.at_level(logging.WARNING):
        assert store.get("s") is None
        store.put("s", SessionRecord(conversation_id=UUID))
        store.put("s", SessionRecord(conversation_id=UUID))
        assert store.get("s") is None
    warnings = _store_warnings(caplog)
    assert len(warnings) == 2, warnings  # one for reading, one for writing
    assert all(str(blocker / "sessions.json") in w for w in warnings)
    assert blocker.read_text() == "x"


# -- timeouts: nan, inf, zero, negative and absurd values are refused by name ---------------------


@pytest.mark.parametrize("key", ["turn_timeout", "idle_timeout", "start_timeout"])
@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "-5", "0", "1e12", "true"])
def test_bad_timeouts_in_the_file_are_refused(tmp_path: Path, key: str, literal: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(f'{{"{key}": {literal}}}')
    with pytest.raises(UsageError) as info:
        load_config(path, env={})
    message = str(info.value)
    assert str(path) in message
    if "Infinity" in literal or literal == "NaN":
        # Not JSON at all (strict JSON, as the file is read): refused before any key is read.
        assert "not valid JSON" in message and literal.lstrip("-") in message
        return
    assert key in message
    if literal != "true":
        assert "greater than 0 and at most 604800" in message


@pytest.mark.parametrize("variable", ["AGY_TURN_TIMEOUT", "AGY_IDLE_TIMEOUT", "AGY_START_TIMEOUT"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "0.0", "1e400", "soon"])
def test_bad_timeouts_in_the_environment_are_refused(
    tmp_path: Path, variable: str, value: str
) -> None:
    with pytest.raises(UsageError) as info:
        load_config(tmp_path / "none.json", env={variable: value})
    message = str(info.value)
    assert variable in message
    assert variable.removeprefix("AGY_").lower() in message
    if value != "soon":
        assert "greater than 0" in message


def test_good_timeouts_pass_and_a_config_object_checks_too(tmp_path: Path) -> None:
    config = load_config(tmp_path / "none.json", env={"AGY_IDLE_TIMEOUT": "0.5"})
    assert config.idle_timeout == 0.5
    assert load_config(tmp_path / "none.json", env={"AGY_TURN_TIMEOUT": "604800"}).turn_timeout
    with pytest.raises(UsageError, match="idle_timeout"):
        Config(idle_timeout=float("nan"))


def test_an_unreadable_config_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="could not read the config file"):
        load_config(tmp_path, env={})  # a folder, not a file


def test_a_too_deep_config_file_is_a_usage_error_not_a_recursion_error(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b'{"mode": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    with pytest.raises(UsageError, match="is not valid JSON") as refused:
        load_config(path, env={})
    assert str(path) in str(refused.value)


def test_a_symlinked_lock_is_refused_and_its_target_never_created(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "sessions.json"
    target = tmp_path / "elsewhere" / "created-by-the-lock"
    (tmp_path / "elsewhere").mkdir()
    Path(f"{path}.lock").symlink_to(target)  # dangling: O_CREAT alone would create `target`
    store = SessionStore(path)
    with caplog.at_level(logging.WARNING):
        store.put("s", SessionRecord(conversation_id=UUID))
        store.put("t", SessionRecord(conversation_id=UUID))
    assert not target.exists()
    assert not path.exists()  # nothing was written without the lock
    warnings = _store_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert "symbolic link" in warnings[0] and f"{path}.lock" in warnings[0]
    config = tmp_path / "config.json"
    Path(f"{config}.lock").symlink_to(target)
    with pytest.raises(OSError, match="symbolic link") as refused:
        save_config(Config(), config)
    assert refused.value.errno == errno.ELOOP and not target.exists()


def test_a_store_that_keeps_records_its_own_way_is_saved_through_its_put_many(
    tmp_path: Path,
) -> None:
    """A subclass keeping records elsewhere (in memory, say) overrides `put_many`; the turn's
    save (`save_later`) must go through it, not write the file the base class would."""
    kept: dict[str, SessionRecord] = {}

    class Elsewhere(SessionStore):
        def put_many(self, records: Any) -> None:
            kept.update(records)

    store = Elsewhere(tmp_path / "never-written.json")
    store.save_later({"s": SessionRecord(conversation_id=UUID)}).result(10)
    assert set(kept) == {"s"}
    assert list(tmp_path.iterdir()) == []
