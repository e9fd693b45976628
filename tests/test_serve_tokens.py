"""serve's token estimate, pure: what each kind of byte costs, images by tile, a long text
sampled to the same figure, a context's framing, the model's window and the overflow error
clients classify (pi's `isContextOverflow` patterns)."""

from __future__ import annotations

import base64
import json
import re
import struct

import pytest

from agy_provider.hosts.serve.convert import anthropic_ask
from agy_provider.hosts.serve.convert import openai_ask
from agy_provider.hosts.serve.tokens import DEFAULT_CONTEXT_WINDOW
from agy_provider.hosts.serve.tokens import _priced
from agy_provider.hosts.serve.tokens import context_window
from agy_provider.hosts.serve.tokens import estimate_context
from agy_provider.hosts.serve.tokens import estimate_text
from agy_provider.hosts.serve.tokens import overflow_response
from agy_provider.pi.types import Context
from agy_provider.pi.types import ImageContent
from agy_provider.pi.types import UserMessage

# pi's own patterns for an overflow (packages/ai/src/utils/overflow.ts), the ones our errors
# must meet.
PI_OVERFLOW = (
    re.compile(r"prompt is too long", re.I),
    re.compile(r"exceeds the context window", re.I),
)

PROSE = "The quick brown fox jumps over the lazy dog while the provider streams its answer. "


def png_header(width: int, height: int) -> str:
    header = (
        b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", width, height)
    )
    return base64.b64encode(header + b"\x08\x02\x00\x00\x00").decode()


def test_english_is_about_four_characters_a_token_and_each_digit_one() -> None:
    tokens = estimate_text(PROSE * 100)
    assert 3.5 <= len(PROSE * 100) / tokens <= 5.0
    assert estimate_text("1234567890") == pytest.approx(10)
    assert estimate_text("") == 0


def test_cjk_and_emoji_cost_more_per_character_than_letters() -> None:
    cjk = "会话的所有者由客户端自己的信号决定" * 10
    assert 0.6 <= estimate_text(cjk) / len(cjk) <= 1.0
    assert estimate_text("😀" * 10) == pytest.approx(15)
    assert estimate_text("a" * 10) < estimate_text("é" * 10) < estimate_text("会" * 10)


def test_a_long_text_is_sampled_to_about_its_whole_price() -> None:
    code = (
        "def place(self, ask, owner):\n    messages = self._verified(ask, owner.key)\n"
        "    return Placement(messages, owner.key)  # 42\n"
    ) * 3000
    assert len(code) > 100_000
    assert estimate_text(code) == pytest.approx(_priced(code), rel=0.03)


def test_images_cost_by_their_tiles() -> None:
    def cost(data: str) -> int:
        image = ImageContent(data=data, mime_type="image/png")
        with_image = Context(messages=[UserMessage(content=[image], timestamp=0)])
        return estimate_context(with_image) - estimate_context(
            Context(messages=[UserMessage(content=[], timestamp=0)])
        )

    assert cost(png_header(300, 200)) == 258
    assert cost(png_header(1536, 800)) == 258 * 2 * 2
    assert cost(base64.b64encode(b"\xff\xd8\xff\xe0 a jpeg").decode()) == 258  # size unknown


def test_a_context_counts_its_system_prompt_messages_tools_and_calls() -> None:
    body = {
        "model": "default",
        "messages": [{"role": "user", "content": PROSE}],
    }
    bare = estimate_context(openai_ask(body).context)
    system = estimate_context(
        openai_ask(
            {**body, "messages": [{"role": "system", "content": PROSE}, *body["messages"]]}
        ).context
    )
    tool = {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Look up an order.",
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
        },
    }
    tools = estimate_context(openai_ask({**body, "tools": [tool]}).context)
    assert bare < system and bare < tools
    both_apis = estimate_context(anthropic_ask({**body, "max_tokens": 10}).context)
    assert both_apis == bare


def test_the_window_is_the_model_familys() -> None:
    assert context_window("default") == DEFAULT_CONTEXT_WINDOW == 1_048_576
    assert context_window("gemini-3.8-flash") == 1_048_576
    assert context_window("claude-sonnet-4.5") == 200_000
    assert context_window("gpt-oss-120b") == 131_072


def test_the_overflow_error_is_what_clients_classify_as_overflow() -> None:
    anthropic = overflow_response("anthropic", 1_200_000, 1_048_576)
    body = json.loads(bytes(anthropic.body))
    assert anthropic.status_code == 400 and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"] == "prompt is too long: 1200000 tokens > 1048576 maximum"
    openai = overflow_response("openai", 1_200_000, 1_048_576)
    error = json.loads(bytes(openai.body))["error"]
    assert openai.status_code == 400 and error["code"] == "context_length_exceeded"
    for message in (body["error"]["message"], error["message"]):
        assert any(p.search(message) for p in PI_OVERFLOW)
