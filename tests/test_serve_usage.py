"""serve's `GET /health` (no token, says nothing, still behind the Host check) and `GET /v1/usage`
(agy's quota windows as `agy-provider usage` reads them, JSON or a table; a spent quota is the
429 a turn gets), and the clients' session headers a router's affinity keys on. Real servers on
127.0.0.1 running agy-sim, or a stand-in agy for `/usage`'s refusal; the loop answers while
agy's `/usage` runs.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from live_helpers import agy_sim_path
from live_helpers import leftovers
from live_helpers import scenario_answer
from serve_helpers import Served
from serve_helpers import served_fixture  # noqa: F401 (the `served` fixture)
from serve_helpers import start_server
from test_serve_owners_live import count_turn_one
from test_serve_owners_live import told
from test_serve_owners_live import watch_turns

from agy_provider.agy.usage_command import read_quota_usage

pytestmark = pytest.mark.slow

pytest.importorskip("openai", reason="the serve extra is not installed")


async def test_health_answers_without_the_token_and_says_nothing(served: Served) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        health = await http.get(f"{served.base}/health")
        assert (health.status_code, health.json()) == (200, {"status": "ok"})
        assert (await http.head(f"{served.base}/health")).status_code == 200
        # Still behind the Host/Origin check: a page reaching the port by DNS rebinding gets
        # nothing, not even "ok".
        rebound = await http.get(f"{served.base}/health", headers={"host": "evil.example:80"})
        assert rebound.status_code == 403
        foreign = await http.get(
            f"{served.base}/health", headers={"origin": "https://evil.example"}
        )
        assert foreign.status_code == 403
        # Only GET/HEAD are open; the quota is not.
        assert (await http.post(f"{served.base}/health")).status_code == 401
        assert (await http.get(f"{served.base}/v1/usage")).status_code == 401


async def test_usage_is_agys_quota_windows_as_json_or_a_table(served: Served) -> None:
    async with httpx.AsyncClient(timeout=120) as http:
        answer = await http.get(f"{served.base}/v1/usage", headers=served.headers())
        assert answer.status_code == 200
        body = answer.json()
        # The same data `agy-provider usage --json` prints (read by the same library call).
        cli = (await asyncio.to_thread(read_quota_usage, agy_sim_path())).to_json()
        assert body.keys() == cli.keys()
        assert [(b["window"], b["remaining"]) for b in body["buckets"]] == [
            (b["window"], b["remaining"]) for b in cli["buckets"]
        ]
        assert [b["window"] for b in body["buckets"]] == ["5h", "weekly"]

        for asked in ({"accept": "text/plain"}, {}):
            query = "" if asked else "?format=text"
            table = await http.get(
                f"{served.base}/v1/usage{query}", headers={**served.headers(), **asked}
            )
            assert table.status_code == 200
            assert table.headers["content-type"].startswith("text/plain")
            lines = table.text.splitlines()
            assert [line.split()[0] for line in lines] == ["5h", "weekly"]
            assert "62% left" in lines[0] and "resets" in lines[0]


async def test_a_spent_quota_is_a_429_with_retry_after_and_the_loop_answers_meanwhile(
    live_env: Path, tmp_path: Path
) -> None:
    # A stand-in agy whose `/usage` answers (once the test lets it) what agy prints when its
    # quota is spent (AGY-FORMATS §2.2): the refusal, when it resets, exit 1.
    release = tmp_path / "release"
    refusal = {
        "conversation_id": "",
        "status": "ERROR",
        "error": "Individual quota reached. Upgrade your plan for more. Resets in 3h20m.",
        "num_turns": 0,
    }
    agy = tmp_path / "spent-agy"
    agy.write_text(
        "#!/bin/sh\n"
        f"while [ ! -e '{release}' ]; do sleep 0.02; done\n"
        f"echo '{json.dumps(refusal)}'\n"
        "exit 1\n"
    )
    agy.chmod(0o755)
    served, stop, task = await start_server(live_env, agy_bin=str(agy))
    try:
        async with httpx.AsyncClient(timeout=120) as http:
            reading = asyncio.ensure_future(
                http.get(f"{served.base}/v1/usage", headers=served.headers())
            )
            text = asyncio.ensure_future(
                http.get(f"{served.base}/v1/usage?format=text", headers=served.headers())
            )
            # agy's /usage is still running: the server answers all the same.
            health = await http.get(f"{served.base}/health")
            assert health.status_code == 200
            assert not reading.done()
            release.touch()
            answer, table = await reading, await text
        assert answer.status_code == 429
        assert 0 < int(answer.headers["retry-after"]) <= 3 * 3600 + 20 * 60
        assert answer.headers["x-ratelimit-remaining-requests"] == "0"
        assert "Resets in 3h20m" in answer.json()["error"]["message"]
        assert table.status_code == 429 and "Resets in 3h20m" in table.text
    finally:
        stop.set()
        await task
    assert not leftovers(live_env)


@pytest.mark.parametrize("header", ["X-Claude-Code-Session-Id", "session_id", "x-opencode-session"])
async def test_a_clients_session_header_owns_its_conversation(
    served: Served, monkeypatch: pytest.MonkeyPatch, header: str
) -> None:
    # What a router's session affinity keys on keys the conversation here too: the same
    # transcript under another session continues nothing of the first one's.
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    client = served.openai()
    turns = watch_turns(served)
    history = await count_turn_one(client, extra_headers={header: "session-one"})
    go_on = [*history, {"role": "user", "content": "Go on."}]
    other = await client.chat.completions.create(
        model="default", messages=go_on, extra_headers={header: "session-two"}
    )
    assert other.choices[0].message.content == scenario_answer("two-turn", 0)
    own = await client.chat.completions.create(
        model="default", messages=go_on, extra_headers={header: "session-one"}
    )
    assert own.choices[0].message.content == scenario_answer("two-turn", 1)
    source = header.lower()
    assert told(turns) == [(source, "new"), (source, "new"), (source, "continued")]
