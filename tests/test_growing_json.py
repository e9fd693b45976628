"""A stream's growing JSON frames parse what grew (issue 31): `GrowingJson` and the Connect decoder.

Every frame must parse to exactly what `jsontext.loads` gives (value, or the same error), through
growth, rewrites in the middle, shrinking, escapes and surrogate pairs cut at a delta's edge; and
the long strings' bytes parsed per frame are bounded by what grew.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from agy_provider.agy.rpcjson import CheckedTexts
from agy_provider.agy.rpcjson import decode_json_step
from agy_provider.agy.step import Step
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import StepStatus
from agy_provider.assembly.assembler import StepAssembler
from agy_provider.errors import DecodeError
from agy_provider.wire import jsontext
from agy_provider.wire.connect import ConnectStreamDecoder
from agy_provider.wire.connect import encode_envelope
from agy_provider.wire.growing_json import LARGE_FRAME
from agy_provider.wire.growing_json import LONG_STRING
from agy_provider.wire.growing_json import GrowingJson

# Multibyte characters of every UTF-8 length, CRLF, a quote and a backslash (escaped in JSON).
PIECE = 'Line with é, ☕ and 𝄞 — "ok" \\ done.\r\n'


def answer(size: int) -> str:
    return (PIECE * (size // len(PIECE) + 1))[:size]


def plain(size: int) -> str:
    """An answer that can go between two quotes by hand (ASCII, nothing to escape)."""
    return "".join(
        c if c.isascii() and c.isprintable() and c not in '"\\' else "." for c in answer(size)
    )


def frame(text: str, *, thinking: str = "", index: int = 1, ascii_only: bool = False) -> bytes:
    """agy's update frame for a planner step: the answer twice, as `response` and `modifiedResponse`."""
    step = {
        "type": "CORTEX_STEP_TYPE_PLANNER_RESPONSE",
        "status": "CORTEX_STEP_STATUS_GENERATING",
        "metadata": {"sourceTrajectoryStepInfo": {"stepIndex": index}, "tokens": [1, 2.5, None]},
        "plannerResponse": {"response": text, "modifiedResponse": text, "thinking": thinking},
    }
    update = {"stepsUpdate": {"indices": [index], "steps": [step]}, "status": "RUNNING"}
    return json.dumps({"update": update}, ensure_ascii=ascii_only).encode("utf-8")


def same(growing: GrowingJson, data: bytes) -> Any:
    """Parse with the cache and afresh: the same value, or the same error."""
    try:
        expected = jsontext.loads(data, "frame", 7)
    except DecodeError as exc:
        with pytest.raises(DecodeError) as caught:
            growing.loads(data, "frame", 7)
        assert str(caught.value) == str(exc)
        assert caught.value.offset == exc.offset
        return None
    value = growing.loads(data, "frame", 7)
    assert value == expected
    return value


SIZE = 3 * LARGE_FRAME


def test_a_growing_answer_parses_only_what_grew() -> None:
    growing = GrowingJson()
    text = answer(SIZE + 40 * 4096)
    same(growing, frame(text[:SIZE]))
    for end in range(SIZE + 4096, len(text) + 1, 4096):
        decoded = growing.decoded
        value = same(growing, frame(text[:end]))
        planner = value["update"]["stepsUpdate"]["steps"][0]["plannerResponse"]
        assert planner["response"] == planner["modifiedResponse"] == text[:end]
        # 4096 characters grew: their bytes (escapes and multibyte included), once, not twice.
        assert growing.decoded - decoded <= 2 * 4096 * 2
    assert growing.compared >= 40 * SIZE


def test_the_answer_and_its_copy_are_one_string() -> None:
    growing = GrowingJson()
    value = same(growing, frame(answer(SIZE)))
    planner = value["update"]["stepsUpdate"]["steps"][0]["plannerResponse"]
    assert planner["response"] is planner["modifiedResponse"]


@pytest.mark.parametrize(
    "rewrite",
    [
        lambda t: t[:100] + "X" + t[101:] + "more",  # a rewrite near the start
        lambda t: t[: len(t) // 2] + "Y" + t[len(t) // 2 + 1 :] + "more",  # in the middle
        lambda t: t[:-1] + "Z" + "more",  # the old text's last character
        lambda t: t[: len(t) - 5000],  # shorter
        lambda t: t,  # unchanged
        lambda t: "",  # emptied
    ],
)
def test_rewrites_parse_as_afresh(rewrite: Any) -> None:
    growing = GrowingJson()
    text = answer(SIZE)
    same(growing, frame(text))
    decoded = growing.decoded
    new = rewrite(text)
    value = same(growing, frame(new))
    assert value["update"]["stepsUpdate"]["steps"][0]["plannerResponse"]["response"] == new
    if new != text and not text.startswith(new):
        assert growing.decoded - decoded >= len(new)  # parsed whole, never patched
    same(growing, frame(new + "and on"))  # and growth goes on from the rewrite


def test_a_surrogate_pair_cut_between_two_frames_is_one_character() -> None:
    growing = GrowingJson()
    text = plain(SIZE)
    # An escaped pair whose low half arrives in the next frame: never U+FFFD twice.
    half = '{"a": {"response": "' + text + '\\ud834"}}'
    whole = '{"a": {"response": "' + text + '\\ud834\\udd1e"}}'
    assert same(growing, half.encode())["a"]["response"].endswith("\ufffd")
    assert same(growing, whole.encode())["a"]["response"].endswith("𝄞")


def test_a_lone_surrogate_in_the_growth_is_repaired() -> None:
    growing = GrowingJson()
    text = plain(SIZE)
    same(growing, ('{"r": "' + text + '"}').encode())
    value = same(growing, ('{"r": "' + text + 'a\\udc00b"}').encode())
    assert value["r"].endswith("a\ufffdb")


@pytest.mark.parametrize(
    "growth",
    [
        b"\\",  # an escape cut off: the string goes on into the next member
        b"\\x",  # an invalid escape
        b"\x01",  # a raw control character
        b"\xff",  # not UTF-8
        b"\xed\xa0\x80",  # an encoded surrogate (not strict UTF-8)
        b'", "n": NaN, "r2": "',  # a non-finite number after the answer
        b'", "n": 1e400, "r2": "',
        b'", "deep": ' + b"[" * 300 + b"]" * 300 + b', "r2": "',
        b'", "broken": {, "r2": "',
    ],
)
def test_hostile_growth_fails_as_a_fresh_parse_does_then_recovers(growth: bytes) -> None:
    growing = GrowingJson()
    text = answer(SIZE).encode("utf-8").replace(b"\\", b"\\\\").replace(b'"', b'\\"')
    text = text.replace(b"\r", b"\\r").replace(b"\n", b"\\n")
    good = b'{"r": "' + text + b'", "s": 1}'
    same(growing, good)
    bad = b'{"r": "' + text + b"more" + growth + b'", "s": 1}'
    same(growing, bad)  # the same error (or value), message and offset
    same(growing, b'{"r": "' + text + b'more", "s": 1}')


def test_a_string_spelling_a_placeholder_stays_itself() -> None:
    growing = GrowingJson()
    text = answer(SIZE)
    lookalike = "\x00" + "0" * 16 + "#0"
    doc = {"a": text, "b": lookalike, "c": [text, lookalike], text[:LONG_STRING]: "key"}
    value = same(growing, json.dumps(doc).encode())
    assert value["b"] == lookalike and value["c"][1] == lookalike


def test_small_frames_and_frames_that_are_not_objects_parse_whole() -> None:
    growing = GrowingJson()
    same(growing, b'{"a": "b"}')
    same(growing, json.dumps([answer(SIZE)]).encode())
    same(growing, json.dumps(answer(SIZE)).encode())
    assert growing.decoded == 0


def test_many_small_strings_parse_whole() -> None:
    growing = GrowingJson()
    same(growing, json.dumps({"items": [str(i) for i in range(30000)], "r": answer(SIZE)}).encode())
    assert growing.decoded == 0


def test_the_connect_decoder_parses_a_growing_stream_by_its_growth() -> None:
    decoder = ConnectStreamDecoder()
    text = answer(SIZE + 20 * 1000)
    frames = [frame(text[:end]) for end in range(SIZE, len(text) + 1, 1000)]
    for data in frames:
        decoder.feed(encode_envelope(data))
        (message,) = list(decoder.messages())
        assert message == jsontext.loads(data)
    assert decoder.long_strings.decoded < 2 * len(text.encode("utf-8")) + 20 * 2000 * 2


def test_a_rewrite_in_the_middle_never_streams_garbage_or_retracts() -> None:
    """Connect frames → `GrowingJson` → `decode_json_step` → the assembler, as the rpc source
    reads them: what streams is always a prefix of an answer agy sent, never taken back."""
    decoder = ConnectStreamDecoder()
    checked = CheckedTexts()
    assembler = StepAssembler(model="m")
    assembler.feed([Step(index=0, kind=StepKind.USER, status=StepStatus.DONE)])
    text = answer(SIZE)
    middle = len(text) // 2
    rewritten = text[:middle] + "REWRITTEN" + text[middle + 9 :]
    answers = [text, text + "one", rewritten + "one", rewritten + "one two", text + "one two three"]
    streamed = ""
    for sent in answers:
        decoder.feed(encode_envelope(frame(sent)))
        (message,) = list(decoder.messages())
        assert isinstance(message, dict)
        raw = message["update"]["stepsUpdate"]["steps"][0]
        step = decode_json_step(raw, index=1, texts=checked)
        assert step.text == sent
        streamed += "".join(e.delta for e in assembler.feed([step]) if e.type == "text_delta")
        assert any(a.startswith(streamed) for a in answers)
    # The rewrite was not streamed; growth that extends what was streamed was.
    assert streamed == text + "one two three"


# Pieces a fuzzed answer is made of: escapes of every kind, multibyte, surrogate halves.
_PIECES = st.sampled_from(
    ["a", "é", "☕", "𝄞", '"', "\\", "\n", "\r\n", "\t", "\x00", "\ud834", "\udd1e", "\u2028", " "]
)


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["grow", "cut", "edit"]), st.lists(_PIECES, max_size=30)),
        min_size=1,
        max_size=8,
    ),
    ascii_only=st.booleans(),
)
def test_any_sequence_of_frames_parses_as_afresh(
    steps: list[tuple[str, list[str]]], ascii_only: bool
) -> None:
    growing = GrowingJson()
    text = answer(SIZE)
    for op, pieces in steps:
        extra = "".join(pieces)
        if op == "grow":
            text += extra
        elif op == "cut":
            text = text[: max(0, len(text) - len(extra) - 1)]
        else:
            middle = len(text) // 3
            text = text[:middle] + extra + text[middle + 1 :] + extra
        data = json.dumps({"r": text, "m": text}, ensure_ascii=ascii_only).encode(
            "utf-8", "surrogatepass"
        )
        same(growing, data)


_GROWN = frame(answer(SIZE))
_NEXT = frame(answer(SIZE + 3000))
# Where a mutation hurts most: the structure around the long strings, their ends, the old text's end.
_EDGES = sorted(
    {
        at + d
        for key in (b'"response"', b'"modifiedResponse"', b'"thinking"')
        for at in (_NEXT.index(key), _NEXT.index(key) + len(key) + 2)
        for d in range(-6, 7)
    }
    | {len(_NEXT) - d for d in range(1, 40)}
    | {_NEXT.index(b'"response"') + len(_GROWN) // 2 - 4 + d for d in range(-8, 8)}
)


@settings(max_examples=60, deadline=None)
@given(
    edits=st.lists(
        st.tuples(
            st.one_of(st.integers(min_value=0, max_value=len(_NEXT) - 1), st.sampled_from(_EDGES)),
            st.sampled_from(["flip", "insert", "delete"]),
            st.sampled_from(list(b'"\\{}[],:0un \x00\x80\xff\xed')),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_any_mutation_of_a_grown_frame_parses_as_afresh(edits: list[tuple[int, str, int]]) -> None:
    """Hostile bytes anywhere (in the old answer, its growth, the structure): with the previous
    frame cached, the same value or the same error as `jsontext.loads`, and the next good frame
    after it too."""
    growing = GrowingJson()
    same(growing, _GROWN)
    data = bytearray(_NEXT)
    for position, how, byte in edits:
        at = min(position, len(data) - 1)
        if how == "flip":
            data[at] = byte
        elif how == "insert":
            data.insert(at, byte)
        else:
            del data[at]
    same(growing, bytes(data))
    same(growing, _NEXT)
