"""`--json-schema` in agy's argv (structured output, agy ≥ 1.2): the schema is validated as a
JSON object before it becomes an argument, and a turn's options carry it (`JSON_SCHEMA_OPTION`)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from live_helpers import agy_sim_path
from live_helpers import scenario_answer

from agy_provider.agy.argv import TurnRequest
from agy_provider.agy.argv import build_argv
from agy_provider.agy.argv import checked_json_schema
from agy_provider.errors import UsageError

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def request(schema: str) -> TurnRequest:
    return TurnRequest(prompt="hi", cwd="/", agy_bin="agy", json_schema=schema)


def test_a_schema_becomes_one_compact_argument() -> None:
    argv = build_argv(request(json.dumps(SCHEMA, indent=2)))
    at = argv.index("--json-schema")
    assert json.loads(argv[at + 1]) == SCHEMA
    assert "\n" not in argv[at + 1]


def test_no_schema_no_flag() -> None:
    assert "--json-schema" not in build_argv(request(""))


@pytest.mark.parametrize(
    "bad", ["{not json", "[1, 2]", '"a string"', json.dumps({"x": "a" * 200_000})]
)
def test_what_is_not_a_schema_object_never_reaches_argv(bad: str) -> None:
    with pytest.raises(UsageError):
        build_argv(request(bad))
    with pytest.raises(UsageError):
        checked_json_schema(bad)


def test_agy_sim_answers_a_json_schema_turn_with_structured_output(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "ANTIGRAVITY_APP_DATA_DIR": str(tmp_path),
        "AGY_SIM_NO_SERVER": "1",
        "AGY_SIM_SPEED": "20",
        "AGY_SIM_SCENARIO": "structured-output",
    }
    argv = [agy_sim_path(), "-p", "a city", "--output-format", "json"]
    done = subprocess.run(
        [*argv, "--json-schema", json.dumps(SCHEMA)], env=env, capture_output=True, timeout=60
    )
    result = json.loads(done.stdout)
    assert result["structured_output"] == json.loads(scenario_answer("structured-output"))
    plain = json.loads(subprocess.run(argv, env=env, capture_output=True, timeout=60).stdout)
    assert "structured_output" not in plain
    # Before 1.2 agy has no such flag: a usage error, as agy's flag parser gives.
    old = subprocess.run(
        [*argv, "--json-schema", "{}"],
        env={**env, "AGY_SIM_VERSION": "1.1.20"},
        capture_output=True,
        timeout=60,
    )
    assert old.returncode == 2
