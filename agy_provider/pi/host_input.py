"""What hosts pass to `stream_simple`, made into our `Model`, `Context` and `SimpleStreamOptions`.

Owns the leniency: pi's camelCase JSON, other pi ports' objects (pydantic, dataclasses, plain
objects; snake_case or camelCase), options as a mapping or any object, any abort signal, system
messages inside the message list. Anything else is a `UsageError` naming the field.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import Final
from typing import get_args

from agy_provider.errors import DecodeError
from agy_provider.errors import UsageError
from agy_provider.pi.abort_bridge import SignalBridge
from agy_provider.pi.abort_bridge import bridge_signal
from agy_provider.pi.agy_model import agy_model
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.options import ThinkingBudgets
from agy_provider.pi.options import ThinkingLevel
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import Message
from agy_provider.pi.types import Model
from agy_provider.pi.types import ModelCost
from agy_provider.pi.types import Tool
from agy_provider.pi.types import ToolResultMessage
from agy_provider.pi.types import UserMessage
from agy_provider.pi.types import message_from_json
from agy_provider.wire.jsontext import MAX_DEPTH
from agy_provider.wire.jsontext import clean_text

__all__ = ["HostTurn", "checked_cwd", "normalise_turn"]

log = logging.getLogger(__name__)

_SNAKE = re.compile(r"_([a-z0-9])")
# Other ports' names for pi's fields (pi-agent-core's ImageContent says media_type).
_ALIASES = {"mediaType": "mimeType"}
# Roles whose messages carry instructions rather than conversation (newer pi, OpenAI's name).
_SYSTEM_ROLES = ("system", "developer")
_STOP_REASONS = ("stop", "length", "toolUse", "error", "aborted")
# Option names a host may use for its abort signal: pi's, and pi-agent-core's asyncio.Event.
_SIGNAL_NAMES = ("signal", "cancel_event", "cancelEvent", "abort_signal", "abortSignal")
_THINKING_LEVELS: Final = get_args(ThinkingLevel)


@dataclasses.dataclass(frozen=True, slots=True)
class HostTurn:
    """A turn's input in our types; `abort` follows the host's signal once attached to a stream."""

    model: Model
    context: Context
    options: SimpleStreamOptions
    abort: SignalBridge | None


def normalise_turn(model: object, context: object, options: object = None) -> HostTurn:
    """Our types for whatever a host passed. Raises `UsageError` naming the field at fault.

    Every text of the context comes back without lone surrogates (each one U+FFFD, as pi's
    providers sanitise them): such text cannot be encoded as UTF-8, for agy or for a digest.
    """
    bridge, parsed = _options(options)
    return HostTurn(_model(model), _sanitised(_context(context)), parsed, bridge)


def checked_cwd(cwd: object) -> str | None:
    """The folder agy is to work in, made absolute; None (the host's own folder) stays None.

    Raises `UsageError` saying what is wrong: not a path, a NUL in it, a relative path while the
    current folder is gone, or not an existing folder this process may enter.
    """
    if cwd is None:
        try:
            os.getcwd()
        except OSError as exc:
            raise UsageError(
                f"cwd: the current folder no longer exists ({exc.strerror or exc}); "
                "pass cwd, the folder agy is to work in"
            ) from exc
        return None
    if not isinstance(cwd, str | os.PathLike):
        raise UsageError(f"cwd: expected a folder path (str), got {type(cwd).__name__}")
    path = os.fspath(cwd)
    if not isinstance(path, str):
        raise UsageError("cwd: expected a folder path as text, got bytes")
    if not path:
        raise UsageError("cwd: expected a folder path, got an empty string")
    if "\0" in path:
        raise UsageError(f"cwd: a folder path cannot contain a NUL character: {path!r}")
    try:
        folder = os.path.abspath(path)
    except OSError as exc:  # relative, and the current folder is gone
        raise UsageError(
            f"cwd: cannot make {path!r} absolute: the current folder no longer exists "
            f"({exc.strerror or exc}); pass an absolute path"
        ) from exc
    try:
        is_folder = os.path.isdir(folder) if os.path.exists(folder) else None
    except (OSError, ValueError) as exc:
        raise UsageError(f"cwd: cannot look at {folder!r}: {exc}") from exc
    if is_folder is None:
        raise UsageError(f"cwd: {folder!r} does not exist; pass the folder agy is to work in")
    if not is_folder:
        raise UsageError(f"cwd: {folder!r} is not a folder; pass the folder agy is to work in")
    if not os.access(folder, os.X_OK):
        raise UsageError(f"cwd: {folder!r} cannot be entered (permission denied)")
    return folder


# --- lone surrogates -----------------------------------------------------------------------------


def _sanitised(context: Context) -> Context:
    """`context` with every string in it (messages, system prompt, tools) free of lone surrogates.

    What needs no change comes back as itself, so a clean context costs one walk and no copies.
    """
    cleaned: Context = _clean(context, 0)
    return cleaned


def _clean(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if value is None or isinstance(value, int | float):  # no text in it (bool is an int)
        return value
    if depth > MAX_DEPTH:  # past any value agy can be sent (jsontext's bound): left as it is
        return value
    names = _field_names(type(value))
    if names is not None:
        changes = {}
        for name in names:
            old = getattr(value, name)
            new = _clean(old, depth + 1)
            if new is not old:
                changes[name] = new
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, list | tuple):
        items = [_clean(item, depth + 1) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, Mapping):
        pairs = [(_clean(k, depth + 1), _clean(v, depth + 1)) for k, v in value.items()]
        if all(
            k is old_k and v is old_v
            for (k, v), (old_k, old_v) in zip(pairs, value.items(), strict=True)
        ):
            return value
        return dict(pairs)
    return value


# The types a walk meets are pi's few message and content types (a host's own at most a few more):
# this many are remembered, any more are looked at each time.
_KNOWN_TYPES = 256
_FIELD_NAMES: dict[type, tuple[str, ...] | None] = {}


def _field_names(kind: type) -> tuple[str, ...] | None:
    """The field names of a dataclass type, looked up once per type (None: not a dataclass)."""
    if kind in _FIELD_NAMES:
        return _FIELD_NAMES[kind]
    names = None
    if dataclasses.is_dataclass(kind):
        names = tuple(f.name for f in dataclasses.fields(kind))
    if len(_FIELD_NAMES) < _KNOWN_TYPES:
        _FIELD_NAMES[kind] = names
    return names


# --- plain pi JSON from any object ---------------------------------------------------------------


def _plain(value: Any) -> Any:
    """pi JSON from a mapping, a pydantic model, a dataclass, a sequence or our own types."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence):
        return [_plain(v) for v in value]
    to_json = getattr(value, "to_json", None)
    if callable(to_json) and type(value).__module__.startswith("agy_provider."):
        return to_json()
    dump = getattr(value, "model_dump", None)
    if callable(dump):  # pydantic v2
        return _plain(dump(by_alias=True))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        # pi-ai-python keeps `role` and `type` as ClassVars, which fields() leaves out.
        for tag in ("role", "type"):
            if tag not in out and isinstance(getattr(value, tag, None), str):
                out[tag] = getattr(value, tag)
        return out
    return value


def _camel(d: Mapping[str, Any]) -> dict[str, Any]:
    """One level of keys in pi's camelCase (`tool_call_id` → `toolCallId`)."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = _SNAKE.sub(lambda m: m.group(1).upper(), key)
        out[_ALIASES.get(name, name)] = value
    return out


def _object(value: Any, field: str) -> dict[str, Any]:
    plain = _plain(value)
    if not isinstance(plain, Mapping):
        raise UsageError(
            f"{field}: expected a pi object (mapping, pydantic model or dataclass), "
            f"got {type(value).__name__}"
        )
    return _camel(plain)


def _fields(value: Any) -> dict[str, Any]:
    """A mapping's items or a dataclass's fields, one level, values as they are."""
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}


def _attr(value: Any, *names: str) -> Any:
    """The first of `names` a mapping or an object has (None if none)."""
    for name in names:
        if isinstance(value, Mapping):
            if value.get(name) is not None:
                return value[name]
        elif getattr(value, name, None) is not None:
            return getattr(value, name)
    return None


# --- model ---------------------------------------------------------------------------------------


def _model(model: object) -> Model:
    if isinstance(model, Model):
        return model
    if isinstance(model, str):
        if not model:
            raise UsageError("model: expected a model id or a pi Model, got an empty string")
        return agy_model(model)
    if model is None:
        raise UsageError("model: expected a pi Model (or a model id), got None")
    d = _object(model, "model")
    model_id = d.get("id")
    if not isinstance(model_id, str) or not model_id:
        raise UsageError(f"model.id: expected a non-empty string, got {model_id!r}")
    try:
        return Model(
            id=model_id,
            name=_typed(d, "name", str, model_id, "model"),
            api=_typed(d, "api", str, "agy", "model") or "agy",
            provider=_typed(d, "provider", str, "agy", "model") or "agy",
            base_url=_typed(d, "baseUrl", str, "", "model"),
            reasoning=_typed(d, "reasoning", bool, False, "model"),
            input=[
                k for k in _typed(d, "input", list, ["text"], "model") if k in ("text", "image")
            ],
            cost=ModelCost.from_json(_camel(d["cost"]))
            if isinstance(d.get("cost"), Mapping)
            else ModelCost(),
            context_window=_typed(d, "contextWindow", int, 0, "model"),
            max_tokens=_typed(d, "maxTokens", int, 0, "model"),
            headers=_typed(d, "headers", dict, None, "model"),
        )
    except DecodeError as exc:
        raise UsageError(f"model: {exc}") from exc


def _typed(d: Mapping[str, Any], key: str, kind: type, default: Any, what: str) -> Any:
    value = d.get(key)
    if value is None:
        return default
    if kind is int and isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise UsageError(f"{what}.{key}: expected {kind.__name__}, got {type(value).__name__}")
    return value


# --- context -------------------------------------------------------------------------------------


def _context(context: object) -> Context:
    if isinstance(context, Context):
        return context
    if context is None:
        raise UsageError("context: expected a pi Context (messages, systemPrompt, tools), got None")
    if isinstance(context, Mapping) or (
        dataclasses.is_dataclass(context) and not isinstance(context, type)
    ):
        # One level only: the messages and tools in it are read one by one below, where our
        # own typed ones pass through as they are.
        d = _camel(_fields(context))
        raw_messages, system, raw_tools = d.get("messages"), d.get("systemPrompt"), d.get("tools")
    elif dataclasses.is_dataclass(context) or hasattr(context, "model_dump"):
        d = _object(context, "context")
        raw_messages, system, raw_tools = d.get("messages"), d.get("systemPrompt"), d.get("tools")
    else:  # an object with attributes, such as pi-ai-python's TranscriptContext
        raw_messages = _attr(context, "messages")
        system = _attr(context, "system_prompt", "systemPrompt")
        raw_tools = _attr(context, "tools")
        if raw_messages is None:
            raise UsageError(
                f"context: expected a pi Context with `messages`, got {type(context).__name__}"
            )
    if raw_messages is None:
        raw_messages = []
    if isinstance(raw_messages, str | bytes) or not isinstance(raw_messages, Sequence):
        raise UsageError(f"context.messages: expected a list, got {type(raw_messages).__name__}")
    if system is not None and not isinstance(system, str):
        raise UsageError(f"context.systemPrompt: expected a string, got {type(system).__name__}")
    prompts = [system] if system else []
    tools = [_tool(t, f"context.tools[{i}]") for i, t in enumerate(raw_tools or [])]
    messages: list[Message] = []
    for index, raw in enumerate(raw_messages):
        field = f"context.messages[{index}]"
        if isinstance(raw, UserMessage | AssistantMessage | ToolResultMessage):
            messages.append(raw)
            continue
        d = _object(raw, field)
        if d.get("role") in _SYSTEM_ROLES:
            prompts.extend(_system_texts(d, field))
            # pi-ai-python declares the tools in the transcript: added, and later removed.
            removed = {
                t if isinstance(t, str) else _attr(t, "name") or _object(t, field).get("name")
                for t in d.get("toolsRemoved") or []
            }
            tools = [t for t in tools if t.name not in removed]
            tools.extend(
                _tool(t, f"{field}.toolsAdded[{i}]")
                for i, t in enumerate(d.get("toolsAdded") or [])
            )
            continue
        messages.append(_message(d, field))
    return Context(
        system_prompt="\n\n".join(prompts) or None, messages=messages, tools=tools or None
    )


def _system_texts(d: Mapping[str, Any], field: str) -> list[str]:
    """A system message's instructions: its content, then its named sections (pi ≥ 0.70)."""
    content = d.get("content")
    texts: list[str] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, Sequence):
        for i, block in enumerate(content):
            b = _object(block, f"{field}.content[{i}]")
            if not isinstance(b.get("text"), str):
                raise UsageError(f"{field}.content[{i}]: a system message holds text blocks only")
            texts.append(b["text"])
    elif content is not None:
        raise UsageError(f"{field}.content: expected text, got {type(content).__name__}")
    sections = d.get("sections")
    if isinstance(sections, Mapping):
        texts.extend(text for text in sections.values() if isinstance(text, str))
    return [t for t in texts if t]


def _message(d: dict[str, Any], field: str) -> Message:
    """A message from pi JSON, filling what ports leave out (timestamps, usage, provider…)."""
    role = d.get("role")
    if role not in ("user", "assistant", "toolResult"):
        raise UsageError(
            f"{field}.role: expected 'user', 'assistant', 'toolResult' or 'system', got {role!r}"
        )
    d.setdefault("timestamp", 0)
    if d["timestamp"] is None:
        d["timestamp"] = 0
    content = d.get("content")
    if isinstance(content, Sequence) and not isinstance(content, str):
        d["content"] = [_block(b, f"{field}.content[{i}]") for i, b in enumerate(content)]
    elif content is None and role != "user":
        d["content"] = []
    if role == "assistant":
        for key in ("api", "provider", "model"):
            if not isinstance(d.get(key), str):
                d[key] = ""
        if d.get("stopReason") not in _STOP_REASONS:
            # An earlier answer's ending is history only; ports add their own ("pending").
            d["stopReason"] = "stop"
        d["usage"] = _usage(d.get("usage"))
    elif role == "toolResult":
        d.setdefault("isError", False)
        if d["isError"] is None:
            d["isError"] = False
    try:
        return message_from_json(d)
    except DecodeError as exc:
        raise UsageError(f"{field}: {exc}") from exc


def _block(block: Any, field: str) -> dict[str, Any]:
    b = _object(block, field)
    if b.get("type") == "toolCall" and b.get("arguments") is None:
        b["arguments"] = {}
    return b


def _usage(raw: Any) -> dict[str, Any]:
    d = _camel(raw) if isinstance(raw, Mapping) else {}
    out: dict[str, Any] = {
        k: d.get(k) or 0 for k in ("input", "output", "cacheRead", "cacheWrite", "totalTokens")
    }
    cost = _camel(d["cost"]) if isinstance(d.get("cost"), Mapping) else {}
    out["cost"] = {
        k: cost.get(k) or 0 for k in ("input", "output", "cacheRead", "cacheWrite", "total")
    }
    return out


def _tool(raw: Any, field: str) -> Tool:
    if isinstance(raw, Tool):
        return raw
    d = _object(raw, field)
    name = d.get("name")
    if not isinstance(name, str) or not name:
        raise UsageError(f"{field}.name: expected a non-empty string, got {name!r}")
    description = d.get("description") or ""
    parameters = d.get("parameters") or {}
    if not isinstance(description, str) or not isinstance(parameters, Mapping):
        raise UsageError(f"{field}: expected a description string and a JSON-schema mapping")
    return Tool(name, description, dict(parameters))


# --- options -------------------------------------------------------------------------------------


def _options(options: object) -> tuple[SignalBridge | None, SimpleStreamOptions]:
    if options is None:
        return None, SimpleStreamOptions()
    if isinstance(options, SimpleStreamOptions):
        if options.reasoning == "off":  # type: ignore[comparison-overlap]  # as in a mapping
            options = dataclasses.replace(options, reasoning=None)
        _check_reasoning(options.reasoning)
        bridge = bridge_signal(options.signal)
        if bridge is not None and bridge.signal is not options.signal:
            options = dataclasses.replace(options, signal=bridge.signal)
        return bridge, options
    if isinstance(options, str | bytes | int | float | Sequence):
        raise UsageError(
            f"options: expected a mapping or an options object, got {type(options).__name__}"
        )
    signal_name = next((n for n in _SIGNAL_NAMES if _attr(options, n) is not None), "signal")
    bridge = bridge_signal(_attr(options, signal_name), f"options.{signal_name}")
    reasoning = _attr(options, "reasoning", "thinking_level", "thinkingLevel")
    if reasoning == "off":
        reasoning = None
    _check_reasoning(reasoning)
    budgets = _attr(options, "thinking_budgets", "thinkingBudgets")
    fields: dict[str, Any] = {
        "session_id": _text_option(options, "session_id", "sessionId"),
        "api_key": _text_option(options, "api_key", "apiKey"),
        "temperature": _number_option(options, "temperature"),
        "max_tokens": _number_option(options, "max_tokens", "maxTokens"),
        "timeout_ms": _number_option(options, "timeout_ms", "timeoutMs"),
    }
    return bridge, SimpleStreamOptions(
        signal=None if bridge is None else bridge.signal,
        reasoning=reasoning,
        thinking_budgets=None if budgets is None else _budgets(budgets),
        **fields,
    )


def _check_reasoning(reasoning: object) -> None:
    """A thinking level agy cannot be given is refused, never quietly dropped."""
    if reasoning is not None and reasoning not in _THINKING_LEVELS:
        raise UsageError(
            f"options.reasoning: expected one of {', '.join(_THINKING_LEVELS)} "
            f"(or 'off'), got {reasoning!r}"
        )


def _text_option(options: object, *names: str) -> str | None:
    value = _attr(options, *names)
    if value is not None and not isinstance(value, str):
        raise UsageError(f"options.{names[0]}: expected a string, got {type(value).__name__}")
    return value


def _number_option(options: object, *names: str) -> Any:
    value = _attr(options, *names)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise UsageError(f"options.{names[0]}: expected a number, got {type(value).__name__}")
    if names[0] != "temperature" and isinstance(value, float):
        value = int(value)
    return value


def _budgets(raw: Any) -> ThinkingBudgets:
    d = _object(raw, "options.thinking_budgets")
    try:
        return ThinkingBudgets.from_json(
            {k: d.get(k) for k in ("minimal", "low", "medium", "high")}
        )
    except DecodeError as exc:
        raise UsageError(f"options.thinking_budgets: {exc}") from exc
