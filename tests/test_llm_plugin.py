"""The `llm` plugin with the real `llm` 0.36 (the `llm` extra) against agy-sim: models listed from
agy's catalog without spawning agy each time, text and reasoning streamed, agy's tool runs logged
as server-executed tool calls, `llm -c` in one agy conversation, usage in `llm logs`, failures.

The CLI runs as a subprocess with its own LLM_USER_PATH; expectations come from the scenarios.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from live_helpers import Observed
from live_helpers import agy_sim_path
from live_helpers import leftovers
from live_helpers import scenario_answer
from optional import need

from agy_provider.agy.models import collapse_tiers
from agy_provider.sim.scenario import DEFAULT_CATALOG
from agy_provider.sim.scenario import PlannerSpec
from agy_provider.sim.scenario import load_scenario

llm = need("llm", "llm", "llm")

LLM = os.path.join(os.path.dirname(sys.executable), "llm")
SIM_MODELS = collapse_tiers((m.slug, m.name) for m in DEFAULT_CATALOG)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not any(ep.name == "agy" for ep in metadata.entry_points(group="llm")),
        reason="agy-provider's llm entry point is not installed: pip install -e '.[llm]'",
    ),
]


@pytest.fixture(autouse=True, scope="module")
def _agy_plugin_in_this_process() -> None:
    """llm loads no entry-point plugin under tests (`sys._called_from_test`, which conftest sets
    for ours too): the in-process tests register agy's plugin as llm's own tests do theirs. The
    `llm` subprocesses load it from its entry point."""
    from agy_provider.plugins import llm_plugin
    from llm.plugins import pm

    if not pm.is_registered(llm_plugin):
        pm.register(llm_plugin, name="agy")


@pytest.fixture
def llm_env(live_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """live_env plus a private llm user folder, as the environment of an `llm` subprocess."""
    monkeypatch.setenv("LLM_USER_PATH", str(tmp_path / "llm"))
    return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}


def run_llm(env: dict[str, str], *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LLM, *args],
        capture_output=True,
        text=True,
        env={**env, **extra},
        stdin=subprocess.DEVNULL,
        timeout=200,
    )


def logs(env: dict[str, str]) -> list[dict[str, Any]]:
    done = run_llm(env, "logs", "--json", "-n", "0")
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return sorted(rows, key=lambda r: str(r["id"]))


def conversations(app: Path) -> list[str]:
    return sorted(p.stem for p in (app / "conversations").glob("*.db"))


def test_every_model_agy_lists_is_an_llm_model_and_agy_runs_once(
    llm_env: dict[str, str], tmp_path: Path
) -> None:
    counter = tmp_path / "runs"
    agy = tmp_path / "agy"
    agy.write_text(f'#!/bin/sh\necho run >> "{counter}"\nexec "{agy_sim_path()}" "$@"\n')
    agy.chmod(agy.stat().st_mode | stat.S_IXUSR)
    first = run_llm(llm_env, "models", AGY_BIN=str(agy))
    assert first.returncode == 0, first.stderr
    lines = [line for line in first.stdout.splitlines() if line.startswith("agy")]
    assert lines[0] == "agy: agy"
    listed = {line.split()[1]: line for line in lines[1:]}
    assert list(listed) == [f"agy/{m.id}" for m in SIM_MODELS]
    assert "(thinking: high, medium, low)" in listed["agy/gemini-3.8-flash"]
    assert "aliases: agy/flash" in listed["agy/gemini-3.8-flash"]
    assert "aliases: agy/opus" in listed["agy/claude-opus-4-6-thinking"]
    # llm asks every plugin for its models on every run: agy's list comes from the kept catalog.
    again = run_llm(llm_env, "models", AGY_BIN=str(agy))
    assert again.returncode == 0 and again.stdout == first.stdout
    assert counter.read_text().splitlines() == ["run"]


def test_a_prompt_streams_text_and_reasoning_and_logs_tools_and_usage(
    llm_env: dict[str, str], live_env: Path
) -> None:
    done = run_llm(
        llm_env, "-m", "agy/flash", "-o", "thinking", "high", "Hi", AGY_SIM_SCENARIO="tools"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == scenario_answer("tools") + "\n"
    planners = [s for s in load_scenario("tools").turn(0).steps if isinstance(s, PlannerSpec)]
    tools = [tool for planner in planners for tool in planner.tools]
    for planner in planners:
        for chunk in planner.thinking:
            assert chunk in done.stderr  # reasoning, streamed to stderr
    assert "▸ run_command ls -1" in done.stderr  # agy's tool runs show live as reasoning

    (row,) = logs(llm_env)
    assert row["model"] == "agy/gemini-3.8-flash"
    assert row["resolved_model"] == "gemini-3.8-flash-high"
    assert row["options_json"] == {"thinking": "high"}
    assert row["response"] == scenario_answer("tools")
    assert [(c["name"], c["server_executed"]) for c in row["tool_calls"]] == [
        (t.name, True) for t in tools
    ]
    assert row["tool_calls"][0]["arguments"] == {"argument": "ls -1"}
    results = row["tool_results"]
    assert [(r["name"], r["output"], r["server_executed"]) for r in results] == [
        (t.name, t.output.rstrip("\n"), True) for t in tools
    ]
    assert [r["tool_call_id"] for r in results] == [c["tool_call_id"] for c in row["tool_calls"]]
    # Usage: at least every planner call's tokens (agy's own side calls may add to them).
    assert row["input_tokens"] >= sum(p.usage.input + p.usage.cache_read for p in planners)
    assert row["output_tokens"] >= sum(p.usage.output for p in planners)
    assert leftovers(live_env) == []


def test_llm_c_continues_the_same_agy_conversation(llm_env: dict[str, str], live_env: Path) -> None:
    first = run_llm(llm_env, "-m", "agy", "Count.", AGY_SIM_SCENARIO="two-turn")
    assert first.returncode == 0, first.stderr
    assert first.stdout == scenario_answer("two-turn") + "\n"
    second = run_llm(llm_env, "-c", "Again.", AGY_SIM_SCENARIO="two-turn")
    assert second.returncode == 0, second.stderr
    assert second.stdout == scenario_answer("two-turn", turn=1) + "\n"

    (conversation,) = conversations(live_env)  # one agy conversation for both prompts
    rows = logs(llm_env)
    assert [r["response"] for r in rows] == [scenario_answer("two-turn", t) for t in (0, 1)]
    (llm_conversation,) = {r["conversation_id"] for r in rows}
    sessions = json.loads(Path(os.environ["AGY_PROVIDER_SESSIONS"]).read_text())["sessions"]
    assert sessions[f"llm:{llm_conversation}"]["conversation_id"] == conversation
    two = load_scenario("two-turn").turn(1).steps
    (planner,) = [s for s in two if isinstance(s, PlannerSpec)]
    assert rows[1]["input_tokens"] >= planner.usage.input + planner.usage.cache_read
    assert rows[1]["output_tokens"] >= planner.usage.output
    assert leftovers(live_env) == []


def test_a_failed_turn_is_llms_error_with_agys_words(
    llm_env: dict[str, str], live_env: Path
) -> None:
    done = run_llm(llm_env, "-m", "agy", "hi", AGY_SIM_SCENARIO="quota-exhausted")
    assert done.returncode == 1
    assert load_scenario("quota-exhausted").quota_exhausted in done.stderr
    bad = run_llm(llm_env, "-m", "agy", "-o", "mode", "yolo", "hi")
    assert bad.returncode != 0 and "mode" in bad.stderr
    lacking = run_llm(llm_env, "-m", "agy/pro", "-o", "thinking", "medium", "hi")
    assert lacking.returncode == 1
    assert "agy/gemini-3.1-pro offers thinking high, low, not medium" in lacking.stderr
    assert leftovers(live_env) == []


def test_options_reach_agy_through_llms_python_api(
    llm_env: dict[str, str], live_env: Path, recorder: Observed, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "default")
    model = llm.get_model("agy/gemini-3.7-flash")
    response = model.prompt("hi", thinking="low", mode="accept-edits")
    assert response.text() == scenario_answer("default")
    (turn,) = recorder.turns
    assert turn.config.mode == "accept-edits"
    assert turn.process.request.model_args == ["--model", "gemini-3.7-flash", "--effort", "low"]
    assert response.input_tokens and response.output_tokens
    assert leftovers(live_env, recorder) == []


async def test_the_async_model_streams_a_turn(
    llm_env: dict[str, str], live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "thinking")
    model = llm.get_async_model("agy")
    response = model.prompt("hi")
    kinds = [event.type async for event in response.astream_events()]
    assert "reasoning" in kinds and "text" in kinds
    assert await response.text() == scenario_answer("thinking")
    assert leftovers(live_env) == []


def test_stopping_early_leaves_no_agy_running(
    llm_env: dict[str, str], live_env: Path, recorder: Observed, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "hang")
    response = llm.get_model("agy").prompt("hi")
    events = response.stream_events()
    for event in events:
        if event.type == "reasoning":
            break  # agy is running (it hangs after this): stop reading here
    events.close()  # what a dropped iterator does when it is collected
    assert recorder.turns, "the turn never started"
    assert leftovers(live_env, recorder) == []


def test_the_plugin_finds_agy_where_the_runner_does(tmp_path: Path) -> None:
    from agy_provider.plugins.llm_plugin import locate_agy

    from agy_provider.errors import AgyNotFoundError
    from agy_provider.live.runner import find_agy

    assert locate_agy("agy-sim") == find_agy("agy-sim")
    assert locate_agy(agy_sim_path()) == find_agy(agy_sim_path())
    for missing in ("no-such-agy-binary", str(tmp_path / "agy")):
        assert locate_agy(missing) is None
        with pytest.raises(AgyNotFoundError):
            find_agy(missing)


def test_listing_models_does_not_load_the_runner(llm_env: dict[str, str]) -> None:
    """llm lists every plugin's models on every run: that must not import the live path."""
    code = (
        "import sys, llm; llm.get_models_with_aliases(); "
        "print(sorted(m for m in sys.modules if m in ('agy_provider.live.runner', 'psutil')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=llm_env, timeout=200
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# -- llm's tools: agy calls them through the MCP bridge, llm's chain runs them -----------------


def _tool_runs() -> tuple[list[dict[str, Any]], Any]:
    from host_helpers import tool_output

    runs: list[dict[str, Any]] = []

    def lookup_order(order_id: str, verbose: bool = False) -> str:
        """Look up an order's status by its id."""
        runs.append({"order_id": order_id, "verbose": verbose})
        return tool_output(order_id)

    return runs, lookup_order


def test_llms_chain_runs_a_tool_agy_calls_once_in_one_agy_turn(
    llm_env: dict[str, str], live_env: Path, recorder: Observed, monkeypatch: pytest.MonkeyPatch
) -> None:
    from host_helpers import TOOL_SCENARIO
    from host_helpers import tool_answer
    from host_helpers import tool_arguments

    monkeypatch.setenv("AGY_SIM_SCENARIO", TOOL_SCENARIO)
    runs, lookup_order = _tool_runs()
    chain = llm.get_model("agy").chain("Where is my order A-1042?", tools=[lookup_order])
    assert chain.text() == tool_answer()
    assert runs == [tool_arguments()]
    first, second = chain._responses  # what ran (`responses()` would run the chain again)
    assert [(c.name, c.arguments) for c in first.tool_calls()] == [
        ("lookup_order", tool_arguments())
    ]
    assert second.tool_calls() == []
    assert len(recorder.turns) == 1  # the results went on in the same agy turn
    assert leftovers(live_env, recorder) == []


async def test_llms_async_chain_runs_a_tool_agy_calls(
    llm_env: dict[str, str], live_env: Path, recorder: Observed, monkeypatch: pytest.MonkeyPatch
) -> None:
    from host_helpers import TOOL_SCENARIO
    from host_helpers import tool_answer
    from host_helpers import tool_arguments

    monkeypatch.setenv("AGY_SIM_SCENARIO", TOOL_SCENARIO)
    runs, lookup_order = _tool_runs()
    chain = llm.get_async_model("agy").chain("Where is my order A-1042?", tools=[lookup_order])
    assert await chain.text() == tool_answer()
    assert runs == [tool_arguments()] and len(recorder.turns) == 1
    assert leftovers(live_env, recorder) == []


def test_the_llm_command_runs_a_function_agy_calls(
    llm_env: dict[str, str], live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from host_helpers import TOOL_SCENARIO
    from host_helpers import tool_answer

    function = (
        "def lookup_order(order_id: str, verbose: bool = False) -> str:\n"
        '    """Look up an order\'s status by its id."""\n'
        "    return f'order {order_id} shipped on 2026-11-28'\n"
    )
    done = run_llm(
        llm_env,
        "-m",
        "agy",
        "--functions",
        function,
        "Where is my order A-1042?",
        AGY_SIM_SCENARIO=TOOL_SCENARIO,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == tool_answer()
    assert leftovers(live_env) == []
