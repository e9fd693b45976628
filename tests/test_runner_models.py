"""Runner argv, model discovery parsing and database discovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from agy_provider.agy.models import model_arguments
from agy_provider.agy.models import parse_models
from agy_provider.errors import AgyNotFoundError
from agy_provider.errors import UsageError
from agy_provider.live.runner import MAX_ARG_BYTES
from agy_provider.live.runner import TurnRequest
from agy_provider.live.runner import build_argv
from agy_provider.live.runner import find_agy
from agy_provider.live.runner import go_duration


def test_argv_prompt_follows_p_and_values_are_validated(tmp_path: Path) -> None:
    request = TurnRequest(
        prompt="-rf /",
        cwd=str(tmp_path),
        agy_bin="/bin/agy",
        model_args=["--model", "gemini-3.8-flash", "--effort", "high"],
        mode="accept-edits",
        skip_permissions=True,
        conversation_id="2399249c-4a48-40f1-bf3b-4c6e5d3a5a0e",
        print_timeout=660,
        csrf_token="abc123",
    )
    argv = build_argv(request)
    assert argv[:3] == ["/bin/agy", "--input-format", "stream-json"]  # "-rf /" never becomes a flag
    assert build_argv(TurnRequest(prompt="hi -rf", cwd=".", agy_bin="a"))[:3] == [
        "a",
        "-p",
        "hi -rf",
    ]
    assert argv[3:7] == ["--model", "gemini-3.8-flash", "--effort", "high"]
    assert argv[argv.index("--mode") + 1] == "accept-edits"
    # agy states its conversation id on stream-json's first line; stdin turns require it (1.2.x).
    assert argv[argv.index("--output-format") + 1] == "stream-json"
    plain = TurnRequest(prompt="x" * (MAX_ARG_BYTES + 1), cwd=".", agy_bin="a", output_format="")
    assert build_argv(plain)[build_argv(plain).index("--output-format") + 1] == "stream-json"
    assert "--output-format" not in build_argv(
        TurnRequest(prompt="hi", cwd=".", agy_bin="a", output_format="")
    )
    # --print-timeout is always explicit (1.2.x would otherwise wait forever), and must be sane.
    assert "--print-timeout" in build_argv(TurnRequest(prompt="hi", cwd=".", agy_bin="a"))
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(UsageError):
            build_argv(TurnRequest(prompt="hi", cwd=".", agy_bin="a", print_timeout=bad))
    assert "--dangerously-skip-permissions" in argv
    assert argv[argv.index("--conversation") + 1] == request.conversation_id
    assert argv[argv.index("--add-dir") + 1] == str(tmp_path)
    assert argv[argv.index("--print-timeout") + 1] == "11m0s"
    assert argv[-1] == "--csrf_token=abc123"
    with pytest.raises(UsageError):
        build_argv(TurnRequest(prompt="x", cwd=".", agy_bin="a", conversation_id="--evil"))
    big = build_argv(TurnRequest(prompt="x" * (MAX_ARG_BYTES + 1), cwd=".", agy_bin="a"))
    assert big[:3] == ["a", "--input-format", "stream-json"] and "-p" not in big
    assert all(len(a) < 1000 for a in big)  # the prompt travels through stdin instead
    with pytest.raises(UsageError):
        build_argv(TurnRequest(prompt="a\x00b", cwd=".", agy_bin="a"))
    with pytest.raises(UsageError):
        build_argv(TurnRequest(prompt="x", cwd=".", agy_bin="a", mode="yolo"))
    with pytest.raises(UsageError):
        build_argv(TurnRequest(prompt="x", cwd=".", agy_bin="a", csrf_token="a;b"))


def test_go_durations() -> None:
    assert go_duration(0.2) == "1s"
    assert go_duration(90) == "1m30s"
    assert go_duration(3661) == "1h1m1s"


def test_find_agy_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(AgyNotFoundError, match="agy-sim"):
        find_agy("definitely-not-agy-here")
    with pytest.raises(AgyNotFoundError, match="not an executable"):
        find_agy(str(tmp_path / "agy"))


def test_models_parse_the_1_1_25_format(reference: Path) -> None:
    models = parse_models((reference / "models" / "agy-1.1.25-models.txt").read_text())
    by_id = {m.id: m for m in models}
    assert by_id["gemini-3.8-flash"].efforts == ("high", "medium", "low")
    assert by_id["gemini-3.8-flash"].name == "Gemini 3.8 Flash"
    assert by_id["gemini-3.1-pro"].efforts == ("high", "low")
    assert by_id["claude-sonnet-4-6"].efforts == ()
    assert "gpt-oss-120b-medium" in by_id  # no effort tiers for gpt-oss
    assert "Fetching" not in " ".join(by_id)


def test_models_ignore_log_lines_and_old_formats() -> None:
    out = "I1130 12:00:00 log line\nYou are not logged into Antigravity\ngemini-2.5-pro\nclaude-opus-4-6-thinking\n"
    assert [m.id for m in parse_models(out)] == ["gemini-2.5-pro", "claude-opus-4-6-thinking"]


def test_model_arguments() -> None:
    models = parse_models(
        "gemini-3.1-pro-high\tG (High)\ngemini-3.1-pro-low\tG (Low)\nclaude-sonnet-4-6\tC\n"
    )
    assert model_arguments("gemini-3.1-pro", "low", models) == [
        "--model",
        "gemini-3.1-pro",
        "--effort",
        "low",
    ]
    assert model_arguments("claude-sonnet-4-6", "high", models) == ["--model", "claude-sonnet-4-6"]
    assert model_arguments("gemini-3.1-pro-high", "low", models) == [
        "--model",
        "gemini-3.1-pro-high",
    ]
    assert model_arguments("", "high") == []
    with pytest.raises(UsageError):
        model_arguments("gemini-3.1-pro", "medium", models)
    with pytest.raises(UsageError):
        model_arguments("--evil", "")


def test_chat_asks_the_person_at_the_terminal() -> None:
    from agy_provider.agy.step import PermissionRequest
    from agy_provider.agy.step import Question
    from agy_provider.agy.step import QuestionOption
    from agy_provider.agy.step import Step
    from agy_provider.agy.step import StepKind
    from agy_provider.agy.step import StepStatus
    from agy_provider.cli.chat_turn import TerminalDecisions
    from agy_provider.contract.turn import TurnContext
    from agy_provider.store.config import Config

    said: list[str] = []
    replies = iter(["y", "n", "2, 3", "something else"])
    asked: list[str] = []

    def ask(prompt: str) -> str:
        asked.append(prompt)
        return next(replies)

    terminal = TerminalDecisions(ask, said.append)
    # The step agy waits on and the turn: the terminal asks from the request alone.
    step = Step(index=3, kind=StepKind.TOOL, status=StepStatus.WAITING)
    turn = TurnContext("", "hi", ".", Config(), "auto", "ask")
    request = PermissionRequest(action="command", target="pwd", description="Running pwd")
    assert terminal.decide_permission(request, step, turn) is True
    assert "command `pwd` (Running pwd)" in asked[0]
    assert terminal.decide_permission(request, step, turn) is False
    question = Question(
        "Pick", (QuestionOption("1", "a"), QuestionOption("2", "b"), QuestionOption("3", "c"))
    )
    assert terminal.answer_question([question], step, turn) == [
        {"question": "Pick", "selectedOptionIds": ["2", "3"]}
    ]
    assert terminal.answer_question([question], step, turn) == [
        {"question": "Pick", "selectedOptionIds": [], "writeInResponse": "something else"}
    ]
    assert "  2. b\n" in said


def test_models_from_agy_sim_and_the_cli(tmp_path: Path) -> None:
    import io
    import json

    from live_helpers import agy_sim_path

    from agy_provider.agy.models import list_models
    from agy_provider.cli import main

    models = {m.id: m for m in list_models(agy_sim_path())}
    assert models["gemini-3.8-flash"].efforts == ("high", "medium", "low")
    out = io.StringIO()
    assert main(["models", "--agy-bin", agy_sim_path(), "--json"], out=out, err=io.StringIO()) == 0
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert {"id": "gemini-3.1-pro", "name": "Gemini 3.1 Pro", "efforts": ["high", "low"]} in rows
    err = io.StringIO()
    assert main(["models", "--agy-bin", str(tmp_path / "nope")], out=io.StringIO(), err=err) == 1
    assert "agy-sim" in err.getvalue()


def test_models_of_agy_1_0_are_explained_not_blamed_on_sign_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from live_helpers import agy_sim_path

    from agy_provider.agy.models import display_names_only
    from agy_provider.agy.models import list_models
    from agy_provider.errors import SourceError

    # agy-sim imitating 1.0.16 prints display names only, as agy before 1.1.5 did.
    monkeypatch.setenv("AGY_SIM_VERSION", "1.0.16")
    with pytest.raises(SourceError) as caught:
        list_models(agy_sim_path())
    message = str(caught.value)
    assert "display names only" in message and "upgrade agy to ≥1.1.5" in message
    assert "signed in" not in message
    # Bare slugs (1.1.5–1.1.24) still parse.
    monkeypatch.setenv("AGY_SIM_VERSION", "1.1.20")
    assert "gemini-3.8-flash" in {m.id for m in list_models(agy_sim_path())}
    # Log lines and the sign-in notice are neither slugs nor display names.
    assert display_names_only("I1130 12:00:00 x\nYou are not logged into Antigravity\n") == []
    assert display_names_only("Gemini 3 Flash\nGPT-OSS 120B (Medium)\n") == [
        "Gemini 3 Flash",
        "GPT-OSS 120B (Medium)",
    ]


def test_effort_max_is_passed_through() -> None:
    models = parse_models("gemini-3.1-pro-high\tG (High)\ngemini-3.1-pro-low\tG (Low)\n")
    assert model_arguments("gemini-3.1-pro", "max", models) == [
        "--model",
        "gemini-3.1-pro",
        "--effort",
        "max",
    ]
    assert model_arguments("claude-sonnet-4-6", "max") == ["--model", "claude-sonnet-4-6"]
