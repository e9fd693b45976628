"""serve's request side: OpenAI Chat Completions and Anthropic Messages requests made into pi's
`Context` and a turn's settings (`ServeAsk`).

Pure: JSON in, values out; `RequestError` (an HTTP status and a message) for what a client got
wrong, naming the field.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import TypeAlias
from typing import TypeVar

from agy_provider.hosts.serve.ask import DATA_URL
from agy_provider.hosts.serve.ask import RequestError
from agy_provider.hosts.serve.ask import ServeAsk
from agy_provider.hosts.serve.ask import forced_choice
from agy_provider.hosts.serve.ask import plain_assistant
from agy_provider.hosts.serve.ask import plain_tool_result
from agy_provider.hosts.serve.ask import read_arguments
from agy_provider.hosts.serve.ask import read_effort
from agy_provider.hosts.serve.ask import read_image
from agy_provider.hosts.serve.ask import read_model
from agy_provider.hosts.serve.ask import read_str
from agy_provider.hosts.serve.ask import read_tool
from agy_provider.hosts.serve.ask import read_tool_list
from agy_provider.hosts.serve.ask import session_key
from agy_provider.hosts.serve.ask import user_id_key
from agy_provider.hosts.serve.notes import place_notes
from agy_provider.hosts.serve.notes import system_note
from agy_provider.hosts.serve.notes import user_content
from agy_provider.pi.options import ThinkingLevel
from agy_provider.pi.types import AssistantContent
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import ImageContent
from agy_provider.pi.types import Message
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.pi.types import Tool
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import ToolResultMessage
from agy_provider.pi.types import UserContent
from agy_provider.pi.types import UserMessage

__all__ = [
    "anthropic_ask",
    "openai_ask",
]


_Read = TypeVar("_Read")
# How one kind of Anthropic content block becomes pi's value (None: the block is dropped).
_BlockReader: TypeAlias = Callable[[Mapping[str, Any], str], _Read | None]


# --- OpenAI Chat Completions ---------------------------------------------------------------------


def openai_ask(body: Mapping[str, Any]) -> ServeAsk:
    """A Chat Completions request as a turn. Raises `RequestError` naming the field at fault."""
    model = read_model(body.get("model"))
    if body.get("n") not in (None, 1):
        raise RequestError("n: agy gives one answer per request; send n=1", param="n")
    system: list[str] = []
    messages: list[Message] = []
    calls: dict[str, str] = {}  # tool call id -> tool name, for the `tool` messages
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise RequestError("messages: a non-empty list is required", param="messages")
    for i, item in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(item, Mapping):
            raise RequestError(f"{where}: expected an object", param=where)
        role = item.get("role")
        if role in ("system", "developer"):
            system.append(_openai_text(item.get("content"), where))
        elif role == "user":
            messages.append(
                UserMessage(content=_openai_user(item.get("content"), where), timestamp=0)
            )
        elif role == "assistant":
            message = _openai_assistant(item, where)
            calls.update((c.id, c.name) for c in message.content if isinstance(c, ToolCall))
            messages.append(message)
        elif role == "tool":
            call_id = item.get("tool_call_id")
            if not isinstance(call_id, str) or call_id not in calls:
                raise RequestError(
                    f"{where}.tool_call_id: no earlier assistant tool call has this id",
                    param=f"{where}.tool_call_id",
                )
            content = _result_content(item.get("content"), where, _openai_user)
            messages.append(plain_tool_result(call_id, calls[call_id], content, is_error=False))
        else:
            raise RequestError(f"{where}.role: unsupported role {role!r}", param=f"{where}.role")
    tools = _openai_tools(body.get("tools"))
    choice = body.get("tool_choice")
    named = choice.get("function") if isinstance(choice, Mapping) else None
    schema, forced, forced_any = forced_choice(
        choice,
        named.get("name") if isinstance(named, Mapping) else None,
        tools,
        (_response_format(body.get("response_format")), "response_format"),
    )
    user = session_key(body.get("user"), "user")
    stream_options = body.get("stream_options")
    include_usage = isinstance(stream_options, Mapping) and bool(
        stream_options.get("include_usage")
    )
    return ServeAsk(
        model=model,
        context=Context(
            system_prompt="\n\n".join(system) or None,
            messages=messages,
            # A forced tool is the answer's shape, not a tool agy may call.
            tools=None if choice == "none" or forced or forced_any else tools,
        ),
        stream=body.get("stream") is True,
        reasoning=read_effort(body.get("reasoning_effort"), "reasoning_effort"),
        session_key=user,
        key_source="user" if user else "",
        json_schema=schema,
        include_usage=include_usage,
        forced_tool=forced,
        forced_any=forced_any,
    )


def _openai_text(content: object, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") != "text":
                raise RequestError(f"{where}.content: only text parts are allowed here")
            parts.append(read_str(part.get("text"), f"{where}.content"))
        return "".join(parts)
    raise RequestError(f"{where}.content: expected a string or a list of parts", param=where)


def _openai_user(content: object, where: str) -> str | list[UserContent]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RequestError(f"{where}.content: expected a string or a list of parts", param=where)
    blocks: list[UserContent] = []
    for part in content:
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text":
            blocks.append(TextContent(text=read_str(part.get("text"), f"{where}.content")))
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else image
            match = DATA_URL.fullmatch(url) if isinstance(url, str) else None
            if match is None:
                raise RequestError(
                    f"{where}.content: images must be data: URLs (base64); agy cannot fetch URLs",
                    param=where,
                )
            blocks.append(read_image(match[2], match[1], where))
        else:
            raise RequestError(f"{where}.content: unsupported part type {kind!r}", param=where)
    return blocks


def _openai_assistant(item: Mapping[str, Any], where: str) -> AssistantMessage:
    content: list[AssistantContent] = []
    text = _openai_text(item.get("content"), where)
    if text:
        content.append(TextContent(text=text))
    for j, call in enumerate(item.get("tool_calls") or ()):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            raise RequestError(f"{where}.tool_calls[{j}]: expected a function call", param=where)
        content.append(
            ToolCall(
                id=read_str(call.get("id"), f"{where}.tool_calls[{j}].id"),
                name=read_str(function.get("name"), f"{where}.tool_calls[{j}].function.name"),
                arguments=read_arguments(function.get("arguments"), f"{where}.tool_calls[{j}]"),
            )
        )
    return plain_assistant(content)


def _openai_tools(value: object) -> list[Tool] | None:
    def one(i: int, tool: Any) -> Tool:
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(tool, Mapping) or tool.get("type") != "function" or not function:
            raise RequestError(f"tools[{i}]: only function tools are supported", param="tools")
        return read_tool(function.get("name"), function.get("description"), function.get("parameters"))

    return read_tool_list(value, one)


def _response_format(value: object) -> Mapping[str, Any] | None:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, Mapping) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema" and isinstance(value, Mapping):
        spec = value.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        if not isinstance(schema, Mapping):
            raise RequestError(
                "response_format.json_schema.schema: a JSON Schema object is required",
                param="response_format",
            )
        return schema
    raise RequestError(
        "response_format: type must be text, json_object or json_schema", param="response_format"
    )


# --- Anthropic Messages --------------------------------------------------------------------------


def anthropic_ask(body: Mapping[str, Any]) -> ServeAsk:
    """A Messages request as a turn. Raises `RequestError` naming the field at fault."""
    model = read_model(body.get("model"))
    system = _anthropic_system(body.get("system"))
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise RequestError("messages: a non-empty list is required", param="messages")
    messages: list[Message] = []
    calls: dict[str, str] = {}
    notes: list[UserContent] = []  # mid-conversation system messages not yet placed
    for i, item in enumerate(raw):
        where = f"messages.{i}"
        role = item.get("role") if isinstance(item, Mapping) else None
        if role not in ("user", "assistant", "system"):
            raise RequestError(f"{where}: role must be user, assistant or system", param=where)
        blocks = item.get("content")
        if isinstance(blocks, str):
            blocks = [{"type": "text", "text": blocks}]
        if not isinstance(blocks, list):
            raise RequestError(f"{where}.content: a string or a list of blocks", param=where)
        if role == "system":
            notes.append(system_note(_openai_text(blocks, where)))
        elif role == "assistant":
            place_notes(messages, notes)
            message = _anthropic_assistant(blocks, where)
            calls.update((c.id, c.name) for c in message.content if isinstance(c, ToolCall))
            messages.append(message)
        else:
            read = _anthropic_user(blocks, where, calls)
            if notes and read and isinstance(read[-1], UserMessage):  # before the user's words
                read[-1] = dataclasses.replace(read[-1], content=[*notes, *user_content(read[-1])])
                notes.clear()
            place_notes(messages, notes)
            messages.extend(read)
    if not messages:
        raise RequestError("messages: no user or assistant message", param="messages")
    place_notes(messages, notes)
    tools = _anthropic_tools(body.get("tools"))
    schema, forced = _anthropic_structured(body, tools)
    if forced or _choice(body) == "none":
        tools = None  # the forced tool is the answer's shape, not a tool agy may call
    metadata = body.get("metadata")
    user = metadata.get("user_id") if isinstance(metadata, Mapping) else None
    key, source = user_id_key(user, "metadata.user_id")
    return ServeAsk(
        model=model,
        context=Context(system_prompt=system, messages=messages, tools=tools),
        stream=body.get("stream") is True,
        reasoning=_anthropic_effort(body),
        session_key=key,
        key_source=source,
        json_schema=schema,
        forced_tool=forced,
    )


def _anthropic_effort(body: Mapping[str, Any]) -> ThinkingLevel | None:
    """agy's effort: `output_config.effort` when given (Claude Code sends it with `thinking:
    {type: adaptive}`, which leaves the effort to agy), else `thinking.budget_tokens`."""
    output = body.get("output_config")
    if isinstance(output, Mapping) and output.get("effort") is not None:
        return read_effort(output.get("effort"), "output_config.effort")
    thinking = body.get("thinking")
    if isinstance(thinking, Mapping) and thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        budget = budget if isinstance(budget, int) else 0
        return "low" if budget < 4096 else "medium" if budget < 16384 else "high"
    return None


def _anthropic_system(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value or None
    if isinstance(value, list):
        texts = []
        for block in value:
            if not isinstance(block, Mapping) or block.get("type") != "text":
                raise RequestError("system: only text blocks are allowed", param="system")
            texts.append(read_str(block.get("text"), "system"))
        return "\n\n".join(texts) or None
    raise RequestError("system: a string or a list of text blocks", param="system")


def _anthropic_assistant(blocks: list[Any], where: str) -> AssistantMessage:
    return plain_assistant(_anthropic_blocks(blocks, where, "assistant", _ASSISTANT_BLOCKS))


def _anthropic_user(blocks: list[Any], where: str, calls: Mapping[str, str]) -> list[Message]:
    """A user turn: its tool results first (each a `ToolResultMessage`), then its text."""
    readers: dict[str, _BlockReader[UserContent | ToolResultMessage]] = {
        "text": _text_block,
        "image": _image_block,
        "tool_result": functools.partial(_tool_result_block, calls=calls),
    }
    read: list[UserContent | ToolResultMessage] = _anthropic_blocks(blocks, where, "user", readers)
    results: list[Message] = [b for b in read if isinstance(b, ToolResultMessage)]
    content = [b for b in read if not isinstance(b, ToolResultMessage)]
    if content:
        results.append(UserMessage(content=content, timestamp=0))
    return results


def _anthropic_blocks(
    blocks: list[Any], where: str, role: str, readers: Mapping[str, _BlockReader[_Read]]
) -> list[_Read]:
    """Each content block read by the reader of its `type` (one that reads None is dropped);
    a block of a type `role` has no reader for is refused."""
    read: list[_Read] = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, Mapping) else None
        reader = readers.get(kind) if isinstance(kind, str) else None
        if reader is None:
            raise RequestError(f"{where}: unsupported {role} block {kind!r}", param=where)
        item = reader(block, where)
        if item is not None:
            read.append(item)
    return read


def _text_block(block: Mapping[str, Any], where: str) -> TextContent:
    return TextContent(text=read_str(block.get("text"), where))


def _thinking_block(block: Mapping[str, Any], where: str) -> ThinkingContent:
    signature = block.get("signature")
    return ThinkingContent(
        thinking=read_str(block.get("thinking"), where),
        thinking_signature=signature if isinstance(signature, str) else None,
    )


def _tool_use_block(block: Mapping[str, Any], where: str) -> ToolCall:
    arguments = block.get("input")
    if not isinstance(arguments, Mapping):
        raise RequestError(f"{where}: tool_use.input must be an object", param=where)
    return ToolCall(
        id=read_str(block.get("id"), f"{where}.id"),
        name=read_str(block.get("name"), f"{where}.name"),
        arguments=dict(arguments),
    )


def _image_block(block: Mapping[str, Any], where: str) -> ImageContent:
    source = block.get("source")
    if not isinstance(source, Mapping) or source.get("type") != "base64":
        raise RequestError(f"{where}: images must be base64 sources", param=where)
    return read_image(source.get("data"), read_str(source.get("media_type"), where), where)


def _tool_result_block(
    block: Mapping[str, Any], where: str, *, calls: Mapping[str, str]
) -> ToolResultMessage:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or call_id not in calls:
        raise RequestError(
            f"{where}: tool_result.tool_use_id names no earlier tool_use", param=where
        )
    content = _result_content(block.get("content"), where, _anthropic_result_parts)
    return plain_tool_result(call_id, calls[call_id], content, is_error=block.get("is_error") is True)


def _anthropic_result_parts(parts: object, where: str) -> list[UserContent]:
    """A `tool_result`'s content blocks: text and images (Claude Code's `Read` of a picture)."""
    readers: dict[str, _BlockReader[UserContent]] = {"text": _text_block, "image": _image_block}
    if not isinstance(parts, list):
        raise RequestError(f"{where}: tool_result.content is a string or a list", param=where)
    return _anthropic_blocks(parts, f"{where}.content", "tool_result", readers)


def _result_content(
    value: object, where: str, parts: Callable[[Any, str], str | list[UserContent]]
) -> list[UserContent]:
    """A tool result's content in either API's shape: none, a string, or parts (text and
    images) that `parts` reads."""
    if value is None:
        return [TextContent(text="")]
    if isinstance(value, str):
        return [TextContent(text=value)]
    read = parts(value, where)
    blocks: list[UserContent] = [TextContent(text=read)] if isinstance(read, str) else list(read)
    return blocks or [TextContent(text="")]


_ASSISTANT_BLOCKS: dict[str, _BlockReader[AssistantContent]] = {
    "text": _text_block,
    "thinking": _thinking_block,
    "tool_use": _tool_use_block,
    "redacted_thinking": lambda _block, _where: None,  # sealed by another model: dropped
}


def _anthropic_tools(value: object) -> list[Tool] | None:
    def one(i: int, tool: Any) -> Tool:
        if not isinstance(tool, Mapping) or tool.get("type") not in (None, "custom"):
            raise RequestError(
                f"tools.{i}: only client tools (name, input_schema) are supported; agy brings "
                "its own server tools",
                param="tools",
            )
        return read_tool(tool.get("name"), tool.get("description"), tool.get("input_schema"))

    return read_tool_list(value, one)


def _choice(body: Mapping[str, Any]) -> str:
    choice = body.get("tool_choice")
    return str(choice.get("type", "")) if isinstance(choice, Mapping) else ""


def _anthropic_structured(
    body: Mapping[str, Any], tools: list[Tool] | None
) -> tuple[Mapping[str, Any] | None, str]:
    """(the answer's schema, the forced tool's name): `output_format` (json_schema), or the
    tool-forcing pattern — `tool_choice: {type: tool, name}` — whose tool's schema shapes it."""
    output = body.get("output_format")
    config = body.get("output_config")
    if output is None and isinstance(config, Mapping):
        output = config.get("format")  # the newer name of `output_format`
    if isinstance(output, Mapping) and output.get("type") == "json_schema":
        schema = output.get("schema")
        if not isinstance(schema, Mapping):
            raise RequestError("output_format.schema: a JSON Schema object", param="output_format")
        return schema, ""
    choice = body.get("tool_choice")
    if _choice(body) == "tool" and isinstance(choice, Mapping):
        name = choice.get("name")
        for tool in tools or ():
            if tool.name == name:
                return tool.parameters, tool.name
        raise RequestError(f"tool_choice.name: no tool named {name!r}", param="tool_choice")
    return None, ""


# --- shared pieces -------------------------------------------------------------------------------














