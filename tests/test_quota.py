"""Quota refusals and `/usage` (agy/quota.py) and agy's verdict on a turn (agy/verdict.py).

Pure: Go durations, agy's quota words in a result error or an `AGY_ERROR:` line, the typed error
a host catches, and the defensive `/usage` body parser; property tests say they never raise.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agy_provider.agy.quota import QuotaInfo
from agy_provider.agy.quota import UsageBucket
from agy_provider.agy.quota import is_quota_text
from agy_provider.agy.quota import parse_go_duration
from agy_provider.agy.quota import parse_usage
from agy_provider.agy.quota import quota_error
from agy_provider.agy.quota import quota_from_text
from agy_provider.agy.quota import quota_of
from agy_provider.agy.verdict import agy_error
from agy_provider.agy.verdict import exit_verdict
from agy_provider.agy.verdict import without_stack_trace
from agy_provider.errors import DecodeError
from agy_provider.errors import QuotaExceededError
from agy_provider.errors import SourceError
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Usage

STREAM_WORDS = "Individual quota reached. Upgrade your plan for more. Resets in 120h9m43s."
AGY_ERROR = (
    "AGY_ERROR: RESOURCE_EXHAUSTED (code 429): Individual quota reached for gemini-3.8-flash. "
    "Resets in 3h20m"
)
GO_TRACE = "goroutine 1 [running]:\nmain.main()\n\t/src/agy/main.go:42 +0x1d\nexit status 2"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("120h9m43s", 120 * 3600 + 9 * 60 + 43),
        ("3h20m", 3 * 3600 + 20 * 60),
        ("1.5h", 5400),
        ("250ms", 0.25),
        ("5m0s", 300),
        ("0", 0),
        ("-2m", -120),
        ("1h0.5s", 3600.5),
        ("3µs", 3e-6),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "3", "3x", "h", "1h 2m", ".h", "1" * 100 + "s"])
def test_not_go_durations(text: str) -> None:
    with pytest.raises(DecodeError):
        parse_go_duration(text)


@given(st.text(max_size=80))
def test_go_duration_raises_only_decode_error(text: str) -> None:
    with contextlib.suppress(DecodeError):
        parse_go_duration(text)


def test_the_stream_json_quota_error_with_its_reset() -> None:
    info = quota_from_text(STREAM_WORDS, observed_at=1000.0)
    assert info is not None
    assert info.message == STREAM_WORDS
    assert info.resets_in == 120 * 3600 + 9 * 60 + 43
    assert info.resets_at == 1000.0 + info.resets_in


def test_the_agy_error_line_with_its_code_and_reset() -> None:
    info = quota_from_text(agy_error(AGY_ERROR))
    assert info is not None and info.code == "RESOURCE_EXHAUSTED"
    assert info.resets_in == 3 * 3600 + 20 * 60 and info.resets_at is None


@pytest.mark.parametrize(
    "text",
    ["individual quota reached", "AI credits balance is too low", "Error 429 ... (code 429)"],
)
def test_quota_words_without_a_reset(text: str) -> None:
    info = quota_from_text(text)
    assert info is not None and info.resets_in is None and is_quota_text(text)


@pytest.mark.parametrize("text", ["authentication required", "context canceled", ""])
def test_other_failures_are_not_quota(text: str) -> None:
    assert quota_from_text(text) is None


def test_the_typed_error_is_a_source_error_carrying_the_reset() -> None:
    info = QuotaInfo(STREAM_WORDS, resets_in=60.0, resets_at=2000.0, code="RESOURCE_EXHAUSTED")
    error = info.error()
    assert isinstance(error, QuotaExceededError) and isinstance(error, SourceError)
    assert (error.resets_in, error.resets_at, error.code) == (60.0, 2000.0, "RESOURCE_EXHAUSTED")
    assert str(error) == STREAM_WORDS


def message(stop: str, error: str | None, timestamp: int = 1_000_000) -> AssistantMessage:
    return AssistantMessage(
        content=[],
        api="agy",
        provider="agy",
        model="agy",
        usage=Usage(),
        stop_reason=stop,  # type: ignore[arg-type]
        error_message=error,
        timestamp=timestamp,
    )


def test_quota_of_a_failed_message() -> None:
    info = quota_of(message("error", f"agy failed: {agy_error(AGY_ERROR)}"))
    assert info is not None and info.resets_at == 1000.0 + 12000
    error = quota_error(message("error", STREAM_WORDS, timestamp=0))
    assert error is not None and error.resets_at is None and error.resets_in == 432583


@pytest.mark.parametrize(
    ("stop", "error"), [("stop", None), ("aborted", STREAM_WORDS), ("error", "context canceled")]
)
def test_quota_of_other_messages_is_none(stop: str, error: str | None) -> None:
    assert quota_of(message(stop, error)) is None


# -- agy's verdict: exit code, AGY_ERROR, result ------------------------------------------------


def test_exit_3_gives_agys_own_words_and_when_the_quota_resets() -> None:
    outcome = exit_verdict(
        3, stderr=f"{GO_TRACE}\n{AGY_ERROR}\n", stdout="", result=None, observed_at=0.0
    )
    assert not outcome.ok and outcome.quota is not None
    assert outcome.error.startswith("agy failed: RESOURCE_EXHAUSTED (code 429): Individual quota")
    assert "Resets in 3h20m" in outcome.error
    assert "resets at 1970-01-01 03:20 UTC, in 3h20m" in outcome.error
    assert "goroutine" not in outcome.error and "main.go" not in outcome.error


def test_exit_3_that_is_not_quota_is_agys_line_without_a_quota() -> None:
    outcome = exit_verdict(
        3, stderr="AGY_ERROR: INVALID_ARGUMENT (code 400): bad schema", stdout="", result=None
    )
    assert outcome.error == "agy failed: INVALID_ARGUMENT (code 400): bad schema"
    assert outcome.quota is None


def test_exit_1_with_a_quota_result_is_the_results_error() -> None:
    result = {"status": "ERROR", "error": STREAM_WORDS, "num_turns": 0}
    outcome = exit_verdict(1, stderr="", stdout="", result=result, observed_at=None)
    assert outcome.error.startswith(f"agy ended the turn with ERROR: {STREAM_WORDS}")
    assert outcome.quota is not None and "the quota resets in 120h09m" in outcome.error


def test_exit_1_keeps_what_else_agy_said_on_stderr_once() -> None:
    result = {"status": "ERROR", "error": "authentication failed or timed out"}
    stderr = "Error: authentication failed or timed out\nverify your account at https://x"
    outcome = exit_verdict(1, stderr=stderr, stdout="", result=result)
    assert outcome.error == (
        "agy ended the turn with ERROR: authentication failed or timed out"
        " — agy also said: verify your account at https://x"
    )


def test_a_crash_without_words_names_the_code_and_drops_the_stack_trace() -> None:
    outcome = exit_verdict(2, stderr=f"panic: boom\n{GO_TRACE}", stdout="", result=None)
    assert outcome.error == "agy exited with code 2: panic: boom"
    assert without_stack_trace("fine\n" + GO_TRACE) == "fine"


def test_success_denied_and_canceled_results() -> None:
    assert exit_verdict(0, stderr="", stdout="", result={"status": "SUCCESS"}).ok
    denied = exit_verdict(
        0,
        stderr="",
        stdout="",
        result={"status": "SUCCESS", "denied_actions": [{"display_name": "RunCommand"}]},
    )
    assert not denied.ok and "RunCommand" in denied.error
    canceled = exit_verdict(0, stderr="auto-denied", stdout="", result={"status": "CANCELED"})
    assert canceled.error == "agy ended the turn with CANCELED: CANCELED: auto-denied"


# -- /usage (the body shape is unverified: every reasonable shape is read) ---------------------


@pytest.mark.parametrize(
    "data",
    [
        {"buckets": [{"window": "5h", "remaining_fraction": 0.25, "resets_in": "3h20m"}]},
        [{"name": "5h", "remainingPercent": 25, "resetsIn": 12000}],
        {"usage": {"quotas": [{"label": "5h", "used_fraction": 0.75, "reset_in": "3h20m"}]}},
        {"5h": {"remaining": 0.25, "reset_time": "1970-01-01T03:20:00Z"}},
        "5h: 25% remaining, resets in 3h20m\nnot a bucket line",
        {"window": "5h", "used_percent": "75%", "resetsAt": 12000},
    ],
    ids=["buckets", "list-camel", "nested", "mapping", "text", "one-object"],
)
def test_usage_buckets_in_many_shapes(data: Any) -> None:
    assert parse_usage(data, now=0.0) == [
        UsageBucket(window="5h", remaining=0.25, resets_at=12000.0, resets_in=12000.0)
    ]


def test_usage_without_now_keeps_what_it_was_told() -> None:
    [bucket] = parse_usage({"weekly": 0.5})
    assert bucket == UsageBucket("weekly", 0.5)
    assert parse_usage({"buckets": [{"window": "x"}]}) == []  # nothing known about it


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=30,
)


@given(json_values)
def test_usage_parser_never_raises(data: Any) -> None:
    for bucket in parse_usage(data, now=1.0):
        assert bucket.remaining is None or 0.0 <= bucket.remaining <= 1.0


@given(st.text(max_size=200), st.integers(min_value=0, max_value=10) | st.none())
def test_verdict_never_raises(stderr: str, code: int | None) -> None:
    outcome = exit_verdict(code, stderr=stderr, stdout=stderr, result={"status": stderr[:5]})
    assert isinstance(outcome.error, str)
