"""A growing answer costs what grew (issue 18): row decoding, RPC text checks, the assembler, both sources.

Every cache is held to two things: the same result as decoding afresh (growth, rewrites that shrink
or diverge, multibyte characters cut at a delta's edge, CRLF), and counted work per delta bounded
by the delta (bytes decoded, characters checked, strings shared rather than copied).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agy_provider.plugins.rpc_source import RpcEventSource
from agy_provider.plugins.sqlite_source import SqliteEventSource
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from agy_provider.agy.growing_text import GrowingTexts
from agy_provider.agy.rows import decode_step_row
from agy_provider.agy.rpcjson import CheckedTexts
from agy_provider.agy.rpcjson import decode_json_step
from agy_provider.agy.step import Step
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import StepStatus
from agy_provider.assembly.assembler import StepAssembler
from agy_provider.contract.turn import Binding
from agy_provider.contract.turn import TurnContext
from agy_provider.errors import DecodeError
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ToolCall
from agy_provider.sim.bulk import planner_step
from agy_provider.sim.writer import ConversationWriter
from agy_provider.store.config import Config

GENERATING, DONE = "CORTEX_STEP_STATUS_GENERATING", "CORTEX_STEP_STATUS_DONE"
# Multibyte characters of every UTF-8 length, and CRLF line ends, in every delta.
PIECE = "Line with é, ☕ and 𝄞 — ok.\r\n"


# -- a planner row by hand (so a test can put any bytes in its text) -----------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _len_field(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def planner_payload(text: bytes, thinking: bytes = b"", status: int = 8) -> bytes:
    """type 15 (planner), status, 20 {3 thinking, 8 modified response}."""
    body = (_len_field(3, thinking) if thinking else b"") + _len_field(8, text)
    return _varint(1 << 3) + _varint(15) + _varint(4 << 3) + _varint(status) + _len_field(20, body)


def fresh(payload: bytes) -> Step:
    return decode_step_row(1, 15, 8, payload)


# -- rows: GrowingTexts ----------------------------------------------------------------------------


def test_a_growing_row_decodes_only_what_grew() -> None:
    texts = GrowingTexts()
    text = ""
    for n in range(30):
        grown = text + PIECE * (n % 3 + 1)
        payload = planner_payload(grown.encode(), thinking=f"thinking {n}".encode())
        decoded, compared = texts.decoded, texts.compared
        step = decode_step_row(1, 15, 8, payload, texts=texts)
        assert step == fresh(payload)
        assert step.text == grown
        if n:
            # The answer: the new bytes only, after a compare of the old ones. The thinking
            # (rewritten, not grown) is decoded whole: it is a few bytes here.
            new_bytes = len(grown.encode()) - len(text.encode())
            thinking_bytes = len(f"thinking {n}".encode())
            assert texts.decoded - decoded <= new_bytes + thinking_bytes
            assert texts.decoded - decoded >= new_bytes
            assert texts.compared - compared >= len(text.encode())
        text = grown


def test_an_unchanged_row_is_not_decoded_again_and_keeps_its_string() -> None:
    texts = GrowingTexts()
    payload = planner_payload((PIECE * 50).encode())
    first = decode_step_row(1, 15, 8, payload, texts=texts)
    decoded = texts.decoded
    again = decode_step_row(1, 15, 8, bytes(payload), texts=texts)  # a new blob, same bytes
    assert again.text is first.text
    assert texts.decoded == decoded


@pytest.mark.parametrize(
    "rewrite",
    [
        "Line with é",  # shorter
        "Line with è, ☕ and 𝄞 — ok.\r\nand more",  # diverges, longer
        "Xine with é, ☕ and 𝄞 — ok.\r\n",  # diverges in the first byte, same length
        "",  # emptied
    ],
)
def test_rewrites_that_shrink_or_diverge_decode_whole(rewrite: str) -> None:
    texts = GrowingTexts()
    decode_step_row(1, 15, 8, planner_payload(PIECE.encode()), texts=texts)
    payload = planner_payload(rewrite.encode())
    decoded = texts.decoded
    step = decode_step_row(1, 15, 8, payload, texts=texts)
    assert step == fresh(payload)
    assert texts.decoded - decoded == len(rewrite.encode())


def test_a_character_cut_at_a_deltas_edge_fails_as_a_fresh_decode_does_then_recovers() -> None:
    whole = (PIECE * 4).encode()
    cut = whole.index("☕".encode()) + 1  # inside the three bytes of ☕
    texts = GrowingTexts()
    decode_step_row(1, 15, 8, planner_payload(whole[: cut - 1]), texts=texts)
    broken = planner_payload(whole[:cut])
    with pytest.raises(DecodeError) as fresh_error:
        fresh(broken)
    with pytest.raises(DecodeError) as cached_error:
        decode_step_row(1, 15, 8, broken, texts=texts)
    assert str(cached_error.value) == str(fresh_error.value)
    assert cached_error.value.offset == fresh_error.value.offset
    complete = planner_payload(whole)
    assert decode_step_row(1, 15, 8, complete, texts=texts) == fresh(complete)


def test_a_lone_continuation_byte_after_the_old_text_is_the_same_error() -> None:
    texts = GrowingTexts()
    decode_step_row(1, 15, 8, planner_payload(b"ok\r"), texts=texts)
    broken = planner_payload(b"ok\r\x80\n")
    with pytest.raises(DecodeError) as fresh_error:
        fresh(broken)
    with pytest.raises(DecodeError) as cached_error:
        decode_step_row(1, 15, 8, broken, texts=texts)
    assert (str(cached_error.value), cached_error.value.offset) == (
        str(fresh_error.value),
        fresh_error.value.offset,
    )


def test_a_cr_at_one_deltas_end_and_lf_at_the_next_ones_start_stay_exact() -> None:
    texts = GrowingTexts()
    decode_step_row(1, 15, 8, planner_payload(b"one\r"), texts=texts)
    step = decode_step_row(1, 15, 8, planner_payload(b"one\r\ntwo\r\n"), texts=texts)
    assert step.text == "one\r\ntwo\r\n"


def test_thinking_and_answer_grow_together_as_their_positions_move() -> None:
    texts = GrowingTexts()
    thinking, answer = "", ""
    for n in range(12):
        thinking += "ponder é " * (n + 1)
        if n > 5:
            answer += PIECE
        payload = planner_payload(answer.encode(), thinking.encode())
        step = decode_step_row(1, 15, 8, payload, texts=texts)
        assert (step.thinking, step.text) == (thinking, answer)


def test_real_rows_from_the_simulators_writer_decode_the_same_with_the_cache() -> None:
    texts = GrowingTexts()
    text = ""
    for _ in range(10):
        text += PIECE
        payload = planner_step(text, "thinking", status=GENERATING).SerializeToString()
        assert decode_step_row(1, 15, 8, payload, texts=texts) == fresh(payload)


# -- rpcjson: CheckedTexts -------------------------------------------------------------------------


def planner_json(text: str, thinking: str = "") -> dict[str, object]:
    return {
        "type": "CORTEX_STEP_TYPE_PLANNER_RESPONSE",
        "status": "CORTEX_STEP_STATUS_GENERATING",
        "plannerResponse": {"modifiedResponse": text, "thinking": thinking},
    }


def test_a_growing_rpc_text_is_checked_from_where_it_grew() -> None:
    texts = CheckedTexts()
    text = ""
    for _ in range(20):
        grown = text + PIECE
        checked = texts.checked
        step = decode_json_step(planner_json(grown), index=1, texts=texts)
        assert step == decode_json_step(planner_json(grown), index=1)
        assert texts.checked - checked == len(grown) - len(text)
        text = grown


def test_a_lone_surrogate_in_the_growth_is_replaced_and_the_old_text_kept() -> None:
    texts = CheckedTexts()
    decode_json_step(planner_json(PIECE), index=1, texts=texts)
    step = decode_json_step(planner_json(PIECE + "a\ud800b"), index=1, texts=texts)
    assert step.text == PIECE + "a\ufffdb"
    # The next frame still carries the surrogate: its text no longer starts with what was
    # returned, so it is checked whole, and comes out the same.
    again = decode_json_step(planner_json(PIECE + "a\ud800bc"), index=1, texts=texts)
    assert again.text == PIECE + "a\ufffdbc"


@pytest.mark.parametrize("rewrite", ["Liné", "Xine with é\ud800", "Line with è and more"])
def test_rpc_rewrites_that_shrink_or_diverge_are_checked_whole(rewrite: str) -> None:
    texts = CheckedTexts()
    decode_json_step(planner_json(PIECE), index=1, texts=texts)
    checked = texts.checked
    step = decode_json_step(planner_json(rewrite), index=1, texts=texts)
    assert step == decode_json_step(planner_json(rewrite), index=1)
    assert texts.checked - checked == len(rewrite)


def test_ascii_text_needs_no_check_at_all() -> None:
    texts = CheckedTexts()
    decode_json_step(planner_json("plain " * 1000, "also plain"), index=1, texts=texts)
    assert texts.checked == 0


# -- the assembler ---------------------------------------------------------------------------------


def assistant(text: str, index: int = 1) -> Step:
    return Step(index=index, kind=StepKind.ASSISTANT, status=StepStatus.GENERATING, text=text)


def user(index: int = 0) -> Step:
    return Step(index=index, kind=StepKind.USER, status=StepStatus.DONE, text="hi")


def test_the_assembler_shares_the_steps_text_instead_of_growing_a_copy() -> None:
    assembler = StepAssembler(model="m")
    assembler.feed([user()])
    text = ""
    for _ in range(10):
        text += PIECE
        step = assistant(text)
        events = assembler.feed([step])
        delta = [e for e in events if e.type == "text_delta"]
        assert len(delta) == 1 and delta[0].delta == PIECE
        content = delta[0].partial.content[0]
        assert isinstance(content, TextContent)
        assert content.text is step.text  # no copy of the whole answer per delta


def test_a_step_that_goes_on_after_a_park_starts_its_new_block_where_it_resumed() -> None:
    assembler = StepAssembler(model="m")
    assembler.feed([user()])
    assembler.feed([assistant("before the call. ")])
    assembler.park([ToolCall(id="c1", name="host_tool", arguments={})])
    assembler.resume()
    assembler.feed([assistant("before the call. after it")])
    done = assembler.finish()[-1]
    assert done.type == "done"
    assert [c.text for c in done.message.content if isinstance(c, TextContent)] == ["after it"]


def test_the_assembler_keeps_what_was_streamed_through_shrinking_and_diverging_rewrites() -> None:
    assembler = StepAssembler(model="m")
    assembler.feed([user()])
    assembler.feed([assistant("Hello, world")])
    assert assembler.feed([assistant("Hello")]) == []
    assert assembler.feed([assistant("Jello, world and more")]) == []
    events = assembler.feed([assistant("Hello, world!")])
    assert [e.delta for e in events if e.type == "text_delta"] == ["!"]
    final = assembler.finish()[-1]
    assert final.type == "done"
    assert final.message.content[0] == TextContent(text="Hello, world!")


# -- both sources, end to end ----------------------------------------------------------------------


async def test_the_sqlite_source_decodes_only_the_growth_of_a_rewritten_row(tmp_path: Path) -> None:
    db = tmp_path / "growth.db"
    writer = ConversationWriter(db, "growth")
    index = writer.append(planner_step(""))
    source = SqliteEventSource(db, min_index=-1)
    await source.open()
    try:
        await source.poll(force=True)
        text = ""
        for n in range(8):
            grown = text + PIECE * 20
            writer.update(index, planner_step(grown, status=DONE if n == 7 else GENERATING))
            before = source.text_bytes_decoded
            changed = await source.poll(force=True)
            assert [step.text for step in changed] == [grown]
            if text:
                assert source.text_bytes_decoded - before == len(grown.encode()) - len(
                    text.encode()
                )
            text = grown
        assert not source._texts  # the row is final: nothing is kept for it
    finally:
        await source.aclose()
        writer.close()


def update_frame(index: int, text: str) -> dict[str, object]:
    steps_update = {"indices": [index], "steps": [planner_json(text)]}
    return {"update": {"mainTrajectoryUpdate": {"stepsUpdate": steps_update}}}


def test_the_rpc_sources_stream_path_checks_only_the_growth() -> None:
    turn = TurnContext(
        session_id="",
        prompt="",
        cwd="/",
        config=Config(),
        event_source="rpc",
        permissions="default",
        min_index=0,
        binding=Binding(path=Path("c.db"), conversation_id="c"),
    )
    source = RpcEventSource(turn)
    text = ""
    for _ in range(6):
        text += PIECE * 10
        source._take_update(update_frame(1, text))
        assert source._latest[1].text == text
    assert source._texts[1].checked == len(text)  # each character looked at once


# -- any sequence of rewrites: the cache never changes an outcome ----------------------------------

_PIECES = st.one_of(
    st.text(max_size=6).map(str.encode),  # valid UTF-8 of any character
    st.sampled_from([b"\r", b"\n", b"\xe2", b"\x98", b"\x95", b"\xf0\x9d", b"\x80", b"\xff"]),
)


def _outcome(payload: bytes, texts: GrowingTexts | None) -> object:
    try:
        return decode_step_row(1, 15, 8, payload, texts=texts)
    except DecodeError as exc:
        return (str(exc), exc.offset)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["grow", "grow", "grow", "cut", "flip"]),
            st.lists(_PIECES, max_size=4),
            st.integers(min_value=0, max_value=64),
        ),
        max_size=12,
    )
)
def test_any_rewrites_decode_as_afresh_with_the_cache(
    script: list[tuple[str, list[bytes], int]],
) -> None:
    texts = GrowingTexts()
    text, thinking = b"", b""
    for action, pieces, at in script:
        if action == "grow":
            text += b"".join(pieces)
        elif action == "cut":
            text = text[: at % (len(text) + 1)]
        elif text:
            flipped = text[at % len(text)] ^ 0x01
            text = text[: at % len(text)] + bytes([flipped]) + text[at % len(text) + 1 :]
        thinking += pieces[0] if pieces else b""
        payload = planner_payload(text, thinking)
        assert _outcome(payload, texts) == _outcome(payload, None)
