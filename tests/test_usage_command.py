"""`agy-provider usage` and status's quota rows, against agy-sim as a real process.

agy-sim answers `-p /usage` itself as agy does (1.1.18+; the body shape is unverified), and the
quota-exhausted scenario shows a used-up window with the reset agy's message names.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from sim_support import cli_env
from sim_support import run_cli

from agy_provider.agy.usage_command import read_quota_usage
from agy_provider.agy.usage_command import usage_argv
from agy_provider.errors import SourceError
from agy_provider.errors import UsageError

pytestmark = pytest.mark.slow

AGY_SIM = os.path.join(os.path.dirname(sys.executable), "agy-sim")


@pytest.mark.parametrize("version", ["1.2.13", "1.3.3"])
def test_usage_prints_each_window_and_when_it_resets(tmp_path: Path, version: str) -> None:
    done = run_cli(tmp_path, "usage", "--agy-bin", AGY_SIM, AGY_SIM_VERSION=version)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["5h", "weekly"]
    assert all(re.search(r"\d+% left, resets \d{4}-\d\d-\d\d \d\d:\d\d UTC \(in ", x) for x in lines)
    as_json = json.loads(run_cli(tmp_path, "usage", "--agy-bin", AGY_SIM, "--json").stdout)
    assert [b["window"] for b in as_json["buckets"]] == ["5h", "weekly"]
    assert all(0 <= b["remaining"] <= 1 and b["resetsAt"] for b in as_json["buckets"])
    assert not list(tmp_path.rglob("*.db"))  # agy answered it itself: no conversation


def test_usage_when_the_quota_is_used_up_names_the_reset(tmp_path: Path) -> None:
    done = run_cli(
        tmp_path, "usage", "--agy-bin", AGY_SIM, "--json", AGY_SIM_SCENARIO="quota-exhausted"
    )
    assert done.returncode == 0, done.stderr
    weekly = json.loads(done.stdout)["buckets"][1]
    assert weekly["remaining"] == 0 and weekly["resetsIn"] == 120 * 3600 + 9 * 60 + 43


def test_an_agy_that_sends_usage_to_the_model_is_said_so(tmp_path: Path) -> None:
    env = cli_env(tmp_path, AGY_SIM_VERSION="1.1.17", AGY_SIM_NO_SERVER="1")
    env["ANTIGRAVITY_APP_DATA_DIR"] = str(tmp_path / "state")
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        with pytest.raises(SourceError, match="without usage data"):
            read_quota_usage(AGY_SIM, timeout=30)


def test_the_argv_is_a_validated_list_with_an_explicit_print_timeout() -> None:
    assert usage_argv("/bin/agy", timeout=30) == [
        "/bin/agy", "-p", "/usage", "--output-format", "json", "--print-timeout", "30s",
    ]  # fmt: skip
    for bad in ("", "-x", "a\x00b"):
        with pytest.raises(UsageError):
            usage_argv(bad)


def test_status_shows_the_quota_windows(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "status", "--agy-bin", AGY_SIM, AGY_SIM_VERSION="1.3.3")
    assert done.returncode == 0, done.stderr
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in done.stdout.splitlines())
    assert "% left, resets" in rows["quota 5h"] and "% left" in rows["quota weekly"]
    as_json = json.loads(run_cli(tmp_path, "status", "--agy-bin", AGY_SIM, "--json").stdout)
    assert [b["window"] for b in as_json["quota"]] == ["5h", "weekly"]
