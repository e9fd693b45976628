"""What Claude Code sends, read purely: mid-conversation `system` messages kept at their place, the
JSON `metadata.user_id`'s `session_id` as the key, `thinking: adaptive` with
`output_config.effort`, `cache_control` everywhere; and the model map (`serve_models`), bodies
read defensively (`serve_body`)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agy_provider.hosts.serve.ask import RequestError
from agy_provider.hosts.serve.ask import user_id_key
from agy_provider.hosts.serve.body import MAX_DEPTH
from agy_provider.hosts.serve.body import BodyError
from agy_provider.hosts.serve.body import parse_body
from agy_provider.hosts.serve.convert import anthropic_ask
from agy_provider.hosts.serve.convert import openai_ask
from agy_provider.hosts.serve.log import RequestRecord
from agy_provider.hosts.serve.log import Seen
from agy_provider.hosts.serve.log import mask_headers
from agy_provider.hosts.serve.models import ModelMap
from agy_provider.hosts.serve.models import parse_model_map
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ToolResultMessage
from agy_provider.pi.types import UserMessage

CATALOG = [
    "gemini-3.8-flash",
    "gemini-3.8-flash-high",
    "gemini-3.7-flash",
    "claude-sonnet-4-6",
    "claude-opus-4-6-thinking",
    "gpt-oss-120b-medium",
]
SESSION = "3aca182d-54b8-43d7-a342-9f6cb1c43344"
USER_ID = json.dumps({"device_id": "d" * 64, "account_uuid": "", "session_id": SESSION})


def texts(message: Any) -> list[str]:
    content = message.content
    return [content] if isinstance(content, str) else [b.text for b in content]


# --- Claude Code's request fields --------------------------------------------------------------


def test_a_mid_conversation_system_message_stays_where_it_was_sent() -> None:
    body = {
        "model": "default",
        "max_tokens": 32000,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Hi!"}]},
            {"role": "system", "content": "Agent types: claude, Explore."},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
            {"role": "system", "content": [{"type": "text", "text": "Today is Friday."}]},
            {"role": "user", "content": "And again?"},
        ],
    }
    first, answer, second = anthropic_ask(body).context.messages
    assert texts(first) == [
        "Hi!",
        "<system-reminder>\nAgent types: claude, Explore.\n</system-reminder>",
    ]
    assert texts(answer) == ["Hello."]
    # Before the user's own words, as it came before them.
    assert texts(second) == [
        "<system-reminder>\nToday is Friday.\n</system-reminder>",
        "And again?",
    ]


def test_a_system_message_after_tool_results_is_a_user_message_of_its_own() -> None:
    body = {
        "model": "default",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "run it"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
            },
            {"role": "system", "content": "The tool ran in /tmp."},
        ],
    }
    *_, result, note = anthropic_ask(body).context.messages
    assert isinstance(result, ToolResultMessage)
    assert isinstance(note, UserMessage)
    assert texts(note) == ["<system-reminder>\nThe tool ran in /tmp.\n</system-reminder>"]
    with pytest.raises(RequestError, match="no user or assistant"):
        anthropic_ask({**body, "messages": [{"role": "system", "content": "only this"}]})


def test_the_json_user_id_gives_its_session_id_as_the_key() -> None:
    assert user_id_key(USER_ID, "metadata.user_id") == (SESSION, "metadata.user_id.session_id")
    assert user_id_key("plain-key", "metadata.user_id") == ("plain-key", "metadata.user_id")
    assert user_id_key(None, "metadata.user_id") == ("", "")
    assert user_id_key('{"device_id": "d"}', "metadata.user_id") == ("", "")
    with pytest.raises(RequestError):
        user_id_key('{"session_id": "-a flag"}', "metadata.user_id")
    with pytest.raises(RequestError):
        user_id_key("{not json", "metadata.user_id")
    ask = anthropic_ask(
        {
            "model": "default",
            "max_tokens": 1,
            "metadata": {"user_id": USER_ID},
            "messages": [{"role": "user", "content": "x"}],
        }
    )
    assert (ask.session_key, ask.key_source) == (SESSION, "metadata.user_id.session_id")
    ask = openai_ask(
        {"model": "default", "user": "u-7", "messages": [{"role": "user", "content": "x"}]}
    )
    assert (ask.session_key, ask.key_source) == ("u-7", "user")


@pytest.mark.parametrize(
    ("fields", "effort"),
    [
        ({"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}}, "high"),
        ({"thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}}, "xhigh"),
        ({"thinking": {"type": "adaptive"}, "output_config": {"effort": "low"}}, "low"),
        ({"thinking": {"type": "adaptive"}}, None),  # agy's own effort
        ({"thinking": {"type": "enabled", "budget_tokens": 31999}}, "high"),
        ({"thinking": {"type": "disabled"}}, None),
    ],
)
def test_adaptive_thinking_and_output_config_effort_choose_agys_effort(
    fields: dict[str, Any], effort: str | None
) -> None:
    body = {"model": "default", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}
    assert anthropic_ask({**body, **fields}).reasoning == effort
    with pytest.raises(RequestError, match=r"output_config\.effort"):
        anthropic_ask({**body, "output_config": {"effort": "loud"}})


def test_cache_control_context_management_and_output_config_format_are_read() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    ask = anthropic_ask(
        {
            "model": "default",
            "max_tokens": 1,
            "system": [
                {"type": "text", "text": "billing header"},
                {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
            ],
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            "output_config": {"format": {"type": "json_schema", "schema": schema}},
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}
                    ],
                }
            ],
        }
    )
    assert ask.context.system_prompt == "billing header\n\nBe brief."
    assert ask.json_schema == schema
    assert list(ask.context.messages[0].content) == [TextContent(text="x")]


# --- the model map -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("asked", "used", "how"),
    [
        ("default", "default", "agy"),
        ("agy/gemini-3.7-flash", "gemini-3.7-flash", "agy"),
        ("gemini-3.8-flash-high", "gemini-3.8-flash-high", "agy"),
        ("gpt-oss-120b-medium", "gpt-oss-120b-medium", "agy"),
        ("claude-opus-4-5-20251101", "claude-opus-4-6-thinking", "map"),
        ("claude-sonnet-4-5", "claude-sonnet-4-6", "map"),
        ("sonnet", "claude-sonnet-4-6", "map"),
        ("claude-haiku-4-5-20251001", "gemini-3.8-flash", "map"),
        ("claude-3-7-something", "claude-sonnet-4-6", "map"),
        ("gpt-4o", "default", "map"),
        ("o3-mini", "default", "map"),
        ("gemini-9-nope", "default", "fallback"),
    ],
)
def test_client_model_names_map_to_agys_models(asked: str, used: str, how: str) -> None:
    choice = ModelMap().choose(asked, CATALOG)
    assert (choice.asked, choice.used, choice.how) == (asked, used, how)


def test_the_users_entries_come_first_and_star_none_switches_the_fallback_off() -> None:
    entries = parse_model_map(
        ["claude-*haiku*=gemini-3.7-flash", "*=none, my-model=gemini-3.8-flash"]
    )
    assert entries == (
        ("claude-*haiku*", "gemini-3.7-flash"),
        ("*", "none"),
        ("my-model", "gemini-3.8-flash"),
    )
    models = ModelMap(entries)
    assert models.choose("claude-haiku-4-5", CATALOG).used == "gemini-3.7-flash"
    assert models.choose("gemini-3.8-flash", CATALOG).used == "gemini-3.8-flash"  # agy's own
    with pytest.raises(RequestError) as refused:
        models.choose("claude-sonnet-4-5", CATALOG)  # `*=none` comes before the defaults
    assert refused.value.status == 404 and refused.value.param == "model"
    # A target agy does not offer gives way to the entries after it.
    fallback = ModelMap([("claude-*", "claude-opus-9")]).choose("claude-opus-4-5", CATALOG)
    assert fallback.used == "claude-opus-4-6-thinking"
    # No catalog (agy could not list it): the name is passed to agy as it is.
    assert ModelMap().choose("claude-sonnet-4-5", None).used == "claude-sonnet-4-5"
    for bad in ("no-equals", "=x", "x="):
        with pytest.raises(ValueError, match="PATTERN=MODEL"):
            parse_model_map([bad])


def test_models_lists_the_aliases_the_map_answers() -> None:
    aliases = dict(ModelMap([("fast", "gemini-3.7-flash")]).aliases(CATALOG))
    assert aliases["fast"] == "gemini-3.7-flash"
    assert aliases["sonnet"] == "claude-sonnet-4-6"
    assert aliases["haiku"] == "gemini-3.8-flash"
    assert aliases["gpt-5"] == "default"
    assert not set(aliases) & set(CATALOG)
    assert "haiku" not in dict(ModelMap().aliases(["claude-sonnet-4-6"]))  # no flash to run it


# --- bodies and the log's pieces ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"[" * 200_000, "deeper"),
        (b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1), "deeper"),
        (b'{"model": "\xff\xfe"}', "UTF-8"),
        (b"[1, 2]", "JSON object"),
        (b'"text"', "JSON object"),
        (b'{"n": ' + b"9" * 5000 + b"}", "not JSON"),
        (b"{not json", "not JSON"),
        (b"", "not JSON"),
    ],
)
def test_hostile_bodies_are_body_errors(raw: bytes, why: str) -> None:
    with pytest.raises(BodyError, match=why):
        asyncio.run(parse_body(raw))


def test_a_body_as_deep_as_allowed_is_read() -> None:
    raw = b'{"a":' * (MAX_DEPTH - 1) + b"1" + b"}" * (MAX_DEPTH - 1)
    assert asyncio.run(parse_body(raw))["a"]


def test_headers_are_shown_with_secrets_masked() -> None:
    token = b"serve-token-0123456789"
    shown = mask_headers(
        [
            (b"authorization", b"Bearer " + token),
            (b"x-api-key", token),
            (b"cookie", b"a=b"),
            (b"x-claude-code-session-id", b"3aca"),
            (b"user-agent", b"claude-cli/2.1.197"),
            (b"x-forwarded-note", b"carries " + token),
        ],
        token,
    )
    assert token.decode() not in shown
    assert "authorization=***" in shown and "x-api-key=***" in shown and "cookie=***" in shown
    assert "user-agent=claude-cli/2.1.197" in shown and "x-forwarded-note=carries ***" in shown


def test_a_record_line_and_what_was_seen() -> None:
    record = RequestRecord(started=0.0, client="127.0.0.1:5", method="POST", path="/v1/messages")
    assert "model=- key=- conversation=- - - first=- total=- tokens=-" in record.line()
    record.model_asked, record.model_used = "claude-sonnet-4-5", "claude-sonnet-4-6"
    record.status, record.tokens, record.total = 200, (100, 7), 1.5
    line = record.line()
    assert "model=claude-sonnet-4-5->claude-sonnet-4-6" in line
    assert " 200 " in line and "tokens=100/7" in line and "total=1.500s" in line
    seen = Seen(bound=2)
    assert [seen.kind(c) for c in ("a", "a", "b", "c", "a")] == [
        "new",
        "continued",
        "new",
        "new",
        "new",  # forgotten: the bound keeps the newest two
    ]


def test_serve_refuses_a_malformed_model_map(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from agy_provider.cli import main

    monkeypatch.setenv("AGY_PROVIDER_CONFIG", str(tmp_path / "config.json"))
    err = io.StringIO()
    assert (
        main(["serve", "--port", "0", "--model-map", "claude-*"], out=io.StringIO(), err=err) == 2
    )
    assert "PATTERN=MODEL" in err.getvalue()
    monkeypatch.setenv("AGY_SERVE_MODEL_MAP", "=x")
    err = io.StringIO()
    assert main(["serve", "--port", "0"], out=io.StringIO(), err=err) == 2
    assert "PATTERN=MODEL" in err.getvalue()
