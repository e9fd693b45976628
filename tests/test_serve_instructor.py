"""`instructor` against `agy-provider serve` in its default `Mode.TOOLS`: a Pydantic model asked for
over Chat Completions with a forced `tool_choice` naming that model's function.

instructor 1.17 pins `jiter<0.15`, which only `openai<=3.3` accepts, while the pi hosts need a newer
`openai`: the test installs instructor with its own dependencies into `.venv/hosts/instructor`
on first use (`optional.py`), and the check runs in a Python beside it. It skips, saying how to
install it, where it cannot be installed.
"""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
from live_helpers import scenario_answer
from optional import INSTRUCTOR
from optional import own_folder_env
from serve_helpers import Served
from serve_helpers import served_fixture  # noqa: F401 (the `served` fixture)

pytestmark = pytest.mark.slow


# The Pydantic model the structured-output scenario's answer fits; instructor sends it as the
# function `City` and `tool_choice: {"type": "function", "function": {"name": "City"}}`.
SCRIPT = """
import json, sys
import instructor, openai
from pydantic import BaseModel

class City(BaseModel):
    city: str
    population: int

base, token = sys.argv[1:]
client = instructor.from_openai(
    openai.OpenAI(base_url=base, api_key=token, max_retries=0), mode=instructor.Mode.TOOLS
)
city = client.chat.completions.create(
    model="default", response_model=City, max_retries=0,
    messages=[{"role": "user", "content": "Which city, and how many people live there?"}],
)
print(json.dumps(city.model_dump()))
"""


def instructor_env() -> dict[str, str]:
    """The environment of a Python that imports instructor (and its own openai) first."""
    return own_folder_env(INSTRUCTOR, "import instructor")


@pytest.fixture(scope="module")
def instructor_python() -> dict[str, str]:
    return instructor_env()


async def test_instructor_tools_mode_gets_the_model(
    instructor_python: dict[str, str], served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "structured-output")
    monkeypatch.setenv("AGY_SIM_SPEED", "10")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        SCRIPT,
        f"{served.base}/v1",
        served.token,
        env=instructor_python,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 200)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert json.loads(out.decode().splitlines()[-1]) == json.loads(
        scenario_answer("structured-output")
    )
