"""serve's status for a failed turn (`hosts/serve/status.py`), pure: which status, the reset time
in the text once, and only the rate-limit headers agy's words support. The live side (the held
status, the SDKs raising before the stream) is `tests/test_serve_status.py`.
"""

from __future__ import annotations

import json

import pytest

from agy_provider.hosts.serve.status import refusal_of
from agy_provider.hosts.serve.status import refusal_response
from agy_provider.pi.types import AssistantMessage

NOW = 1_796_000_000.0  # epoch seconds: 2026-11-30 00:53:20 UTC


def failed(text: str, *, at: float = NOW) -> AssistantMessage:
    return AssistantMessage(
        content=(),
        api="agy",
        provider="agy",
        model="default",
        stop_reason="error",
        timestamp=int(at * 1000),
        error_message=text,
    )


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("agy-provider could not start the turn: bad option", 400),
        ("model gemini-0 is not available. Run agy models to list them", 404),
        ("Individual quota reached. Upgrade your plan for more.", 429),
        ("HTTP 429: RESOURCE_EXHAUSTED (code 429): capacity", 429),
        ("agy exited with code 2: panic: runtime error", 502),
        ("", 502),
    ],
)
def test_each_failure_has_its_status(text: str, status: int) -> None:
    assert refusal_of(failed(text), NOW).status == status


def test_a_quota_refusal_says_when_it_resets_in_text_and_headers() -> None:
    # agy said it 10 s before now: 3h20m from then is 3h19m50s from now.
    refused = refusal_of(failed("Individual quota reached. Resets in 3h20m.", at=NOW - 10), NOW)
    assert refused.status == 429
    assert refused.headers == {
        "retry-after": str(3 * 3600 + 20 * 60 - 10),
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "3h19m50s",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2026-11-30T04:13:10Z",
    }
    assert refused.text.startswith("Individual quota reached. Resets in 3h20m.")
    assert "resets at 2026-11-30 04:13:10 UTC, in 3h19m50s" in refused.text


def test_the_reset_time_is_said_once() -> None:
    # The turn's own hint (agy/result.resets_hint) already says it: not said again.
    said = "Individual quota reached. Resets in 3h20m. (the quota resets at 2026-11-30 04:13 UTC, in 3h20m)"
    refused = refusal_of(failed(said), NOW)
    assert refused.text == said
    assert refused.headers["retry-after"] == str(3 * 3600 + 20 * 60)


def test_a_quota_without_a_reset_time_invents_none() -> None:
    refused = refusal_of(failed("Individual quota reached. Upgrade your plan for more."), NOW)
    assert refused.status == 429
    assert refused.headers == {
        "x-ratelimit-remaining-requests": "0",
        "anthropic-ratelimit-requests-remaining": "0",
    }
    assert refused.text == "Individual quota reached. Upgrade your plan for more."


def test_a_reset_already_past_says_retry_now() -> None:
    refused = refusal_of(failed("Individual quota reached. Resets in 5s.", at=NOW - 60), NOW)
    assert refused.headers["retry-after"] == "0"


def test_the_response_is_in_each_apis_shape() -> None:
    refused = refusal_of(failed("Individual quota reached. Resets in 1h."), NOW)
    openai = refusal_response("openai", refused)
    assert openai.status_code == 429
    assert openai.headers["retry-after"] == "3600"
    assert openai.headers["x-should-retry"] == "false"
    error = json.loads(bytes(openai.body))["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "insufficient_quota")
    anthropic = refusal_response("anthropic", refused)
    assert json.loads(bytes(anthropic.body))["error"]["type"] == "rate_limit_error"
    dead = refusal_response("anthropic", refusal_of(failed("agy exited with code 2"), NOW))
    assert dead.status_code == 502 and "retry-after" not in dead.headers
    assert json.loads(bytes(dead.body))["error"]["type"] == "api_error"
