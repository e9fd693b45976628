"""serve's Responses request side: a `POST /v1/responses` body (with the response it continues,
when it names one) made into pi's `Context` and a turn's settings (`ResponsesAsk`).

Pure: JSON in, values out; `RequestError` naming the field for what a client got wrong or asks
for that agy cannot do (the fields that would change the answer's meaning).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from agy_provider.hosts.serve.ask import DATA_URL
from agy_provider.hosts.serve.ask import RequestError
from agy_provider.hosts.serve.ask import ServeAsk
from agy_provider.hosts.serve.ask import forced_choice
from agy_provider.hosts.serve.ask import plain_assistant
from agy_provider.hosts.serve.ask import read_arguments
from agy_provider.hosts.serve.ask import read_effort
from agy_provider.hosts.serve.ask import read_image
from agy_provider.hosts.serve.ask import read_model
from agy_provider.hosts.serve.ask import read_str
from agy_provider.hosts.serve.ask import read_tool
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

__all__ = ["REFUSED_FIELDS", "Continued", "ResponsesAsk", "responses_ask"]

# Fields whose meaning agy cannot honour: refused (400) rather than silently answered otherwise.
# Everything else a client routinely sends (`store`, `include`, `metadata`, `client_metadata`,
# `prompt_cache_key`, `parallel_tool_calls`, `temperature`, `top_p`, `max_output_tokens`,
# `truncation`, `service_tier`, `reasoning.summary`, `text.verbosity`, `stream_options`,
# `user`, `safety_identifier`) is accepted and, where agy has no such knob, ignored.
REFUSED_FIELDS = {
    "background": "agy-provider serve answers in the request; background responses are not kept",
    "conversation": "server-side conversations are not kept; send the items or a "
    "previous_response_id",
    "prompt": "stored prompt templates do not exist here; send instructions and input",
    "max_tool_calls": "agy decides how many tools it calls; the limit cannot be honoured",
    "top_logprobs": "agy gives no log probabilities",
}


@dataclasses.dataclass(frozen=True, slots=True)
class Continued:
    """What a remembered response gives the request that names it in `previous_response_id`:
    the transcript up to and including its answer (the answer as delivered, marks intact), the
    system and developer texts of its input, and its conversation key."""

    transcript: tuple[Message, ...]
    system: tuple[str, ...]
    session_key: str


@dataclasses.dataclass(frozen=True, slots=True)
class ResponsesAsk:
    """A Responses request as a turn (`ask`) plus what the response echoes and remembers.

    `transcript` is the conversation as the client sees it (before serve restores its answers);
    `system` the system and developer texts of the input (carried to a continuing response;
    `instructions` are not); `echo` the request fields a response object repeats;
    `namespaces` the namespace of each tool a `namespace` tool grouped.
    """

    ask: ServeAsk
    transcript: tuple[Message, ...]
    system: tuple[str, ...]
    store: bool
    include: frozenset[str]
    echo: Mapping[str, Any]
    namespaces: Mapping[str, str] = dataclasses.field(default_factory=dict)


def responses_ask(body: Mapping[str, Any], previous: Continued | None = None) -> ResponsesAsk:
    """A Responses request as a turn; `previous`: the response `previous_response_id` names.

    Raises `RequestError` naming the field at fault.
    """
    for field, why in REFUSED_FIELDS.items():
        value = body.get(field)
        if value not in (None, False, 0, {}):
            raise RequestError(f"{field}: {why}", param=field)
    model = read_model(body.get("model"))
    reader = _InputReader(previous)
    reader.read(body.get("input"))
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise RequestError("instructions: expected a string", param="instructions")
    system = [instructions] if instructions else []
    system += [*reader.system_texts]
    tools, namespaces = _tools(body.get("tools"))
    choice = body.get("tool_choice")
    named = choice.get("name") if isinstance(choice, Mapping) else None
    schema, forced, forced_any = forced_choice(
        choice, named, tools, (_text_format(body.get("text")), "text.format")
    )
    reasoning = body.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, Mapping) else None
    include = body.get("include") or []
    if not isinstance(include, list) or not all(isinstance(i, str) for i in include):
        raise RequestError("include: a list of strings", param="include")
    ask = ServeAsk(
        model=model,
        context=Context(
            system_prompt="\n\n".join(system) or None,
            messages=list(reader.messages),
            tools=None if choice == "none" or forced or forced_any else tools,
        ),
        stream=body.get("stream") is True,
        reasoning=read_effort(effort, "reasoning.effort"),
        json_schema=schema,
        forced_tool=forced,
        forced_any=forced_any,
    )
    return ResponsesAsk(
        ask=ask,
        transcript=tuple(reader.messages),
        system=tuple(reader.system_texts),
        store=body.get("store") is not False,
        include=frozenset(include),
        echo=_echo(body),
        namespaces=namespaces,
    )


def _echo(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request fields a response object repeats (with OpenAI's defaults)."""
    text = body.get("text")
    reasoning = body.get("reasoning")
    return {
        "instructions": body.get("instructions"),
        "metadata": body.get("metadata") if isinstance(body.get("metadata"), Mapping) else {},
        "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
        "previous_response_id": body.get("previous_response_id"),
        "prompt_cache_key": body.get("prompt_cache_key"),
        "reasoning": reasoning if isinstance(reasoning, Mapping) else None,
        "store": body.get("store") is not False,
        "temperature": body.get("temperature"),
        "text": text if isinstance(text, Mapping) else {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p"),
        "max_output_tokens": body.get("max_output_tokens"),
        "truncation": body.get("truncation") or "disabled",
        "user": body.get("user"),
    }


# Hosted tools agy has its own of: offered by clients routinely (Codex offers `web_search`),
# ignored rather than refused, since agy searches the web itself.
_AGYS_OWN_TOOLS = frozenset({"web_search", "web_search_preview"})


def _tools(value: object) -> tuple[list[Tool] | None, dict[str, str]]:
    """`tools` → pi's tools and, for those a `namespace` tool grouped, their namespace (each
    function is offered to agy by its own name, which must then be unique)."""
    if value is None:
        return None, {}
    if not isinstance(value, list):
        raise RequestError("tools: expected a list", param="tools")
    tools: list[Tool] = []
    namespaces: dict[str, str] = {}
    for i, tool in enumerate(value):
        kind = tool.get("type") if isinstance(tool, Mapping) else None
        if kind == "namespace" and isinstance(tool.get("tools"), list):
            space = read_str(tool.get("name"), f"tools[{i}].name")
            for inner in tool["tools"]:
                tools.append(_function_tool(i, inner))
                namespaces[tools[-1].name] = space
        elif kind not in _AGYS_OWN_TOOLS:
            tools.append(_function_tool(i, tool))
    names = [t.name for t in tools]
    if len(set(names)) < len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise RequestError(f"tools: more than one tool is named {twice[0]!r}", param="tools")
    return tools or None, namespaces


def _function_tool(i: int, tool: Any) -> Tool:
    if not isinstance(tool, Mapping) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, Mapping) else None
        raise RequestError(
            f"tools[{i}]: only function tools (and namespaces of them) are supported ({kind!r} "
            "is not); agy brings its own tools (shell, files, web search)",
            param="tools",
        )
    return read_tool(tool.get("name"), tool.get("description"), tool.get("parameters"))


def _text_format(value: object) -> Mapping[str, Any] | None:
    if value is None:
        return None
    form = value.get("format") if isinstance(value, Mapping) else None
    kind = form.get("type") if isinstance(form, Mapping) else None
    if form is None or kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema" and isinstance(form, Mapping):
        schema = form.get("schema")
        if not isinstance(schema, Mapping):
            raise RequestError(
                "text.format.schema: a JSON Schema object is required", param="text.format"
            )
        return schema
    raise RequestError(
        "text.format: type must be text, json_object or json_schema", param="text.format"
    )


class _InputReader:
    """`input` (a string or items) → pi messages: user messages, assistant messages (a run of
    assistant-side items — output messages, reasoning, function calls — is one message) and
    tool results; system and developer texts set aside for the system prompt."""

    def __init__(self, previous: Continued | None) -> None:
        self.messages: list[Message] = list(previous.transcript) if previous else []
        self.system_texts: list[str] = list(previous.system) if previous else []
        self.calls: dict[str, str] = {
            c.id: c.name
            for m in self.messages
            if isinstance(m, AssistantMessage)
            for c in m.content
            if isinstance(c, ToolCall)
        }
        self._answer: list[AssistantContent] = []

    def read(self, value: object) -> None:
        if isinstance(value, str):
            self.messages.append(UserMessage(content=value, timestamp=0))
            return
        if not isinstance(value, list) or not value:
            raise RequestError("input: a string or a non-empty list of items", param="input")
        for i, item in enumerate(value):
            where = f"input[{i}]"
            if not isinstance(item, Mapping):
                raise RequestError(f"{where}: expected an object", param=where)
            self._item(item, where)
        self._end_answer()

    def _item(self, item: Mapping[str, Any], where: str) -> None:
        kind = item.get("type", "message")
        if kind == "message":
            self._message(item, where)
        elif kind == "reasoning":
            summary = item.get("summary") or []
            texts = [p.get("text") for p in summary if isinstance(p, Mapping)]
            sealed = item.get("encrypted_content")
            # A sealed item carries our signature (checked by `serve/owners`: another's or an
            # edited one marks the transcript foreign); an unsealed one is the client's echo of
            # a summary, which no API keeps as part of the conversation: left out.
            if isinstance(sealed, str) and sealed:
                self._answer.append(
                    ThinkingContent(
                        thinking="\n\n".join(t for t in texts if isinstance(t, str)),
                        thinking_signature=sealed,
                    )
                )
        elif kind == "function_call":
            call_id = read_str(item.get("call_id"), f"{where}.call_id")
            call = ToolCall(
                id=call_id,
                name=read_str(item.get("name"), f"{where}.name"),
                arguments=read_arguments(item.get("arguments"), where),
            )
            self.calls[call_id] = call.name
            self._answer.append(call)
        elif kind == "function_call_output":
            self._end_answer()
            answered = item.get("call_id")
            if not isinstance(answered, str) or answered not in self.calls:
                raise RequestError(
                    f"{where}.call_id: no earlier function_call has this call_id",
                    param=f"{where}.call_id",
                )
            self.messages.append(
                ToolResultMessage(
                    tool_call_id=answered,
                    tool_name=self.calls[answered],
                    content=self._parts(item.get("output"), where, user=True),
                    is_error=False,
                    timestamp=0,
                )
            )
        else:
            raise RequestError(
                f"{where}.type: {kind!r} items are not supported (messages, reasoning, "
                "function_call and function_call_output are)",
                param=f"{where}.type",
            )

    def _message(self, item: Mapping[str, Any], where: str) -> None:
        role = item.get("role")
        content = item.get("content")
        if role == "assistant":
            parts = self._parts(content, where, user=False)
            self._answer.extend(p for p in parts if isinstance(p, TextContent))
            return
        self._end_answer()
        if role in ("system", "developer"):
            texts = self._parts(content, where, user=False)
            self.system_texts.append("".join(t.text for t in texts if isinstance(t, TextContent)))
        elif role == "user":
            self.messages.append(
                UserMessage(
                    content=content
                    if isinstance(content, str)
                    else self._parts(content, where, user=True),
                    timestamp=0,
                )
            )
        else:
            raise RequestError(f"{where}.role: unsupported role {role!r}", param=f"{where}.role")

    @staticmethod
    def _parts(content: object, where: str, *, user: bool) -> list[UserContent]:
        """A message's (or a tool output's) content: a string, or text and image parts."""
        if isinstance(content, str):
            return [TextContent(text=content)]
        if not isinstance(content, list):
            raise RequestError(f"{where}.content: a string or a list of parts", param=where)
        parts: list[UserContent] = []
        for part in content:
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind in ("input_text", "output_text", "text", "refusal"):
                key = "refusal" if kind == "refusal" else "text"
                parts.append(TextContent(text=read_str(part.get(key), f"{where}.content")))
            elif kind == "input_image" and user:
                parts.append(_data_image(part.get("image_url"), where))
            else:
                raise RequestError(
                    f"{where}.content: unsupported part type {kind!r}", param=f"{where}.content"
                )
        return parts

    def _end_answer(self) -> None:
        if self._answer:
            self.messages.append(plain_assistant(self._answer))
            self._answer = []


def _data_image(url: object, where: str) -> ImageContent:
    match = DATA_URL.fullmatch(url) if isinstance(url, str) else None
    if match is None:
        raise RequestError(
            f"{where}.content: images must be data: URLs (base64); agy cannot fetch URLs or files",
            param=f"{where}.content",
        )
    return read_image(match[2], match[1], where)
