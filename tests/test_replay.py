"""`agy-provider replay` over every fixture, the reference captures, and bad input."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES
from conftest import ROOT

from agy_provider.cli import build_parser
from agy_provider.cli import main

DBS = sorted((FIXTURES / "db").glob("*.db"))
RPC = sorted((FIXTURES / "rpc").glob("*.json"))
NDJSON = sorted((FIXTURES / "stream-json").glob("*.ndjson"))
ALL = DBS + RPC + NDJSON


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def events(path: Path, turn: str = "last") -> list[dict[str, Any]]:
    code, out, _ = run("replay", str(path), "--turn", turn)
    assert code == 0
    return [json.loads(line) for line in out.splitlines()]


def test_fixtures_exist() -> None:
    assert len(DBS) >= 8 and len(RPC) >= 8 and len(NDJSON) >= 8


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_fixture_replays_in_every_format(path: Path) -> None:
    replayed = events(path, "all")
    assert replayed[0] == {"type": "start"}
    assert replayed[-1]["type"] in ("done", "error")
    assert all("partial" not in e for e in replayed)
    final = replayed[-1].get("message") or replayed[-1]["error"]
    if replayed[-1]["type"] == "error":
        assert final["errorMessage"]
    code, out, _ = run("replay", str(path), "--format", "steps", "--turn", "all")
    assert code == 0
    steps = [json.loads(line) for line in out.splitlines()]
    assert steps and set(steps[0]) == {
        "index",
        "kind",
        "status",
        "text",
        "thinking",
        "tool",
        "result",
        "usage",
        "title",
        "error",
        "conversationId",
    }
    for fmt in ("transcript", "markdown"):
        code, out, _ = run("replay", str(path), "--format", fmt, "--turn", "all")
        assert code == 0 and out.strip()
    markdown = run("replay", str(path), "--format", "markdown", "--turn", "all")[1]
    for block in final["content"]:
        if block["type"] == "text":
            assert block["text"] in markdown


@pytest.mark.parametrize("name", sorted({p.name.split(".")[0] for p in RPC}))
def test_poll_stream_and_database_agree(name: str) -> None:
    """One conversation replays to the same events from every source shape."""
    poll = events(FIXTURES / "rpc" / f"{name}.poll.json", "all")
    stream = events(FIXTURES / "rpc" / f"{name}.stream.json", "all")
    database = events(FIXTURES / "db" / f"{name}.db", "all")

    def strip(es: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for e in es:
            e = json.loads(json.dumps(e))
            for key in ("message", "error"):
                if isinstance(e.get(key), dict):
                    e[key].pop("model"), e[key].pop("timestamp")
            out.append(e)
        return out

    assert strip(poll) == strip(stream)
    if name != "corrupt-row":  # the captures saw row 2 before it was corrupted in the file
        assert strip(database) == strip(poll)


def test_database_bytes_never_change(tmp_path: Path) -> None:
    source = FIXTURES / "db" / "tool-run.db"
    copy = tmp_path / source.name
    copy.write_bytes(source.read_bytes())
    before = hashlib.sha256(copy.read_bytes()).hexdigest()
    for fmt in ("events", "steps", "transcript", "markdown"):
        assert run("replay", str(copy), "--format", fmt)[0] == 0
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [source.name]


def test_corrupt_row_warns_once_and_goes_on() -> None:
    code, out, err = run("replay", str(FIXTURES / "db" / "corrupt-row.db"))
    assert code == 0
    warnings = err.strip().splitlines()
    assert len(warnings) == 1 and warnings[0].startswith("warning: step 2: skipped")
    assert json.loads(out.splitlines()[-1])["type"] == "done"


def test_turn_selection() -> None:
    both = events(FIXTURES / "db" / "two-turn.db", "all")
    assert [e["type"] for e in both].count("start") == 2
    first = events(FIXTURES / "db" / "two-turn.db", "1")
    last = events(FIXTURES / "db" / "two-turn.db")
    assert "".join(e.get("delta", "") for e in first if e["type"] == "text_delta") == "One."
    assert "".join(e.get("delta", "") for e in last if e["type"] == "text_delta") == "Two."
    code, _, err = run("replay", str(FIXTURES / "db" / "two-turn.db"), "--turn", "3")
    assert code == 2 and "has 2 turn(s)" in err


def test_bad_files_exit_2(tmp_path: Path) -> None:
    code, _, err = run("replay", str(tmp_path / "missing.db"))
    assert code == 2 and "missing.db" in err
    junk = tmp_path / "notes.txt"
    junk.write_text("hello\n")
    code, _, err = run("replay", str(junk))
    assert code == 2 and "not an agy" in err
    other = tmp_path / "other.db"
    import sqlite3

    sqlite3.connect(other).execute("CREATE TABLE t(x)").connection.close()
    code, _, err = run("replay", str(other))
    assert code == 2 and "no steps table" in err


def test_reference_stream_json_ends_in_agys_error(reference: Path) -> None:
    replayed = events(reference / "stream-json" / "agy-1.1.17-print-denied-command.ndjson")
    last = replayed[-1]
    assert last["type"] == "error" and last["reason"] == "error"
    assert "user denied permission" in last["error"]["errorMessage"]
    assert (
        last["error"]["usage"]["input"] == 44909 and last["error"]["usage"]["totalTokens"] == 45519
    )


def test_reference_rpc_steps_replay_as_one_turn(reference: Path, tmp_path: Path) -> None:
    steps = [json.loads(p.read_text()) for p in sorted((reference / "rpc-steps").glob("*.json"))]
    capture = tmp_path / "steps.json"
    capture.write_text(json.dumps({"steps": steps}))
    code, out, _ = run("replay", str(capture), "--format", "steps", "--turn", "all")
    assert code == 0
    kinds = {json.loads(line)["kind"] for line in out.splitlines()}
    assert {"user", "assistant", "tool", "checkpoint", "history"} <= kinds


def test_every_command_has_help_and_is_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert isinstance(commands, dict)
    for name, sub in commands.items():
        assert sub.format_help()
        assert f"agy-provider {name}" in readme, f"README does not show `agy-provider {name}`"


def test_stream_json_after_plain_text_lines_replays_with_a_warning_each(tmp_path: Path) -> None:
    # agy prints sign-in errors and notices on stdout before its first event (AGY-FORMATS §2.2).
    capture = tmp_path / "capture.ndjson"
    notes = b"Error: authentication required. Run 'antigravity' to log in, then retry.\nnotice\n"
    capture.write_bytes(notes + (FIXTURES / "stream-json" / "simple-thinking.ndjson").read_bytes())
    code, out, err = run("replay", str(capture))
    assert code == 0
    assert [line.split(":")[1].strip() for line in err.splitlines()] == ["line 1", "line 2"]
    assert json.loads(out.splitlines()[-1])["type"] == "done"


@pytest.mark.parametrize("name", ["two-turn.ndjson", "two-turn.poll.json", "two-turn.db"])
def test_turns_load_in_any_order(name: str) -> None:
    from agy_provider.offline.replay import load_recording

    folder = {"ndjson": "stream-json", "json": "rpc", "db": "db"}[name.rsplit(".", 1)[1]]
    with load_recording(FIXTURES / folder / name) as recording:
        assert recording.turn_count == 2
        answers = []
        for position in (1, 0, 1):
            turn = recording.turn(position)  # a stream-json turn is read lazily: drain it now
            answers.append("".join(s.text for batch in turn.batches for s in batch if s.final))
        assert answers[0] == answers[2] != answers[1]
        assert answers[0] and answers[1]
