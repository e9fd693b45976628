"""AskAntigravity: model aliases against agy's catalog, the kept catalog, refusing to recurse, the
pi tool's arguments, and real turns on agy-sim (async, sync, continued, failed, aborted, the CLI).

Expectations come from the scenario files and the simulator's catalog, never from an earlier run.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from live_helpers import Observed
from live_helpers import agy_sim_path
from live_helpers import leftovers
from live_helpers import scenario_answer

from agy_provider.agy.models import collapse_tiers
from agy_provider.agy.step import Step
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import StepStatus
from agy_provider.agy.step import ToolCall as StepToolCall
from agy_provider.agy.step import ToolResult as StepToolResult
from agy_provider.assembly.tool_runs import render_tool_run
from agy_provider.assembly.tool_runs import tool_run
from agy_provider.errors import SourceError
from agy_provider.errors import UsageError
from agy_provider.hosts.ask import ASK_TOOL_NAME
from agy_provider.hosts.ask import TURN_ENV
from agy_provider.hosts.ask import AskResult
from agy_provider.hosts.ask import ask_antigravity
from agy_provider.hosts.ask import ask_antigravity_sync
from agy_provider.hosts.ask import nested_turn_reason
from agy_provider.hosts.ask_tool import ask_tool
from agy_provider.hosts.ask_tool import run_ask_tool
from agy_provider.live.provider import wait_for_turns
from agy_provider.pi.options import AbortSignal
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ToolCall
from agy_provider.sim.scenario import DEFAULT_CATALOG
from agy_provider.sim.scenario import load_scenario
from agy_provider.store.model_catalog import cached_models
from agy_provider.store.model_catalog import catalog_path
from agy_provider.store.model_catalog import resolve_model

SIM_MODELS = collapse_tiers((m.slug, m.name) for m in DEFAULT_CATALOG)
AGY_PROVIDER = os.path.join(os.path.dirname(sys.executable), "agy-provider")


# --- model names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("alias", "expected"),
    [
        ("flash", "gemini-3.8-flash"),
        ("pro", "gemini-3.1-pro"),
        ("sonnet", "claude-sonnet-4-6"),
        ("opus", "claude-opus-4-6-thinking"),
        ("FLASH", "gemini-3.8-flash"),
    ],
)
def test_aliases_pick_the_newest_model_of_their_family_in_agys_catalog(
    alias: str, expected: str
) -> None:
    assert resolve_model(alias, SIM_MODELS) == expected


def test_an_alias_follows_version_numbers_not_the_listing_order() -> None:
    older_first = collapse_tiers(
        [("gemini-3.6-flash-low", "Gemini 3.6 Flash (Low)"), ("gemini-3.10-flash-low", "x")]
    )
    assert resolve_model("flash", older_first) == "gemini-3.10-flash"


def test_slugs_are_checked_against_the_catalog() -> None:
    assert resolve_model("gemini-3.7-flash", SIM_MODELS) == "gemini-3.7-flash"
    assert resolve_model("gemini-3.1-pro-low", SIM_MODELS) == "gemini-3.1-pro-low"
    assert resolve_model("", SIM_MODELS) == ""
    with pytest.raises(UsageError, match=r"gemini-3\.1-pro-medium.*flash, pro, sonnet, opus"):
        resolve_model("gemini-3.1-pro-medium", SIM_MODELS)  # pro has no medium tier
    no_claude = [m for m in SIM_MODELS if not m.id.startswith("claude")]
    with pytest.raises(UsageError, match="agy lists no opus model"):
        resolve_model("opus", no_claude)


def _counting_agy(folder: Path, *, silent: bool = False) -> tuple[Path, Path]:
    """An agy that counts its runs in a file, then is agy-sim (or prints nothing at all)."""
    counter = folder / "runs"
    binary = folder / "agy"
    body = "exit 0" if silent else f'exec "{agy_sim_path()}" "$@"'
    binary.write_text(f'#!/bin/sh\necho run >> "{counter}"\n{body}\n')
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return binary, counter


def _runs(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def test_agys_models_are_asked_once_per_binary_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_PROVIDER_SESSIONS", str(tmp_path / "state" / "sessions.json"))
    binary, counter = _counting_agy(tmp_path)
    first = cached_models(str(binary))
    assert [m.id for m in first] == [m.id for m in SIM_MODELS]
    assert cached_models(str(binary)) == first
    assert _runs(counter) == 1, "the second listing must come from the kept catalog"
    assert catalog_path().is_file()
    # A changed binary (size or mtime) is asked again; so is a catalog older than max_age.
    os.utime(binary, ns=(1, 1))
    cached_models(str(binary))
    assert _runs(counter) == 2
    cached_models(str(binary), max_age=0)
    assert _runs(counter) == 3


def test_a_failed_listing_is_not_retried_on_every_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_PROVIDER_SESSIONS", str(tmp_path / "sessions.json"))
    binary, counter = _counting_agy(tmp_path, silent=True)
    with pytest.raises(SourceError, match="listed no models"):
        cached_models(str(binary))
    with pytest.raises(SourceError, match="listed no models"):
        cached_models(str(binary))
    assert _runs(counter) == 1


# --- refusing to recurse ---------------------------------------------------------------------


def test_the_turn_marker_in_the_environment_refuses() -> None:
    assert "AGY_PROVIDER_TURN" in nested_turn_reason({TURN_ENV: "1"})


def test_a_process_under_agy_refuses(tmp_path: Path) -> None:
    """A child of a process named `agy` (as agy's run_command children are) is inside a turn."""
    agy = tmp_path / "agy"
    agy.symlink_to(sys.executable)  # the kernel names the process after the path it ran
    code = textwrap.dedent(
        f"""
        import subprocess, sys
        child = "from agy_provider.hosts.ask import nested_turn_reason; print(nested_turn_reason({{}}))"
        sys.exit(subprocess.run([{sys.executable!r}, "-c", child]).returncode)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != TURN_ENV}
    done = subprocess.run(
        [str(agy), "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True
    )
    assert "is agy" in done.stdout
    # The same child under a parent of another name runs.
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.stdout.strip() == ""


def test_ask_refuses_inside_an_agy_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TURN_ENV, "1")
    with pytest.raises(UsageError, match="refuses to run inside an agy turn"):
        asyncio.run(ask_antigravity("hi"))


# --- the pi tool -----------------------------------------------------------------------------


def test_the_tool_definition_is_a_pi_tool_with_a_json_schema() -> None:
    tool = ask_tool()
    assert tool.name == ASK_TOOL_NAME == "AskAntigravity"
    data = tool.to_json()
    assert data["parameters"]["required"] == ["prompt"]
    assert set(data["parameters"]["properties"]) == {
        "prompt",
        "cwd",
        "model",
        "thinking",
        "mode",
        "conversation",
        "timeout",
    }
    assert data["parameters"]["properties"]["mode"]["enum"] == ["default", "plan", "accept-edits"]
    assert json.loads(json.dumps(data)) == data  # plain JSON, as a host sends it to its model
    assert type(tool).from_json(data) == tool


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({}, "needs a prompt"),
        ({"prompt": "x", "colour": "red"}, "takes no argument colour"),
        ({"prompt": 3}, "prompt must be a string"),
        ({"prompt": "x", "mode": "yolo"}, "mode must be one of default, plan, accept-edits"),
        ({"prompt": "x", "timeout": 0}, "timeout must be a number above 0"),
        ({"prompt": "x", "timeout": True}, "timeout must be a number above 0"),
    ],
)
async def test_bad_tool_arguments_come_back_as_an_error_result(
    arguments: dict[str, Any], says: str
) -> None:
    result = await run_ask_tool(ToolCall(id="call-1", name=ASK_TOOL_NAME, arguments=arguments))
    assert result.is_error and result.tool_call_id == "call-1"
    text = result.content[0]
    assert isinstance(text, TextContent) and says in text.text


def _command(
    line: str, status: StepStatus, result: StepToolResult | None = None, **step: Any
) -> Step:
    call = StepToolCall(id="t1", name="run_command", arguments={"CommandLine": line})
    return Step(index=4, kind=StepKind.TOOL, status=status, tool=call, result=result, **step)


def test_tool_runs_are_values_beside_the_assemblers_lines() -> None:
    ran = _command("ls -1", StepStatus.DONE, StepToolResult(output="README.md\nsrc\n", exit_code=0))
    run = tool_run(ran)
    assert render_tool_run(ran) == "▸ run_command ls -1\n  exit 0\n  README.md\n  src\n"
    assert run is not None and run.settled and run.arguments == {"CommandLine": "ls -1"}
    assert (run.name, run.argument, run.exit_code, run.failed) == ("run_command", "ls -1", 0, False)
    assert run.output == "README.md\nsrc"
    assert run.result == run.output  # exit 0 is not repeated
    failed = tool_run(
        _command("false", StepStatus.DONE, StepToolResult(output="boom", exit_code=1))
    )
    assert failed is not None and failed.failed and failed.exit_code == 1
    assert (failed.output, failed.result) == ("boom", "exit 1\nboom")
    canceled = tool_run(_command("sleep 9", StepStatus.CANCELED))
    assert canceled is not None and canceled.failed and canceled.result == "canceled"
    refused = tool_run(
        _command("rm -rf /", StepStatus.ERROR, step_type=17, error="denied by policy")
    )
    assert refused is not None and refused.failed and refused.output == "not run: denied by policy"
    assert refused.error == "denied by policy"
    started = tool_run(_command("ls", StepStatus.RUNNING))
    assert started is not None and (started.name, started.argument) == ("run_command", "ls")
    assert not started.settled and not started.failed and started.output == ""
    assert tool_run(Step(index=5, kind=StepKind.ASSISTANT, status=StepStatus.DONE)) is None


# --- real turns on agy-sim -------------------------------------------------------------------


def _steps() -> tuple[list[str], Any]:
    steps: list[str] = []

    def progress(elapsed: float, step: str) -> None:
        assert elapsed >= 0
        steps.append(step)

    return steps, progress


def _conversations(app: Path) -> list[str]:
    folder = app / "conversations"
    return sorted(p.stem for p in folder.glob("*.db")) if folder.is_dir() else []


def _expect_answer(result: AskResult, scenario: str, app: Path) -> None:
    assert result.status == "ok", result.error
    assert result.ok and result.error is None
    assert result.answer == scenario_answer(scenario)
    assert result.conversation_id in _conversations(app)
    assert result.exit_code == 0
    assert result.usage.output > 0 and result.usage.total_tokens > 0
    assert result.duration > 0


@pytest.mark.slow
async def test_ask_runs_one_turn_and_reports_its_steps(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, recorder: Observed, tmp_path: Path
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "tools")
    steps, progress = _steps()
    result = await ask_antigravity(
        "What is in this project?",
        cwd=str(tmp_path),
        model="flash",
        thinking="high",
        mode="plan",
        timeout=300,
        on_progress=progress,
    )
    _expect_answer(result, "tools", live_env)
    # The alias went to agy as the family's base with the effort; agy answered with that tier.
    assert result.model == "gemini-3.8-flash-high"
    tools = [t for s in load_scenario("tools").turn(0).steps for t in getattr(s, "tools", ())]
    expected_tool_steps = [f"▸ {t.name} {next(iter(t.args.values()))}" for t in tools]
    assert steps[0] == "starting agy" and steps[-1] == "done"
    assert [s for s in steps if s.startswith("▸")] == expected_tool_steps
    assert "thinking" in steps and steps[-2] == "answering"
    (turn,) = recorder.turns
    assert turn.config.mode == "plan" and turn.config.turn_timeout == 300
    assert turn.cwd == str(tmp_path)
    assert turn.process.request.model_args == ["--model", "gemini-3.8-flash", "--effort", "high"]
    # Nothing is kept in the user's session store: the conversation id is the way back.
    assert not Path(os.environ["AGY_PROVIDER_SESSIONS"]).exists()
    assert leftovers(live_env, recorder) == []


@pytest.mark.slow
async def test_ask_continues_a_conversation(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    first = await ask_antigravity("Count.")
    _expect_answer(first, "two-turn", live_env)
    second = await ask_antigravity("Again.", conversation=first.conversation_id)
    assert second.ok, second.error
    assert second.answer == scenario_answer("two-turn", turn=1)
    assert second.conversation_id == first.conversation_id
    assert _conversations(live_env) == [first.conversation_id]
    with pytest.raises(UsageError, match="agy has no conversation"):
        await ask_antigravity("x", conversation="0f0f0f0f-0000-4000-8000-000000000000")
    with pytest.raises(UsageError, match="not an agy conversation id"):
        await ask_antigravity("x", conversation="--help")
    assert leftovers(live_env) == []


@pytest.mark.slow
async def test_ask_keeps_nothing_on_disk(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """AskAntigravity's session store is its call's memory: no file in the folder it runs in
    (a store of its own kind must not be written as a file by the shared session writer)."""
    folder = tmp_path / "cwd"
    folder.mkdir()
    monkeypatch.chdir(folder)
    from agy_provider.live.provider import wait_for_turns

    result = await ask_antigravity("Hello.")
    assert result.ok, result.error
    await wait_for_turns()  # the turn's save, whatever it does, is over
    assert list(folder.iterdir()) == []


@pytest.mark.slow
async def test_a_thinking_level_the_model_lacks_is_refused_before_agy_starts(
    live_env: Path,
) -> None:
    with pytest.raises(UsageError, match=r"gemini-3\.1-pro offers effort high, low, not medium"):
        await ask_antigravity("hi", model="pro", thinking="medium")
    assert _conversations(live_env) == []


@pytest.mark.slow
async def test_a_failed_turn_comes_back_with_agys_own_error(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "quota-exhausted")
    steps, progress = _steps()
    result = await ask_antigravity("hi", on_progress=progress)
    assert result.status == "error" and not result.ok
    assert result.error is not None
    assert load_scenario("quota-exhausted").quota_exhausted in result.error
    assert result.exit_code == 1
    assert steps[-1] == "failed"
    assert "agy failed: " in result.tool_text()
    assert leftovers(live_env) == []


@pytest.mark.slow
async def test_an_abort_ends_the_turn_and_agy(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, recorder: Observed
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "hang")
    signal = AbortSignal()

    def progress(elapsed: float, step: str) -> None:
        if step == "thinking":  # agy is running and writing: stop it there
            signal.abort("enough")

    result = await ask_antigravity("hi", on_progress=progress, signal=signal)
    assert result.status == "aborted"
    assert leftovers(live_env, recorder) == []


@pytest.mark.slow
async def test_cancelling_the_call_aborts_the_turn(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, recorder: Observed
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "hang")
    running = asyncio.Event()

    def progress(elapsed: float, step: str) -> None:
        if step == "thinking":
            running.set()

    task = asyncio.ensure_future(ask_antigravity("hi", on_progress=progress))
    await asyncio.wait_for(running.wait(), 120)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_for_turns()  # the turn ends agy's tree on its way out
    ends = [getattr(e, "reason", "") for e, _ in recorder.events if e.type in ("done", "error")]
    assert ends == ["aborted"]
    assert leftovers(live_env, recorder) == []


@pytest.mark.slow
async def test_the_pi_tool_runs_a_call(live_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "default")
    call = ToolCall(id="call-7", name=ASK_TOOL_NAME, arguments={"prompt": "hi", "model": "pro"})
    result = await run_ask_tool(call)
    assert not result.is_error
    assert result.tool_call_id == "call-7" and result.tool_name == ASK_TOOL_NAME
    text = result.content[0]
    assert isinstance(text, TextContent)
    assert text.text.startswith(scenario_answer("default"))
    details = result.details
    assert details["status"] == "ok" and details["conversationId"] in text.text
    assert details["model"].startswith("gemini-3.1-pro")
    assert leftovers(live_env) == []


@pytest.mark.slow
def test_the_sync_call_runs_a_turn_and_stops_agy_when_the_caller_raises(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, recorder: Observed
) -> None:
    pytest.importorskip("agy_provider.hosts.sync", reason="the sync API is not in this checkout")
    monkeypatch.setenv("AGY_SIM_SCENARIO", "tools")
    steps, progress = _steps()
    result = ask_antigravity_sync("What is here?", on_progress=progress)
    _expect_answer(result, "tools", live_env)
    assert steps[0] == "starting agy" and steps[-1] == "done"

    monkeypatch.setenv("AGY_SIM_SCENARIO", "hang")

    def interrupt(elapsed: float, step: str) -> None:
        if step == "thinking":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ask_antigravity_sync("hi", on_progress=interrupt)
    assert leftovers(live_env, recorder) == []


# --- the command line ------------------------------------------------------------------------


def _cli_env(live_env: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    env.update(extra)
    return env


@pytest.mark.slow
def test_the_cli_prints_the_answer_on_stdout_and_progress_on_stderr(live_env: Path) -> None:
    done = subprocess.run(
        [AGY_PROVIDER, "ask", "What is here?", "--model", "sonnet"],
        capture_output=True,
        text=True,
        env=_cli_env(live_env, AGY_SIM_SCENARIO="tools"),
        stdin=subprocess.DEVNULL,
        timeout=200,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == scenario_answer("tools") + "\n"
    assert "starting agy" in done.stderr and "▸ run_command ls -1" in done.stderr
    (conversation,) = _conversations(live_env)
    assert f"claude-sonnet-4-6 answered in conversation {conversation}" in done.stderr

    again = subprocess.run(
        [AGY_PROVIDER, "ask", "And now?", "--conversation", conversation, "--json"],
        capture_output=True,
        text=True,
        env=_cli_env(live_env, AGY_SIM_SCENARIO="two-turn"),
        stdin=subprocess.DEVNULL,
        timeout=200,
    )
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    assert result["conversationId"] == conversation and result["status"] == "ok"
    assert leftovers(live_env) == []


@pytest.mark.slow
def test_the_cli_fails_with_agys_error_and_refuses_inside_agy(live_env: Path) -> None:
    done = subprocess.run(
        [AGY_PROVIDER, "ask", "hi"],
        capture_output=True,
        text=True,
        env=_cli_env(live_env, AGY_SIM_SCENARIO="quota-exhausted"),
        stdin=subprocess.DEVNULL,
        timeout=200,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert load_scenario("quota-exhausted").quota_exhausted in done.stderr

    nested = subprocess.run(
        [AGY_PROVIDER, "ask", "hi"],
        capture_output=True,
        text=True,
        env=_cli_env(live_env, **{TURN_ENV: "1"}),
        stdin=subprocess.DEVNULL,
        timeout=200,
    )
    assert nested.returncode == 2
    assert "refuses to run inside an agy turn" in nested.stderr
    assert leftovers(live_env) == []


@pytest.mark.slow
async def test_with_agy_sim_and_no_state_folder_the_simulators_own_folder_is_used(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """agy-sim writes into its own folder when none is chosen; the turn must look there too."""
    monkeypatch.delenv("AGY_APP_DATA_DIR")
    monkeypatch.delenv("ANTIGRAVITY_APP_DATA_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("AGY_BIN", "agy-sim")
    result = await ask_antigravity("hi")
    sim_state = tmp_path / "xdg" / "agy-provider" / "sim-state"
    assert result.ok, result.error
    assert result.answer == scenario_answer("default")
    assert _conversations(sim_state) == [result.conversation_id]
    assert leftovers(sim_state) == []


@pytest.mark.parametrize(
    ("status", "result", "expected"),
    [
        (StepStatus.DONE, StepToolResult(output="a\nb\n", exit_code=0), ("a\nb", 0, False)),
        (StepStatus.DONE, StepToolResult(output="boom\n", exit_code=2), ("boom", 2, True)),
        (StepStatus.RUNNING, None, ("", None, False)),
        (StepStatus.CANCELED, None, ("canceled", None, True)),
    ],
)
def test_tool_runs_read_back_what_the_assembler_renders(
    status: StepStatus, result: StepToolResult | None, expected: tuple[str, int | None, bool]
) -> None:
    """The value and `render_tool_run`'s text must say the same."""
    step = Step(
        index=4,
        kind=StepKind.TOOL,
        status=status,
        tool=StepToolCall(id="t1", name="run_command", arguments={"CommandLine": "ls -1 src"}),
        result=result,
    )
    run = tool_run(step)
    assert run is not None
    assert (run.name, run.argument) == ("run_command", "ls -1 src")
    assert (run.output, run.exit_code, run.failed) == expected


def test_the_sync_twin_takes_the_async_calls_arguments_and_defaults() -> None:
    import dataclasses
    import inspect

    from agy_provider.hosts import ask as ask_module

    shown = inspect.signature(ask_module.ask_antigravity)
    assert inspect.signature(ask_module.ask_antigravity_sync) == shown
    for field in dataclasses.fields(ask_module._Request):
        assert field.name in shown.parameters
        if field.name != "prompt":
            assert field.default == shown.parameters[field.name].default, field.name
    with pytest.raises(TypeError, match=r"ask_antigravity_sync\(\) got an unexpected keyword"):
        ask_module.ask_antigravity_sync("hi", conversation_id="c")  # type: ignore[call-arg]
