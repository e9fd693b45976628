"""Host tools on a plain install (issue 16, item 3): `pip install agy-provider` with no extras, in a
fresh virtual environment, then a turn that offers a host tool to agy-sim and gets its answer.

Skipped, saying why, where the package index cannot be reached; it is slow (an install), so the
install is one module-scoped fixture every check here shares, made the cheap way: a venv without
pip of its own (the running pip installs into it with `--python`) and no byte-compiling of the
dependencies (the host compiles what it imports). The turn runs the tool at once
(`tool_executor`) through the sync API.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest
from host_helpers import TOOL_PARAMETERS
from host_helpers import TOOL_SCENARIO
from host_helpers import tool_answer
from host_helpers import tool_output

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

HOST = """
import json, sys
from agy_provider import Context, Model, Tool, UserMessage
from agy_provider.hosts.sync import complete

model = Model(id="gemini-3.7-flash", name="Flash", api="agy", provider="agy", base_url="",
              reasoning=True, context_window=0, max_tokens=0)
tool = Tool("lookup_order", "Look up an order's status by its id.", json.loads(sys.argv[1]))
context = Context(messages=[UserMessage(content="Where is A-1042?", timestamp=0)], tools=[tool])
message = complete(model, context, tool_executor=lambda call: sys.argv[2])
print(json.dumps({"stop": message.stop_reason, "error": message.error_message,
                  "text": "".join(b.text for b in message.content if b.type == "text")}))
"""


@pytest.fixture(scope="module")
def plain_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with `pip install agy-provider` (no extras) done in it."""
    tmp = tmp_path_factory.mktemp("plain-install")
    env_dir = tmp / "plain"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    # A copy of the package's sources: building in place would leave a build/ in the checkout.
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for folder in ("agy_provider", "plugins"):
        shutil.copytree(
            ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    pip = [sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python")]
    install = subprocess.run(
        [*pip, "install", "--quiet", "--no-compile", str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if install.returncode != 0:
        reason = install.stderr.strip().splitlines()[-1:] or ["(no output)"]
        if any(w in install.stderr for w in ("Could not find", "connection", "Network", "resolve")):
            pytest.skip(f"the package index cannot be reached: {reason[0]}")
        raise AssertionError(f"a plain install failed:\n{install.stderr[-3000:]}")
    return env_dir


def test_a_host_tool_turn_works_on_an_install_without_extras(
    plain_env: Path, tmp_path: Path
) -> None:
    import json

    env_dir = plain_env
    python = env_dir / "bin" / "python"
    state = tmp_path / "state"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))},
        "ANTIGRAVITY_APP_DATA_DIR": str(state),
        "AGY_PROVIDER_CONFIG": str(tmp_path / "config.json"),
        "AGY_PROVIDER_SESSIONS": str(tmp_path / "sessions.json"),
        "AGY_BIN": str(env_dir / "bin" / "agy-sim"),
        "AGY_SIM_NO_SERVER": "1",
        "AGY_EVENT_SOURCE": "sqlite",
        "AGY_SIM_SPEED": "4",
        "AGY_SIM_SCENARIO": TOOL_SCENARIO,
    }
    result = tool_output("A-1042")
    turn = subprocess.run(
        [str(python), "-c", textwrap.dedent(HOST), json.dumps(TOOL_PARAMETERS), result],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert turn.returncode == 0, turn.stderr[-3000:]
    said = json.loads(turn.stdout.strip().splitlines()[-1])
    assert said == {"stop": "stop", "error": None, "text": tool_answer()}, said
