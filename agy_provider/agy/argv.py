"""agy's command line for one turn: the request, its argv (every value validated), stdin's turn.

Owns what agy's flags are and which values they accept (AGY-FORMATS §2, §2.2); pure, no process.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Mapping
from collections.abc import Sequence

from agy_provider.errors import UsageError

__all__ = [
    "JSON_SCHEMA_OPTION",
    "MAX_ARG_BYTES",
    "TurnRequest",
    "build_argv",
    "build_warm_argv",
    "checked_json_schema",
    "go_duration",
    "prompt_fits_argv",
    "stdin_turn",
    "valid_conversation_id",
]

# Linux caps one argv element at 128 KiB (MAX_ARG_STRLEN); keep a margin below it.
MAX_ARG_BYTES = 120 * 1024

# The key of a turn's options' `metadata` whose JSON Schema (a mapping) becomes `--json-schema`:
# structured output, agy ≥ 1.2 (AGY-FORMATS §2.3; the caller checks agy's version).
JSON_SCHEMA_OPTION = "agy_json_schema"

# agy's conversation ids are UUIDs; anything that could become a flag is refused (AGY-FORMATS §2).
_CONVERSATION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")


def valid_conversation_id(value: str) -> bool:
    """True for an id safe to pass as `--conversation <id>`."""
    return bool(_CONVERSATION_ID.fullmatch(value))


@dataclasses.dataclass(frozen=True, slots=True)
class TurnRequest:
    """Everything agy's command line says about one turn."""

    prompt: str
    cwd: str
    agy_bin: str
    model_args: Sequence[str] = ()
    mode: str = "default"
    skip_permissions: bool = False
    conversation_id: str = ""
    print_timeout: float = 300.0  # agy 1.1.x's own default; always passed explicitly
    csrf_token: str = ""
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # agy ≥ 1.1.8 states the conversation id on its first stream-json line (AGY-FORMATS §2.1),
    # the one proof of ownership that needs no process scan. "" keeps agy's plain text output.
    output_format: str = "stream-json"
    # A log file of this run alone: agy names its language server's ports there (rpc turns).
    log_file: str = ""
    # More workspace roots, one `--add-dir` each (absolute, existing folders): the MCP bridge's
    # folder holding `.agents/mcp_config.json` is one (AGY-FORMATS §2).
    extra_dirs: Sequence[str] = ()
    # The turn may run in a warm agy: one process kept for many turns of its conversation, each
    # a stdin line (`build_warm_argv`; `live/warm/pool.py`). False runs `agy -p` for this turn alone.
    warm: bool = False
    # The host tools agy is offered over MCP, as one value (`bridge/host_tools.tools_signature`):
    # a warm agy serves them from a bridge of its own, so they are part of what it is.
    mcp_tools: str = ""
    # `--json-schema` (agy ≥ 1.2): a JSON Schema object as compact JSON text; "" for none. agy
    # silently coerces a schema that is not valid JSON to `{"type":"string"}` (AGY-FORMATS §2.3),
    # so `build_argv` refuses anything but a JSON object.
    json_schema: str = ""


def go_duration(seconds: float) -> str:
    """Seconds as a Go duration string (`5m0s`), what `--print-timeout` takes."""
    total = max(1, math.ceil(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def prompt_fits_argv(prompt: str) -> bool:
    """Whether `prompt` can ride in argv after `-p` (else it goes through stream-json stdin).

    Too large for one argument, or starting with "-" (a flag parser could take it for a flag),
    it cannot.
    """
    return len(prompt.encode("utf-8")) <= MAX_ARG_BYTES and not prompt.startswith("-")


def stdin_turn(prompt: str) -> bytes:
    """One `--input-format stream-json` user turn (AGY-FORMATS §2.1), newline-terminated."""
    line = {
        "event": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": prompt}]},
    }
    return (json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8")


def checked_json_schema(text: str) -> str:
    """`text` as the compact JSON of a schema object, fit for one argv element.

    Raises `UsageError` for text that is not a JSON object, holds a NUL or is too large.
    """
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"the JSON schema is not valid JSON: {exc}") from exc
    if not isinstance(schema, dict):
        raise UsageError(f"a JSON schema must be a JSON object, not {type(schema).__name__}")
    compact = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    if "\x00" in compact or len(compact.encode("utf-8")) > MAX_ARG_BYTES:
        raise UsageError("the JSON schema holds a NUL character or is too large for a command line")
    return compact


def build_argv(request: TurnRequest) -> list[str]:
    """agy's argv: the prompt right after `-p`; every value validated before it becomes an argument.

    A prompt too large for one argument (Linux caps it at 128 KiB) is not in argv at all: agy
    reads it as one stream-json turn from stdin (`--input-format stream-json`), which has no cap.
    """
    if "\x00" in request.prompt:
        raise UsageError("the prompt contains a NUL byte, which no command line can carry")
    output_format = request.output_format
    if output_format not in ("", "text", "json", "stream-json"):
        raise UsageError(f"output format must be text, json or stream-json, not {output_format!r}")
    if prompt_fits_argv(request.prompt):
        head = [request.agy_bin, "-p", request.prompt]
    else:
        # agy 1.2.x refuses stream-json input without stream-json output (AGY-FORMATS §2.2).
        head = [request.agy_bin, "--input-format", "stream-json"]
        output_format = "stream-json"
    argv = [*head, *request.model_args]
    if output_format:
        argv += ["--output-format", output_format]
    return argv + _flags(request)


def build_warm_argv(request: TurnRequest) -> list[str]:
    """agy's argv as one process for many turns (AGY-FORMATS §2.4): no `-p` (a prompt given as a
    flag is dropped), stream-json in and out, each turn a stdin line (`stdin_turn`); the rest of
    the flags as for one turn, validated the same way. `request.prompt` is not in it."""
    return [
        request.agy_bin,
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        *request.model_args,
        *_flags(request),
    ]


def _flags(request: TurnRequest) -> list[str]:
    """The flags after the prompt and formats: mode, permissions, conversation, folders, timeout,
    log file, CSRF token — each value validated before it becomes an argument."""
    argv: list[str] = []
    if request.mode not in ("default", ""):
        if request.mode not in ("accept-edits", "plan"):
            raise UsageError(f"mode must be default, accept-edits or plan, not {request.mode!r}")
        argv += ["--mode", request.mode]
    if request.skip_permissions:
        argv.append("--dangerously-skip-permissions")
    if request.conversation_id:
        if not valid_conversation_id(request.conversation_id):
            raise UsageError(f"not a conversation id: {request.conversation_id!r}")
        argv += ["--conversation", request.conversation_id]
    argv += ["--add-dir", os.path.abspath(request.cwd)]
    for folder in request.extra_dirs:
        if not os.path.isabs(folder) or "\x00" in folder or not os.path.isdir(folder):
            raise UsageError(
                f"--add-dir needs an absolute path of an existing folder, not {folder!r}"
            )
        argv += ["--add-dir", folder]
    # Always explicit: 1.1.x defaults to 5m0s, 1.2.x to 0s (wait forever) (AGY-FORMATS §2.2).
    if not request.print_timeout > 0 or not math.isfinite(request.print_timeout):
        raise UsageError(
            f"print timeout must be a positive number of seconds, not {request.print_timeout!r}"
        )
    argv += ["--print-timeout", go_duration(request.print_timeout)]
    if request.json_schema:
        argv += ["--json-schema", checked_json_schema(request.json_schema)]
    if request.log_file:
        if not os.path.isabs(request.log_file) or "\x00" in request.log_file:
            raise UsageError(f"the log file must be an absolute path, not {request.log_file!r}")
        argv += ["--log-file", request.log_file]
    if request.csrf_token:
        if not request.csrf_token.isalnum():
            raise UsageError("the CSRF token must be alphanumeric")
        argv.append(f"--csrf_token={request.csrf_token}")
    return argv
