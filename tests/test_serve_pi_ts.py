"""The real TypeScript pi against `agy-provider serve`: `@mariozechner/pi-ai` from npm, a custom
model whose `baseUrl` is our server, through its `openai-completions` and `anthropic-messages`
APIs — a streamed turn (text, thinking, usage) and a host tool round trip.

An optional tier: npm installs pi-ai into a cache folder outside the repository (once); the tests
skip, saying why, where node, npm or the registry is not available.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from host_helpers import TOOL_PARAMETERS
from host_helpers import TOOL_SCENARIO
from host_helpers import conversations
from host_helpers import tool_answer
from host_helpers import tool_output
from live_helpers import scenario_answer
from test_serve_app import Served
from test_serve_app import served_fixture  # noqa: F401 (the `served` fixture)

pytestmark = pytest.mark.slow

PI_AI = "@mariozechner/pi-ai"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agy-provider-tests"

# One pi-ai turn (or a tool round trip) against the server; prints what pi-ai made of it.
SCRIPT = r"""
import { complete } from "@mariozechner/pi-ai";

const [api, mode, baseUrl, token, toolOutput, parameters] = process.argv.slice(2);
const model = {
  id: "default", name: "agy via agy-provider serve", api, provider: "agy-serve",
  baseUrl, reasoning: true, input: ["text"],
  cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
  contextWindow: 1000000, maxTokens: 8192,
};
const tools = mode === "tool" ? [{
  name: "lookup_order", description: "Look up an order's status by its id.",
  parameters: JSON.parse(parameters),
}] : undefined;
const context = {
  systemPrompt: "You are helpful.",
  messages: [{ role: "user", content: mode === "tool" ? "Where is my order A-1042?" : "Hi",
               timestamp: Date.now() }],
  tools,
};
const summary = (m) => ({
  stopReason: m.stopReason, error: m.errorMessage,
  text: m.content.filter((b) => b.type === "text").map((b) => b.text).join(""),
  thinking: m.content.filter((b) => b.type === "thinking").map((b) => b.thinking).join(""),
  calls: m.content.filter((b) => b.type === "toolCall"), usage: m.usage,
});
const first = await complete(model, context, { apiKey: token });
const out = { first: summary(first) };
if (mode === "tool" && first.stopReason === "toolUse") {
  context.messages.push(first);
  for (const call of first.content.filter((b) => b.type === "toolCall")) {
    context.messages.push({
      role: "toolResult", toolCallId: call.id, toolName: call.name,
      content: [{ type: "text", text: toolOutput }], isError: false, timestamp: Date.now(),
    });
  }
  out.second = summary(await complete(model, context, { apiKey: token }));
}
console.log(JSON.stringify(out));
"""


def _install() -> Path:
    """pi-ai in the cache folder (installed once); skips saying why when it cannot be."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip(
            "node and npm are needed for the TypeScript pi tier: install Node.js 20 or newer "
            "(e.g. `apt-get install nodejs npm`, or https://nodejs.org)"
        )
    folder = CACHE / "pi-ai"
    if not (folder / "node_modules" / PI_AI / "package.json").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--prefix", str(folder), PI_AI],
                capture_output=True,
                text=True,
                timeout=600,
            )
        except subprocess.TimeoutExpired:
            pytest.skip("npm install @mariozechner/pi-ai took over 10 minutes")
        if done.returncode != 0:
            pytest.skip(f"npm install {PI_AI} failed: {done.stderr.strip()[-300:]}")
    (folder / "turn.mjs").write_text(SCRIPT)
    return folder


@pytest.fixture(scope="module")
def pi_ai() -> Path:
    return _install()


async def pi_turn(pi_ai: Path, served: Served, api: str, mode: str) -> dict[str, Any]:
    base = f"{served.base}/v1" if api == "openai-completions" else served.base
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(pi_ai / "turn.mjs"),
        api,
        mode,
        base,
        served.token,
        tool_output("A-1042"),
        json.dumps(TOOL_PARAMETERS),
        cwd=pi_ai,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 240)
    assert proc.returncode == 0, err.decode()
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("api", ["openai-completions", "anthropic-messages"])
async def test_pi_ai_streams_a_turn_through_serve(pi_ai: Path, served: Served, api: str) -> None:
    first = (await pi_turn(pi_ai, served, api, "text"))["first"]
    assert (first["stopReason"], first["text"]) == ("stop", scenario_answer("default")), first
    assert first["thinking"]  # reasoning_content / thinking blocks, as pi reads them
    assert first["usage"]["output"] > 0 and first["usage"]["totalTokens"] > 0


@pytest.mark.parametrize("api", ["openai-completions", "anthropic-messages"])
async def test_pi_ai_tool_loop_through_serve(
    pi_ai: Path, served: Served, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", TOOL_SCENARIO)
    result = await pi_turn(pi_ai, served, api, "tool")
    assert result["first"]["stopReason"] == "toolUse", result
    assert [c["name"] for c in result["first"]["calls"]] == ["lookup_order"]
    assert result["second"]["text"] == tool_answer(), result
    assert len(conversations(served.app)) == 1  # the parked agy turn was resumed
