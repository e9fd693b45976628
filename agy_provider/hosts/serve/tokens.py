"""serve's token arithmetic: a local estimate of a request's input tokens (`count_tokens`, the
usage in `message_start`, the overflow check), the model's context window, the overflow error.

Pure and cheap: no tokenizer (none can be downloaded here, and agy's models do not publish
theirs); bytes are sorted into classes in one `bytes.translate` pass and each class is priced.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
from typing import Any
from typing import Final

from starlette.responses import JSONResponse

from agy_provider.pi.types import Context
from agy_provider.pi.types import ImageContent
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import ToolResultMessage

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "context_window",
    "estimate_context",
    "estimate_text",
    "overflow_response",
]

# Gemini's window (1,048,576 input tokens), which agy's default models have; agy's catalog
# (`agy models`) names models but no windows, so the families it offers are listed here.
DEFAULT_CONTEXT_WINDOW: Final = 1_048_576
_WINDOWS: Final = (("claude-", 200_000), ("gpt-oss", 131_072), ("gemini-", 1_048_576))

# Byte classes (one translate pass), priced in tokens per byte. The prices follow the usual
# shapes of SentencePiece/BPE vocabularies as Gemini's are: an English word of ~4.7 letters is
# ~1.3 tokens (letters ~0.27 each, the space before a word folded into it); every digit is a
# token of its own (Gemini splits numbers into digits); punctuation is about one token each,
# often merged in pairs (`",`, `);`, `://`); a newline about one, runs of spaces (indentation)
# a token per few; a CJK character (3 UTF-8 bytes) ~0.75, a 2-byte letter (Cyrillic, Greek,
# accented Latin) ~0.45, a 4-byte character (emoji) ~1.5. UTF-8 continuation bytes are free:
# their lead byte prices the character.
_ALPHA, _DIGIT, _PUNCT, _SPACE, _NEWLINE, _CONT, _LEAD2, _LEAD3, _LEAD4 = b"adpsnc234"
_PRICES: Final = (
    (_ALPHA, 0.27),
    (_DIGIT, 1.0),
    (_PUNCT, 0.65),
    (_SPACE, 0.08),
    (_NEWLINE, 0.7),
    (_LEAD2, 0.45),
    (_LEAD3, 0.75),
    (_LEAD4, 1.5),
)


def _table() -> bytes:
    out = bytearray(256)
    for byte in range(256):
        char = chr(byte)
        if byte >= 0xF0:
            kind = _LEAD4
        elif byte >= 0xE0:
            kind = _LEAD3
        elif byte >= 0xC0:
            kind = _LEAD2
        elif byte >= 0x80:
            kind = _CONT
        elif char.isalpha():
            kind = _ALPHA
        elif char.isdigit():
            kind = _DIGIT
        elif char == "\n":
            kind = _NEWLINE
        elif char in " \t\r":
            kind = _SPACE
        else:
            kind = _PUNCT
        out[byte] = kind
    return bytes(out)


_CLASSES: Final = _table()
# Framing a model's chat template adds per message (role markers, turn ends) and per tool
# (its declaration's wrapping), as the providers' own counts show for an empty message.
_PER_MESSAGE: Final = 4
_PER_TOOL: Final = 8
_PER_CALL: Final = 6
# Gemini prices an image at 258 tokens per 768×768 tile (one tile when both sides are at most
# 384 px); an image whose size cannot be read from its header counts as one tile.
_TILE: Final = 768
_TILE_TOKENS: Final = 258


# Past this many characters a text is priced from evenly spaced slices of it (`_SLICES` of
# `_SLICE` characters), scaled to its length: classifying every byte costs ~10 ns a byte on a
# busy machine, so a 100k-token request (~400 KB) would take ~25 ms whole and takes ~1.5 ms so;
# the sample's error is far below the estimate's own.
_SAMPLE_ABOVE: Final = 32 * 1024
_SLICES: Final = 16
_SLICE: Final = 2 * 1024


def _priced(text: str) -> float:
    classes = text.encode("utf-8", "surrogatepass").translate(_CLASSES)
    return sum(classes.count(kind) * price for kind, price in _PRICES)


def estimate_text(text: str) -> float:
    """The estimated tokens of `text` (a float: callers sum before rounding)."""
    length = len(text)
    if length <= _SAMPLE_ABOVE:
        return _priced(text) if text else 0.0
    step = length // _SLICES
    sample = "".join(text[i * step : i * step + _SLICE] for i in range(_SLICES))
    return _priced(sample) * length / len(sample)


def _image_size(image: ImageContent) -> tuple[int, int] | None:
    """(width, height) from a PNG's IHDR or a GIF's screen descriptor, else None."""
    try:
        head = base64.b64decode(image.data[:44], validate=False)
    except (binascii.Error, ValueError):
        return None
    if head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) >= 24:
        width, height = struct.unpack(">II", head[16:24])
        return width, height
    if head[:4] == b"GIF8" and len(head) >= 10:
        width, height = struct.unpack("<HH", head[6:10])
        return width, height
    return None


def _image_tokens(image: ImageContent) -> int:
    size = _image_size(image)
    if size is None or (size[0] <= _TILE // 2 and size[1] <= _TILE // 2):
        return _TILE_TOKENS
    width, height = size
    return _TILE_TOKENS * max(1, math.ceil(width / _TILE)) * max(1, math.ceil(height / _TILE))


def _content(content: Any, texts: list[str]) -> int:
    """Collects `content`'s texts into `texts`; returns the tokens priced apart (images,
    the framing of tool calls)."""
    if isinstance(content, str):
        texts.append(content)
        return 0
    fixed = 0
    for block in content:
        if isinstance(block, TextContent):
            texts.append(block.text)
        elif isinstance(block, ThinkingContent):
            texts.append(block.thinking)
        elif isinstance(block, ImageContent):
            fixed += _image_tokens(block)
        elif isinstance(block, ToolCall):
            texts.append(block.name)
            texts.append(json.dumps(block.arguments, ensure_ascii=False))
            fixed += _PER_CALL
    return fixed


def estimate_context(context: Context) -> int:
    """The estimated input tokens of a turn's context: the system prompt, every message (text,
    thinking, tool calls and results, images by their tiles) and the tools' declarations.

    What the request itself holds; agy adds its own system prompt and tool declarations to
    what it reports as input (thousands of tokens, not known before a turn)."""
    # Every text joined and priced once: per-block pricing of a long transcript's thousands of
    # small blocks would cost more than the bytes themselves.
    texts: list[str] = []
    fixed = 0
    if context.system_prompt:
        texts.append(context.system_prompt)
        fixed += _PER_MESSAGE
    for message in context.messages:
        fixed += _PER_MESSAGE + _content(message.content, texts)
        if isinstance(message, ToolResultMessage):
            texts.append(message.tool_name)
    for tool in context.tools or ():
        texts += (tool.name, tool.description)
        texts.append(json.dumps(tool.parameters, ensure_ascii=False, separators=(",", ":")))
        fixed += _PER_TOOL
    return max(1, round(fixed + estimate_text("\n".join(texts))))


def context_window(model: str) -> int:
    """The input tokens `model` (an agy model id, or `default`) takes at most."""
    for prefix, window in _WINDOWS:
        if model.startswith(prefix):
            return window
    return DEFAULT_CONTEXT_WINDOW


def overflow_response(shape: str, tokens: int, window: int) -> JSONResponse:
    """The error clients classify as a context overflow (pi's `isContextOverflow`, the SDKs'
    own checks): HTTP 400, Anthropic's `prompt is too long: N tokens > M maximum`, OpenAI's
    `context_length_exceeded`."""
    if shape == "anthropic":
        body: dict[str, Any] = {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": f"prompt is too long: {tokens} tokens > {window} maximum",
            },
        }
    else:
        body = {
            "error": {
                "message": (
                    f"This model's maximum context length is {window} tokens. However, your "
                    f"messages resulted in {tokens} tokens (estimated). The input exceeds the "
                    "context window of this model: shorten or compact the conversation."
                ),
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }
    return JSONResponse(body, 400, headers={"x-should-retry": "false"})
