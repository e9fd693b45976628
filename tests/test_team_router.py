"""A team behind LiteLLM's router (issue 32): two `agy-provider serve` processes, each with its own
agy-sim state folder, as two deployments of one model in a real LiteLLM proxy on loopback
(`tests/litellm_proxy.py`, installed once into a cache; skipped, saying how, where it cannot be).

Conversations keep to one instance (the router's session affinity on the client's
`x-<vendor>-session-id` header) and continue one agy conversation each; a quota 429 from one
instance sends that request and every following one to the other until the router's cooldown
ends, streamed and non-streamed alike. The configuration is the README's "serve for a team".
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from host_helpers import conversations
from litellm_proxy import LiteLLMProxy
from litellm_proxy import free_port
from litellm_proxy import litellm_bin
from live_helpers import agy_sim_path
from live_helpers import recorded_user_inputs
from live_helpers import scenario_answer
from serve_helpers import ServeProcess

pytestmark = pytest.mark.slow

MASTER_KEY = "sk-team-router-" + "k" * 24


def readme_config(ports: tuple[int, int]) -> str:
    """The README's `team.yaml` ("serve for a team"), its two `serve` ports made these."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme[readme.index("### serve for a team") :]
    config = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert "127.0.0.1:8651" in config and "127.0.0.1:8652" in config, config
    return config.replace("127.0.0.1:8651", f"127.0.0.1:{ports[0]}").replace(
        "127.0.0.1:8652", f"127.0.0.1:{ports[1]}"
    )


def cooldown(config: str) -> int:
    found = re.search(r"cooldown_time: (\d+)", config)
    assert found is not None, config
    return int(found[1])


class Instance:
    """One person's `serve`: its own agy state folder, session store, token and port."""

    def __init__(self, root: Path, name: str) -> None:
        self.folder = root / name
        self.app = self.folder / "agy-state"
        self.app.mkdir(parents=True)
        self.token = f"serve-{name}-" + uuid.uuid4().hex
        self.port = free_port()
        self.server: ServeProcess | None = None
        self.said = ""

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGY_SIM_SCENARIO")}
        return {
            **env,
            "PYTHONUNBUFFERED": "1",
            "AGY_PROVIDER_SERVE_TOKEN": self.token,
            "AGY_APP_DATA_DIR": str(self.app),
            "ANTIGRAVITY_APP_DATA_DIR": str(self.app),
            "AGY_PROVIDER_CONFIG": str(self.folder / "config.json"),
            "AGY_PROVIDER_SESSIONS": str(self.folder / "sessions.json"),
            "AGY_BIN": agy_sim_path(),
            "AGY_SIM_NO_SERVER": "1",
            "AGY_EVENT_SOURCE": "sqlite",
            "AGY_SIM_SPEED": "20",
            **extra,
        }

    def start(self, **extra: str) -> None:
        # -v: one line per request on stderr, which `requests()` counts.
        self.server = ServeProcess(self.env(**extra), "--port", str(self.port), "-v")
        assert self.server.base == f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.proc.terminate()
            out, err = self.server.proc.communicate(timeout=120)
            self.said += "".join(self.server.lines) + err + out
            self.server = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def team(tmp_path: Path) -> Iterator[tuple[LiteLLMProxy, Instance, Instance]]:
    binary = litellm_bin()
    first, second = Instance(tmp_path, "alice"), Instance(tmp_path, "bob")
    proxy: LiteLLMProxy | None = None
    try:
        first.start()
        second.start()
        config = tmp_path / "team.yaml"
        config.write_text(readme_config((first.port, second.port)))
        env = {
            "ALICE_SERVE_TOKEN": first.token,
            "BOB_SERVE_TOKEN": second.token,
            "LITELLM_MASTER_KEY": MASTER_KEY,
        }
        proxy = LiteLLMProxy(binary, config, tmp_path / "litellm.log", env)
        yield proxy, first, second
    finally:
        if proxy is not None:
            proxy.stop()
        first.stop()
        second.stop()


def ask(proxy: LiteLLMProxy, session: str, messages: list[dict[str, str]], *, stream: bool) -> str:
    """One request to the router as a coding agent sends it (its session header); the answer."""
    body = {"model": "agy", "messages": messages, "stream": stream}
    headers = {"authorization": f"Bearer {MASTER_KEY}", "x-team-session-id": session}
    with httpx.Client(base_url=proxy.base, headers=headers, timeout=300) as http:
        if not stream:
            done = http.post("/v1/chat/completions", json=body)
            assert done.status_code == 200, done.text
            return str(done.json()["choices"][0]["message"]["content"])
        text = []
        with http.stream("POST", "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200, response.read().decode()
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    chunk = json.loads(line[6:])
                    for choice in chunk.get("choices", []):
                        text.append((choice.get("delta") or {}).get("content") or "")
        return "".join(text)


def where(instances: list[Instance], said: str) -> list[tuple[str, str]]:
    """(instance folder, conversation) of every agy conversation whose user steps mention `said`."""
    return [
        (instance.folder.name, stem)
        for instance in instances
        for stem in conversations(instance.app)
        if any(said in text for text in recorded_user_inputs(instance.app, stem))
    ]


def requests_to(instance: Instance, since: float, until: float) -> int:
    """How many chat completions `serve -v` logged (read once it stopped) from `since` to `until`
    (epoch seconds; its log stamps whole local seconds)."""
    stamps = re.findall(
        r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d) \S+ POST /v1/chat/completions", instance.said
    )
    times = [time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S")) for stamp in stamps]
    return sum(1 for t in times if int(since) <= t <= until)


def test_conversations_keep_to_one_instance_and_one_agy_conversation_each(
    team: tuple[LiteLLMProxy, Instance, Instance],
) -> None:
    proxy, first, second = team
    answer = scenario_answer("default")
    sessions = {c: str(uuid.uuid4()) for c in range(6)}
    transcripts: dict[int, list[dict[str, str]]] = {c: [] for c in sessions}
    for turn in range(3):
        for c, session in sessions.items():
            transcripts[c].append({"role": "user", "content": f"conversation {c} turn {turn}"})
            said = ask(proxy, session, transcripts[c], stream=(c + turn) % 2 == 0)
            assert said == answer
            transcripts[c].append({"role": "assistant", "content": said})
    instances = [first, second]
    total = sum(len(conversations(i.app)) for i in instances)
    assert total == 6, f"6 agy conversations, found {total}: {proxy.said()[-2000:]}"
    for c in sessions:
        homes = where(instances, f"conversation {c} turn 0")
        assert len(homes) == 1, f"conversation {c} is in {homes}"
        folder, stem = homes[0]
        app = first.app if folder == first.folder.name else second.app
        inputs = recorded_user_inputs(app, stem)
        turns = [t for t in range(3) if any(f"conversation {c} turn {t}" in s for s in inputs)]
        assert turns == [0, 1, 2], inputs


def test_a_quota_429_sends_every_following_request_to_the_other_instance(
    team: tuple[LiteLLMProxy, Instance, Instance],
) -> None:
    proxy, first, second = team
    answer = scenario_answer("default")
    # Two conversations, one turn each, wherever the router puts them; then `first` runs out of
    # quota (the same serve, restarted on its port with agy saying so).
    sessions = [str(uuid.uuid4()) for _ in range(4)]
    transcripts: dict[str, list[dict[str, str]]] = {s: [] for s in sessions}
    for n, session in enumerate(sessions[:2]):
        transcripts[session] += [{"role": "user", "content": f"before quota {n}"}]
        said = ask(proxy, session, transcripts[session], stream=n == 0)
        transcripts[session].append({"role": "assistant", "content": said})
    first.stop()
    before = len(conversations(second.app))
    first.start(AGY_SIM_SCENARIO="quota-exhausted")
    out_of_quota = time.time()
    asked = 0
    for round_ in range(2):
        for n, session in enumerate(sessions):
            transcripts[session] += [{"role": "user", "content": f"after quota {round_} {n}"}]
            said = ask(proxy, session, transcripts[session], stream=(n + round_) % 2 == 0)
            assert said == answer, proxy.said()[-2000:]
            transcripts[session].append({"role": "assistant", "content": said})
            asked += 1
    first.stop()
    second.stop()
    # Every request after the quota ran out was answered by `second`; `first` saw at most the one
    # that met its 429 (the router retried it on `second`), then nothing until its cooldown ends.
    cooled_until = out_of_quota + cooldown(readme_config((first.port, second.port)))
    assert requests_to(first, out_of_quota, cooled_until) <= 1, first.said[-3000:]
    assert requests_to(second, out_of_quota, time.time()) >= asked
    assert len(conversations(second.app)) > before
    assert all(
        folder == second.folder.name
        for round_ in range(2)
        for n in range(4)
        for folder, _ in where([first, second], f"after quota {round_} {n}")
    )
