"""Hostile input, end to end: every decoder gives a value or its DecodeError, and `replay` gives
an exit code and warnings, never a traceback, a hang, a side file, or a terminal escape.

Also the regression tests for every crasher the fuzz targets (`test_fuzz_decoders.py`) found.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from agy_provider.agy.rpcjson import decode_json_step
from agy_provider.agy.step import Step
from agy_provider.cli import main
from agy_provider.errors import DecodeError
from agy_provider.errors import FramingError
from agy_provider.errors import RpcError
from agy_provider.offline.formatters import markdown
from agy_provider.offline.formatters import printable
from agy_provider.offline.formatters import transcript
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.wire import jsontext
from agy_provider.wire.connect import ConnectStreamDecoder
from agy_provider.wire.connect import encode_envelope
from agy_provider.wire.connect import parse_error_body
from agy_provider.wire.ndjson import NEED_DATA
from agy_provider.wire.ndjson import JsonLineDecoder

# JSON that Python's json module accepts or chokes on in ways that used to escape as foreign
# exceptions (or as values nothing downstream could print).
HOSTILE_JSON = {
    "huge float": b'{"n": 1e400}',
    "negative huge float": b'{"n": -1e400}',
    "Infinity": b'{"n": Infinity}',
    "-Infinity": b'{"n": -Infinity}',
    "NaN": b'{"n": NaN}',
    "5000-digit int": b'{"n": ' + b"7" * 5000 + b"}",
    "2000 deep": b'{"n": ' + b"[" * 2000 + b"]" * 2000 + b"}",
    "300 deep": b'{"n": ' + b"[" * 300 + b"]" * 300 + b"}",
    "object 1500 deep": b'{"a":' * 1500 + b"1" + b"}" * 1500,
    "lone high surrogate": b'{"s": "a\\ud800b"}',
    "lone low surrogate": b'{"s": "\\udc00"}',
    "reversed pair": b'{"s": "\\udc00\\ud800"}',
    "surrogate key": b'{"\\ud800": 1}',
    "not UTF-8": b'{"s": "\xff\xfe"}',
}


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def printable_json(value: Any) -> None:
    json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")


# -- 1. the JSON layer and every JSON decoder ---------------------------------------------------


@pytest.mark.parametrize("name", sorted(HOSTILE_JSON))
def test_strict_json_gives_a_printable_value_or_decode_error(name: str) -> None:
    data = HOSTILE_JSON[name]
    try:
        value = jsontext.loads(data)
    except DecodeError:
        return
    printable_json(value)  # lone surrogates became U+FFFD; depth is within bounds
    assert "surrogate" in name or "300" not in name


def test_lone_surrogates_become_replacement_characters() -> None:
    assert jsontext.loads(b'{"s": "a\\ud800b"}') == {"s": "a\ufffdb"}
    assert jsontext.loads(b'{"\\ud800": 1}') == {"\ufffd": 1}
    assert jsontext.loads(b'"\\ud83d\\ude00"') == "\U0001f600"  # a real pair stays one character


def test_nesting_past_the_bound_is_refused_even_when_python_could_parse_it() -> None:
    ok = b"[" * jsontext.MAX_DEPTH + b"]" * jsontext.MAX_DEPTH
    assert jsontext.loads(ok) is not None
    too_deep = b"[" + ok + b"]"
    with pytest.raises(DecodeError, match="nests deeper"):
        jsontext.loads(too_deep)


@pytest.mark.parametrize("name", sorted(HOSTILE_JSON))
def test_ndjson_line_is_skipped_or_decoded_and_the_next_line_survives(name: str) -> None:
    decoder = JsonLineDecoder()
    decoder.feed(HOSTILE_JSON[name] + b'\n{"ok": true}\n')
    values = []
    while True:
        try:
            value = decoder.next_object()
        except DecodeError as exc:
            assert type(exc) is DecodeError and "line 1" in str(exc)
            continue
        if value is NEED_DATA:
            break
        printable_json(value)
        values.append(value)
    assert values[-1] == {"ok": True}


@pytest.mark.parametrize("name", sorted(HOSTILE_JSON))
def test_connect_frame_is_skipped_or_decoded_and_the_stream_goes_on(name: str) -> None:
    decoder = ConnectStreamDecoder()
    decoder.feed(encode_envelope(HOSTILE_JSON[name]) + encode_envelope(b'{"ok": 1}'))
    decoder.feed(encode_envelope(b"{}", end_stream=True))
    values = []
    while True:
        try:
            value = decoder.next_message()
        except DecodeError as exc:
            assert type(exc) is DecodeError
            continue
        if value is NEED_DATA:
            break
        printable_json(value)
        values.append(value)
    assert values[-1] == {"ok": 1}
    decoder.end_of_input()
    error = parse_error_body(500, HOSTILE_JSON[name])
    assert isinstance(error, RpcError)
    str(error).encode("utf-8")


def test_end_of_stream_trailer_with_hostile_json_is_a_framing_error() -> None:
    decoder = ConnectStreamDecoder()
    decoder.feed(encode_envelope(b'{"error": {"code": "x", "message": NaN}}', end_stream=True))
    with pytest.raises(FramingError):
        decoder.next_message()


# Values a JSON parser other than ours (httpx's response.json()) can hand the RPC step decoder.
HOSTILE_VALUES: dict[str, Any] = {
    "inf": float("inf"),
    "-inf": float("-inf"),
    "nan": float("nan"),
    "huge int": 10**5000,
    "int past 64 bits": 2**64,
    "fraction": 1.5,
    "bool": True,
    "list": [1, 2],
    "object": {"a": 1},
    "deep": json.loads("[" * 900 + "]" * 900),
    "lone surrogate": "\ud800",
    "superscript digits": "²³",
    "arabic digits": "٣",
    "digits past int64": "1" * 30,
}

STEP_SLOTS = [
    ("metadata", "sourceTrajectoryStepInfo", "stepIndex"),
    ("metadata", "sourceTrajectoryStepInfo", "cascadeId"),
    ("metadata", "modelUsage", "inputTokens"),
    ("metadata", "modelUsage", "outputTokens"),
    ("metadata", "createdAt"),
    ("metadata", "toolCall", "name"),
    ("metadata", "toolCall", "argumentsJson"),
    ("metadata", "argumentsOrder"),
    ("type",),
    ("status",),
    ("plannerResponse", "response"),
    ("plannerResponse", "modifiedResponse"),
    ("plannerResponse", "thinking"),
    ("plannerResponse", "stopReason"),
    ("plannerResponse", "toolCalls"),
    ("runCommand", "exitCode"),
    ("runCommand", "combinedOutput", "full"),
    ("generic", "args"),
    ("generic", "result", "result"),
    ("userInput", "items"),
    ("errorMessage", "error", "shortError"),
    ("checkpoint", "userIntent"),
    ("requestedInteraction", "askQuestion", "questions"),
]


def with_value(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    step: dict[str, Any] = {
        "type": "CORTEX_STEP_TYPE_RUN_COMMAND",
        "status": "CORTEX_STEP_STATUS_WAITING",
        "metadata": {"toolCall": {"name": "run_command", "argumentsJson": "{}"}},
        "runCommand": {"commandLine": "ls"},
    }
    node = step
    for key in path[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            return step
    node[path[-1]] = value
    return step


@pytest.mark.parametrize("slot", STEP_SLOTS, ids=".".join)
def test_rpc_step_decoder_raises_only_decode_error_for_any_value_anywhere(
    slot: tuple[str, ...],
) -> None:
    for name, value in HOSTILE_VALUES.items():
        try:
            step = decode_json_step(with_value(slot, value))
        except DecodeError:
            continue
        assert isinstance(step, Step), name
        printable_json(step.to_json())


def test_rpc_step_decoder_rejects_numbers_it_cannot_count() -> None:
    for value in (float("inf"), float("nan"), 10**5000, 2**64, "²", "1" * 30, [1], True):
        step = with_value(("metadata", "modelUsage", "inputTokens"), value)
        with pytest.raises(DecodeError):
            decode_json_step(step)
    assert decode_json_step(with_value(("metadata", "modelUsage", "inputTokens"), "42")).usage


def test_rpc_created_at_with_non_ascii_digits_reads_as_no_time() -> None:
    # "²" passes str.isdigit() but not int(): this used to raise ValueError.
    step = with_value(("metadata", "createdAt"), "2026-01-01T00:00:00.²³Z")
    assert decode_json_step(step).created_at_ms == 1767225600000


# -- 2. replay: typed outcomes for any file -----------------------------------------------------


def rpc_file(tmp_path: Path, body: bytes) -> Path:
    path = tmp_path / "steps.json"
    planner = (
        b'{"type": "CORTEX_STEP_TYPE_PLANNER_RESPONSE", "plannerResponse": {"response": "ok"}}'
    )
    path.write_bytes(b'{"steps": [' + body + b", " + planner + b"]}")
    return path


@pytest.mark.parametrize("name", sorted(HOSTILE_JSON))
def test_replay_of_an_rpc_capture_skips_the_hostile_step_and_keeps_the_rest(
    tmp_path: Path, name: str
) -> None:
    path = rpc_file(tmp_path, HOSTILE_JSON[name])
    code, out, err = run("replay", str(path), "--format", "steps")
    assert code == 0, err
    steps = [json.loads(line) for line in out.splitlines()]
    assert steps[-1]["text"] == "ok"
    warnings = err.splitlines()
    assert len(warnings) <= 1 and all(w.startswith("warning: step 0: skipped") for w in warnings)


@pytest.mark.parametrize("name", sorted(HOSTILE_JSON))
def test_replay_of_stream_json_skips_the_hostile_line_and_keeps_the_rest(
    tmp_path: Path, name: str
) -> None:
    good = (FIXTURES / "stream-json" / "simple-thinking.ndjson").read_bytes()
    lines = good.splitlines(keepends=True)
    path = tmp_path / "capture.ndjson"
    path.write_bytes(lines[0] + HOSTILE_JSON[name] + b"\n" + b"".join(lines[1:]))
    code, out, err = run("replay", str(path))
    assert code == 0, err
    assert json.loads(out.splitlines()[-1])["type"] == "done"
    assert len(err.splitlines()) <= 1


def test_one_warning_per_skipped_line_naming_it(tmp_path: Path) -> None:
    good = (FIXTURES / "stream-json" / "simple-thinking.ndjson").read_bytes().splitlines()
    path = tmp_path / "capture.ndjson"
    bad = [b"{", b'{"event": "step_update", "step_update": {"step_index": NaN}}', b"[1]"]
    path.write_bytes(b"\n".join([good[0], bad[0], good[1], bad[1], bad[2], *good[2:]]) + b"\n")
    code, _, err = run("replay", str(path), "--format", "steps", "--turn", "all")
    assert code == 0
    warnings = err.splitlines()
    assert [w.split(":")[1].strip() for w in warnings] == ["line 2", "line 4", "line 5"]


def test_a_single_step_with_hostile_numbers_is_a_warning_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "step.json"
    path.write_text(
        '{"type": "CORTEX_STEP_TYPE_PLANNER_RESPONSE", "metadata": {"modelUsage": '
        '{"inputTokens": "99999999999999999999999"}}, "plannerResponse": {"response": "x"}}'
    )
    code, _, err = run("replay", str(path))
    assert code == 2 and "warning: step 0: skipped" in err and "holds no turns" in err


@pytest.mark.parametrize(
    "content",
    [b"[1,", b'{"steps": [', b'{"steps": [{}] } trailing', b'["abc', b"\xff\xfe[]", b"[" * 5000],
    ids=["truncated", "open", "trailing", "string", "bom-ish", "deep"],
)
def test_replay_of_broken_json_structure_exits_2(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "capture.json"
    path.write_bytes(content)
    code, out, err = run("replay", str(path))
    assert code == 2 and out == "" and err.startswith("agy-provider: ")


def test_replay_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    # A child process: if replay opened the FIFO blocking, it would wait for a writer forever.
    result = subprocess.run(
        [sys.executable, "-m", "agy_provider.cli", "replay", str(fifo)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
    assert "not a regular file" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/null", "."])
def test_replay_refuses_devices_and_directories(target: str) -> None:
    if not os.path.exists(target):
        pytest.skip(f"{target} does not exist here")
    code, _, err = run("replay", target)
    assert code == 2 and "not a regular file" in err


def test_replay_of_an_unreadable_file_exits_2(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    path = tmp_path / "locked.json"
    path.write_text("[]")
    path.chmod(0)
    code, _, err = run("replay", str(path))
    assert code == 2 and "cannot read" in err


def test_sqlite_magic_with_garbage_pages_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 64)
    code, out, err = run("replay", str(path))
    assert code == 2 and out == "" and err.startswith("agy-provider: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["garbage.db"]


def test_fixture_with_garbage_pages_exits_2(tmp_path: Path) -> None:
    data = bytearray((FIXTURES / "db" / "two-turn.db").read_bytes())
    data[4096:] = bytes(len(data) - 4096)  # every page after the first zeroed
    path = tmp_path / "zeroed.db"
    path.write_bytes(bytes(data))
    code, _, err = run("replay", str(path), "--turn", "all")
    assert code in (0, 2) and "Traceback" not in err
    assert code == 2 or err  # unreadable, or readable with a warning for what was lost


def test_regression_schema_that_is_not_utf8_exits_2(tmp_path: Path) -> None:
    # Found by the replay fuzz target: one byte of corrupt-row.db set to 0x80 lands in the
    # schema text, and sqlite3 raises UnicodeDecodeError (not sqlite3.Error) on first use.
    data = bytearray((FIXTURES / "db" / "corrupt-row.db").read_bytes())
    data[3847] = 0x80
    path = tmp_path / "mutated.db"
    path.write_bytes(bytes(data))
    code, _, err = run("replay", str(path))
    assert code == 2 and "not a readable" in err and "utf-8" in err


def hostile_columns_db(tmp_path: Path, *, schema: str | None = None) -> Path:
    """two-turn.db with rows whose integer columns hold text, a blob, a real, an infinity."""
    path = tmp_path / "columns.db"
    shutil.copy(FIXTURES / "db" / "two-turn.db", path)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=DELETE")
    payload = conn.execute("SELECT step_payload FROM steps WHERE idx = 2").fetchone()[0]
    for idx, step_type, status in [
        (10, "planner", 3),
        (11, 15, b"\x01\x02"),
        (12, 1e999, 3),
        (13, 15, "7" * 5000),
        (14, 15.5, 3),
    ]:
        conn.execute(
            "INSERT INTO steps (idx, step_type, status, step_payload) VALUES (?, ?, ?, ?)",
            (idx, step_type, status, payload),
        )
    conn.commit()
    conn.close()
    return path


def test_rows_with_non_integer_columns_are_skipped_with_a_warning_each(tmp_path: Path) -> None:
    path = hostile_columns_db(tmp_path)
    code, out, err = run("replay", str(path), "--format", "steps", "--turn", "all")
    assert code == 0, err
    assert "Traceback" not in err
    indexes = [json.loads(line)["index"] for line in out.splitlines()]
    assert indexes[:8] == list(range(8))  # every real row survives
    skipped = [line for line in err.splitlines() if "skipped" in line]
    # Text, a blob, an infinity, 5,000 digits or 15.5 where an integer belongs: each row is either
    # skipped with exactly one warning naming it, or read (database.py may read an odd column as
    # 0) - never both, never a traceback.
    for idx in (10, 11, 12, 13, 14):
        warned = sum(f"step {idx}:" in line for line in skipped)
        assert (idx in indexes) != (warned == 1), (idx, err)
        assert warned <= 1


def test_text_payload_that_is_not_utf8_skips_only_that_row(tmp_path: Path) -> None:
    path = tmp_path / "text.db"
    shutil.copy(FIXTURES / "db" / "two-turn.db", path)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.execute(
        "INSERT INTO steps (idx, step_type, status, step_payload) "
        "VALUES (20, 15, 3, CAST(x'ff fe 41' AS TEXT))".replace(" fe ", "fe")
    )
    conn.commit()
    conn.close()
    code, out, err = run("replay", str(path), "--format", "steps", "--turn", "all")
    assert code == 0, err
    assert len(out.splitlines()) >= 8


# -- side files: a replayed database never grows or changes a -wal or -shm ----------------------


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


def wal_copy(tmp_path: Path, *, with_shm: bool) -> Path:
    """two-turn.db plus a -wal holding one more turn (and its -shm if asked), as agy leaves it."""
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(FIXTURES / "db" / "two-turn.db", live / "c.db")
    writer = sqlite3.connect(live / "c.db")
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    rows = writer.execute(
        "SELECT step_type, status, step_payload FROM steps WHERE idx IN (4, 7) ORDER BY idx"
    ).fetchall()
    for idx, row in zip((8, 9), rows, strict=True):
        writer.execute(
            "INSERT INTO steps (idx, step_type, status, step_payload) VALUES (?, ?, ?, ?)",
            (idx, *row),
        )
    writer.commit()
    saved = tmp_path / "saved"
    saved.mkdir()
    names = ["c.db", "c.db-wal"] + (["c.db-shm"] if with_shm else [])
    for name in names:  # copied while the writer is open, as a backup of a live folder would be
        shutil.copy(live / name, saved / name)
    writer.close()
    return saved / "c.db"


@pytest.mark.parametrize("with_shm", [False, True], ids=["wal", "wal+shm"])
def test_replay_with_a_wal_reads_it_and_changes_nothing_beside_the_file(
    tmp_path: Path, with_shm: bool
) -> None:
    path = wal_copy(tmp_path, with_shm=with_shm)
    before = snapshot(path.parent)
    for fmt in ("events", "steps", "transcript", "markdown"):
        code, out, err = run("replay", str(path), "--format", fmt, "--turn", "all")
        assert code == 0, err
    assert snapshot(path.parent) == before
    # The -wal's extra turn was read: three turns, not the two the main file holds.
    code, out, _ = run("replay", str(path), "--turn", "all")
    assert [json.loads(line)["type"] for line in out.splitlines()].count("start") == 3


def test_replay_without_a_wal_creates_no_side_files(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    shutil.copy(FIXTURES / "db" / "tool-run.db", path)
    before = snapshot(tmp_path)
    for fmt in ("events", "steps", "transcript", "markdown"):
        assert run("replay", str(path), "--format", fmt, "--turn", "all")[0] == 0
    assert snapshot(tmp_path) == before


# -- text exact: only \n ends a line -----------------------------------------------------------


def test_stream_json_text_keeps_line_separators_and_carriage_returns(tmp_path: Path) -> None:
    text = "one\u2028two\u2029three\u0085four\rfive\x0bsix\x0cseven\x1cend"
    events = [
        {"event": "init", "conversation_id": "c"},
        {
            "event": "step_update",
            "step_update": {"step_index": 0, "state": "DONE", "step_type": "user_input"},
        },
        {
            "event": "step_update",
            "step_update": {
                "step_index": 1,
                "state": "ACTIVE",
                "step_type": "agent_response",
                "text_delta": text[:9],
            },
        },
        {
            "event": "step_update",
            "step_update": {
                "step_index": 1,
                "state": "DONE",
                "step_type": "agent_response",
                "text_delta": text[9:],
            },
        },
        {"event": "result", "result": {"status": "SUCCESS", "response": text}},
    ]
    path = tmp_path / "capture.ndjson"
    # ensure_ascii=False: U+2028, U+2029 and U+0085 appear raw inside the lines, as Go writes them.
    path.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events))
    assert "\u2028" in path.read_text()
    code, out, err = run("replay", str(path))
    assert code == 0 and not err
    assert out.splitlines() == out.split("\n")[:-1]  # U+2028 and U+0085 are escaped in JSON
    done = json.loads(out.split("\n")[-2])
    assert done["message"]["content"][-1]["text"] == text


# -- terminal control characters ----------------------------------------------------------------

CONTROLS = "bell\x07 esc\x1b[2J back\x08 cr\r del\x7f csi\x9b31m nul\x00 osc\x1b]0;pwned\x07"


def test_printable_neutralises_every_control_but_tab_and_newline() -> None:
    shown = printable(CONTROLS + "\ttab\nline")
    assert not any(0x00 <= ord(c) < 0x20 and c not in "\t\n" for c in shown)
    assert not any(0x7F <= ord(c) <= 0x9F for c in shown)
    assert "␛[2J" in shown and "␇" in shown and "<U+009B>" in shown
    assert shown.endswith("\ttab\nline")
    assert printable("plain text, ünïcode") == "plain text, ünïcode"


def controlled_capture(tmp_path: Path) -> Path:
    steps = [
        {
            "type": "CORTEX_STEP_TYPE_USER_INPUT",
            "userInput": {"items": [{"text": "hi" + CONTROLS}]},
        },
        {
            "type": "CORTEX_STEP_TYPE_PLANNER_RESPONSE",
            "status": "CORTEX_STEP_STATUS_DONE",
            "metadata": {"sourceTrajectoryStepInfo": {"stepIndex": 1}},
            "plannerResponse": {
                "response": "answer " + CONTROLS + "\n```\nfence",
                "thinking": CONTROLS,
            },
        },
        {
            "type": "CORTEX_STEP_TYPE_CHECKPOINT",
            "status": "CORTEX_STEP_STATUS_DONE",
            "metadata": {"sourceTrajectoryStepInfo": {"stepIndex": 2}},
            "checkpoint": {"userIntent": "title " + CONTROLS},
        },
    ]
    path = tmp_path / "controls.json"
    path.write_text(json.dumps({"steps": steps}))
    return path


@pytest.mark.parametrize("fmt", ["transcript", "markdown"])
def test_transcript_and_markdown_carry_no_control_characters(tmp_path: Path, fmt: str) -> None:
    code, out, err = run("replay", str(controlled_capture(tmp_path)), "--format", fmt)
    assert code == 0, err
    assert not any(ord(c) < 0x20 and c not in "\t\n" for c in out)
    assert not any(0x7F <= ord(c) <= 0x9F for c in out)
    assert "␛[2J" in out  # visible, not dropped


def test_colour_transcript_has_only_our_own_escapes() -> None:
    message = AssistantMessage(
        content=(ThinkingContent(thinking=CONTROLS), TextContent(text=CONTROLS)),
        api="agy",
        provider="agy",
        model="m\x1b[5m",
        error_message="boom\x1b[2J",
        stop_reason="error",
        timestamp=0,
    )
    lines = list(transcript([(1, "user\x1b]0;x\x07", message)], colour=True, title="t\x9b"))
    ours = {"\x1b[2m", "\x1b[1m", "\x1b[31m", "\x1b[36m", "\x1b[0m"}
    for line in lines:
        stripped = line
        for code in ours:
            stripped = stripped.replace(code, "")
        assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in stripped), line


def test_markdown_fences_outlast_backticks_in_a_tool_run() -> None:
    tool_run = "▸ run_command cat x\n  ```\n  ````\n  exit 0"
    message = AssistantMessage(
        content=(ThinkingContent(thinking=tool_run),),
        api="agy",
        provider="agy",
        model="m",
        stop_reason="stop",
        timestamp=0,
    )
    lines = list(markdown([(1, "", message)]))
    opening = next(line for line in lines if line.endswith("text"))
    fence = opening.removesuffix("text")
    assert len(fence) == 5 and lines[lines.index(opening) + 2] == fence


@pytest.mark.parametrize("fmt", ["events", "steps"])
def test_json_lines_stay_valid_and_escape_c1_and_del(tmp_path: Path, fmt: str) -> None:
    code, out, _ = run(
        "replay", str(controlled_capture(tmp_path)), "--format", fmt, "--turn", "all"
    )
    assert code == 0
    assert not any(0x7F <= ord(c) <= 0x9F for c in out)
    decoded = [json.loads(line) for line in out.splitlines()]
    assert any(CONTROLS in text for text in strings(decoded))  # exact text, escaped in JSON


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [text for item in value for text in strings(item)]
    return []


# -- memory stays linear in the input ------------------------------------------------------------

MEASURE = textwrap.dedent(
    """
    import os, sys, tracemalloc
    from agy_provider.cli import main
    tracemalloc.start()
    with open(os.devnull, "w") as out:
        code = main(["replay", sys.argv[1], "--format", sys.argv[2], "--turn", "all"], out=out)
    print(code, tracemalloc.get_traced_memory()[1])
    """
)


def peaks(paths: list[Path], fmt: str = "events") -> list[int]:
    """The peak traced memory of replaying each of `paths`, one child process each, side by side."""
    children = [
        subprocess.Popen(
            [sys.executable, "-c", MEASURE, str(path), fmt],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for path in paths
    ]
    used = []
    for child in children:
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0, err
        code, peak = out.split()
        assert code == "0", err
        used.append(int(peak))
    return used


def stream_json_capture(path: Path, deltas: int) -> int:
    piece = ("word " * 40)[:135]
    with path.open("w") as handle:
        handle.write('{"event":"init","conversation_id":"c"}\n')
        handle.write(
            '{"event":"step_update","step_update":{"step_index":0,"state":"DONE",'
            '"step_type":"user_input"}}\n'
        )
        line = json.dumps(
            {
                "event": "step_update",
                "step_update": {
                    "step_index": 1,
                    "state": "ACTIVE",
                    "step_type": "agent_response",
                    "text_delta": piece,
                },
            }
        )
        handle.write((line + "\n") * deltas)
        handle.write('{"event":"result","result":{"status":"SUCCESS","response":""}}\n')
    return path.stat().st_size


def rpc_capture(path: Path, turns: int) -> int:
    steps = []
    for t in range(turns):
        steps += [
            {
                "type": "CORTEX_STEP_TYPE_USER_INPUT",
                "metadata": {"sourceTrajectoryStepInfo": {"stepIndex": 3 * t}},
                "userInput": {"items": [{"text": f"request {t}"}]},
            },
            {
                "type": "CORTEX_STEP_TYPE_PLANNER_RESPONSE",
                "status": "CORTEX_STEP_STATUS_DONE",
                "metadata": {"sourceTrajectoryStepInfo": {"stepIndex": 3 * t + 1}},
                "plannerResponse": {"response": "lorem ipsum " * 170, "thinking": "hmm " * 200},
            },
            {
                "type": "CORTEX_STEP_TYPE_RUN_COMMAND",
                "status": "CORTEX_STEP_STATUS_DONE",
                "metadata": {
                    "sourceTrajectoryStepInfo": {"stepIndex": 3 * t + 2},
                    "toolCall": {"name": "run_command", "argumentsJson": "{}"},
                },
                "runCommand": {"commandLine": "ls", "combinedOutput": {"full": "file\n" * 300}},
            },
        ]
    path.write_text(json.dumps({"steps": steps}))
    return path.stat().st_size


def database(path: Path, turns: int) -> int:
    from agy_provider.sim.bulk import write_conversation

    write_conversation(path, "c0ffee00-0000-4000-8000-000000000000", turns=turns, text_size=2000)
    return path.stat().st_size


@pytest.mark.slow
@pytest.mark.parametrize(
    ("make", "small", "large"),
    [(stream_json_capture, 4000, 16000), (rpc_capture, 300, 1200), (database, 300, 1200)],
    ids=["stream-json-20k-deltas", "rpc-steps", "database"],
)
def test_replay_memory_grows_at_most_3x_the_file(
    tmp_path: Path, make: Any, small: int, large: int
) -> None:
    # Two sizes, one child process each (run side by side): the growth of the peak between them, divided by the
    # growth of the file, is what replay costs per byte of input (the constant cancels out).
    paths = [tmp_path / f"input-{n}" for n in (small, large)]
    sizes = [make(path, n) for path, n in zip(paths, (small, large), strict=True)]
    used = peaks(paths)
    assert sizes[1] > 3 * sizes[0]
    slope = (used[1] - used[0]) / (sizes[1] - sizes[0])
    assert slope <= 3.0, f"{slope:.2f} bytes of memory per byte of file ({sizes}, {used})"


# -- the row decoder's JSON: tool-call arguments inside a protobuf row ---------------------------


@pytest.mark.parametrize(
    "arguments",
    ["[" * 3000, '{"a": NaN}', '{"a": 1e400}', '{"a": "\\ud800"}', '{"a": ' + "9" * 5000 + "}"],
    ids=["deep", "nan", "huge-float", "lone-surrogate", "5000-digits"],
)
def test_row_with_hostile_tool_arguments_decodes_to_a_printable_step(arguments: str) -> None:
    from agy_provider.agy.rows import decode_step_row
    from agy_provider.sim import descriptors as pb

    step = pb.Step()
    step.type = pb.STEP_TYPE["CORTEX_STEP_TYPE_RUN_COMMAND"]
    step.status = pb.STEP_STATUS["CORTEX_STEP_STATUS_DONE"]
    step.metadata.tool_call.name = "run_command"
    step.metadata.tool_call.arguments_json = arguments
    step.run_command.command_line = "ls"
    decoded = decode_step_row(0, step.type, step.status, step.SerializeToString())
    assert decoded.tool is not None
    printable_json(decoded.to_json())


# -- locating a capture's steps without parsing it whole agrees with parsing it whole ------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_json_values, max_size=5),
    st.dictionaries(st.sampled_from(["a", "steps", "x"]), _json_values, max_size=3),
    st.booleans(),
    st.sampled_from(["", " ", "\n\t", "  \r\n"]),
)
def test_locate_array_agrees_with_a_full_parse(
    steps: list[Any], extra: dict[str, Any], bare: bool, space: str
) -> None:
    document: Any = steps if bare else {**extra, "steps": steps}
    data = json.dumps(document, indent=len(space) or None, ensure_ascii=bool(space)).encode()
    spans = jsontext.locate_array(space.encode() + data + space.encode(), "steps")
    assert spans is not None
    shifted = space.encode() + data
    assert [json.loads(shifted[s:e]) for s, e in spans] == steps


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60) | st.text(max_size=40).map(str.encode))
def test_locate_array_on_any_bytes_is_spans_none_or_decode_error(data: bytes) -> None:
    try:
        spans = jsontext.locate_array(data, "steps")
    except DecodeError:
        return
    for start, end in spans or []:
        assert 0 <= start < end <= len(data)


def test_markdown_thinking_cannot_close_its_details_block() -> None:
    message = AssistantMessage(
        content=(ThinkingContent(thinking="a </details> b </DETAILS>"), TextContent(text="answer")),
        api="agy",
        provider="agy",
        model="m",
        stop_reason="stop",
        timestamp=0,
    )
    lines = list(markdown([(1, "", message)]))
    assert sum("</details" in line.lower() for line in lines) == 1
    assert "a &lt;/details> b &lt;/DETAILS>" in lines


@pytest.mark.parametrize(
    "chunks", ["[" * 3000, '[{"TargetContent": NaN}]', '[{"TargetContent": "\\ud800"}]', "{"]
)
def test_edit_with_hostile_replacement_chunks_replays(tmp_path: Path, chunks: str) -> None:
    # Found reviewing diffs.py: its json.loads of a ReplacementChunks string let RecursionError
    # out of the assembler, so replay ended in a traceback.
    steps = [
        {"type": "CORTEX_STEP_TYPE_USER_INPUT", "userInput": {"items": [{"text": "edit"}]}},
        {
            "type": "CORTEX_STEP_TYPE_GENERIC",
            "status": "CORTEX_STEP_STATUS_DONE",
            "metadata": {
                "sourceTrajectoryStepInfo": {"stepIndex": 1},
                "toolCall": {"name": "multi_replace_file_content"},
            },
            "generic": {
                "args": {"TargetFile": "/tmp/x", "ReplacementChunks": chunks},
                "result": {"result": "ok"},
            },
        },
    ]
    path = tmp_path / "edit.json"
    path.write_text(json.dumps({"steps": steps}))
    for fmt in ("events", "transcript", "markdown"):
        code, out, err = run("replay", str(path), "--format", fmt)
        assert code == 0, err
        out.encode("utf-8")


# -- regression: an integer too large for a float where agy writes a number -------------------

HUGE_INT = "9" * 400  # parses as a Python int; float() of it raises OverflowError


@pytest.mark.parametrize(
    "field",
    ["result.duration_seconds", "result.num_turns", "result.usage", "step.duration_seconds"],
)
def test_replay_of_stream_json_with_a_huge_integer_does_not_overflow(
    tmp_path: Path, field: str
) -> None:
    """`duration_seconds` of 400 digits once crashed replay with OverflowError at math.isfinite."""
    result: dict[str, Any] = {
        "conversation_id": "c1",
        "status": "SUCCESS",
        "response": "hi",
        "duration_seconds": 1.5,
        "num_turns": 1,
    }
    step: dict[str, Any] = {
        "conversation_id": "c1",
        "step_index": 1,
        "state": "DONE",
        "step_type": "agent_response",
        "text_delta": "hi",
    }
    if field == "result.usage":
        result["usage"] = {"input_tokens": 1, "output_tokens": 1}
    target, key = (result, field.split(".")[1]) if field.startswith("result") else (step, "x")
    if field == "step.duration_seconds":
        key = "duration_seconds"
    lines = [
        '{"event":"init","conversation_id":"c1","init":{}}',
        json.dumps({"event": "step_update", "step_update": step}),
        json.dumps({"event": "result", "result": result}),
    ]
    placeholder = '"__HUGE__"'
    target[key] = "__HUGE__" if field != "result.usage" else {"input_tokens": "__HUGE__"}
    lines[1] = json.dumps({"event": "step_update", "step_update": step})
    lines[2] = json.dumps({"event": "result", "result": result})
    path = tmp_path / "huge.ndjson"
    path.write_text("\n".join(line.replace(placeholder, HUGE_INT) for line in lines) + "\n")
    code, out, err = run("replay", str(path))
    assert code == 0, err
    assert "Traceback" not in err
    assert json.loads(out.splitlines()[-1])["type"] == "done"


def test_finite_number_is_total() -> None:
    assert jsontext.finite_number(int(HUGE_INT)) is None
    assert jsontext.finite_number(float("inf")) is None
    assert jsontext.finite_number(True) is None
    assert jsontext.finite_number("1") is None
    assert jsontext.finite_number(3) == 3.0


def test_json_result_document_with_a_huge_duration_replays(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_text(
        '{"conversation_id":"c1","status":"SUCCESS","response":"hi","num_turns":1,'
        f'"duration_seconds":{HUGE_INT}}}'
    )
    code, out, err = run("replay", str(path))
    assert code == 0, err
    assert json.loads(out.splitlines()[-1])["type"] == "done"


def test_a_tool_argument_with_too_many_digits_to_print_is_shown_cut() -> None:
    # Found by test_fuzz_stream_json_events: str() of an int past 4,300 digits raises ValueError.
    from agy_provider.agy.streamjson_values import plain

    assert plain({"n": 10**4301, "m": 10**30}) == {"n": "…", "m": "1" + "0" * 30 + "…"}


def test_a_usage_window_named_with_a_lone_surrogate_prints_as_json() -> None:
    """Hypothesis found `/usage` bodies whose window name (a key) is a lone surrogate, which no
    JSON encoder can print; the name is cleaned like every other text from agy."""
    from agy_provider.agy.quota import parse_usage

    for body in ({"\ud800": 0.5}, {"buckets": [{"name": "w\udc00", "remaining_fraction": 0.2}]}):
        (bucket,) = parse_usage(body, now=1e9)
        json.dumps(bucket.to_json(), ensure_ascii=False).encode("utf-8")
        assert "\ufffd" in bucket.window
