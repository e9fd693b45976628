"""The stream-json event source against a fake agy whose stdout (`StdoutEvents`) the test feeds by
hand, and the handover and binding moves that make it the last resort."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from agy_provider.plugins.streamjson_source import StreamJsonEventSource
from fakes import CONVERSATION
from fakes import HANG
from fakes import Exits
from fakes import FakeProcess
from fakes import Script
from fakes import edges_for

from agy_provider.agy import stdout as stdout_module
from agy_provider.agy.stdout import StdoutEvents
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import StepStatus
from agy_provider.agy.step import StepUsage
from agy_provider.agy.streamjson import COALESCE_FROM
from agy_provider.assembly.assembler import StepAssembler
from agy_provider.contract.turn import TurnContext
from agy_provider.errors import SourceError
from agy_provider.errors import TurnError
from agy_provider.live.handover import HandoverState
from agy_provider.live.handover import SourceHandover
from agy_provider.live.handover import database_source
from agy_provider.live.launch import bind_turn
from agy_provider.live.runner import TurnRequest
from agy_provider.live.turn_edges import TurnPlan
from agy_provider.plugin_manager import EventSourceSpec
from agy_provider.store.config import Config

CID = CONVERSATION


def line(event: dict[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"


def init() -> bytes:
    return line({"event": "init", "conversation_id": CID, "init": {"cwd": "/tmp"}})


def step(index: int, kind: str, state: str = "ACTIVE", **extra: Any) -> bytes:
    body = {"conversation_id": CID, "step_index": index, "state": state, "step_type": kind}
    return line({"event": "step_update", "step_update": {**body, **extra}})


def delta(index: int, text: str) -> bytes:
    return step(index, "agent_response", text_delta=text)


def result(response: str) -> bytes:
    usage = {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}
    body = {"conversation_id": CID, "status": "SUCCESS", "response": response, "usage": usage}
    return line({"event": "result", "result": {**body, "num_turns": 1}})


@dataclasses.dataclass
class FakeAgy:
    """What the source reads of a running agy: its request, its stdout's events and the usage
    total before the turn (an `agy -p`'s: none)."""

    request: TurnRequest = dataclasses.field(
        default_factory=lambda: TurnRequest(prompt="hi", cwd=".", agy_bin="agy")
    )
    events: StdoutEvents = dataclasses.field(default_factory=StdoutEvents)
    previous_total: StepUsage | None = None


def turn_for(process: Any, min_index: int = -1) -> TurnContext:
    """A stream-json turn of `process` (session, prompt, cwd, config, source, permissions)."""
    turn = TurnContext("", "hi", ".", Config(), "stream-json", "ask", min_index=min_index)
    turn.process = process
    return turn


async def opened(agy: FakeAgy, min_index: int = -1) -> StreamJsonEventSource:
    source = StreamJsonEventSource.for_turn(turn_for(agy, min_index))
    await source.open()
    return source


# -- StdoutEvents ------------------------------------------------------------------------------


def test_stdout_events_keep_event_lines_raw_and_wake_listeners_only_for_lines() -> None:
    events = StdoutEvents()
    woken: list[int] = []

    def listener() -> None:
        woken.append(events.line_count)

    events.add_listener(listener)
    events.feed(b"Error: authentication required\n")
    assert woken == [] and events.line_count == 0  # notes are not events
    blob = init() + delta(1, "Hel") + delta(1, "lo")
    events.feed(blob[:10])
    assert woken == []  # half a line is no line
    events.feed(blob[10:])
    assert woken == [3]
    assert events.lines_from(1) == [delta(1, "Hel")[:-1], delta(1, "lo")[:-1]]
    assert events.conversation_id == CID
    events.remove_listener(listener)
    events.feed(delta(1, "!"))
    assert woken == [3] and events.line_count == 4


def test_a_turn_fed_without_init_states_its_id_from_its_first_step() -> None:
    # A warm agy's turn gets only its own bytes: the id comes from the step updates' bodies,
    # after which step lines are kept without being parsed.
    events = StdoutEvents()
    assert events.feed(step(7, "user_input", "DONE") + delta(8, "x"))
    assert events.conversation_id == CID and events.line_count == 2


def test_stdout_events_past_their_bound_say_the_stream_is_incomplete(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stdout_module, "MAX_EVENT_BYTES", 3 * len(delta(1, "abc")))
    events = StdoutEvents()
    events.feed(init() + b"".join(delta(1, "abc") for _ in range(5)) + result("ok"))
    assert events.incomplete and events.line_count == 3  # init and two deltas fit
    assert events.result is not None  # the facts are still read past the bound


def test_end_of_input_takes_the_last_line_without_its_newline() -> None:
    events = StdoutEvents()
    events.feed(init() + delta(1, "tail")[:-1])
    assert events.line_count == 1 and not events.ended
    events.end_of_input()
    assert events.line_count == 2 and events.ended
    events.feed(delta(1, "late"))
    assert events.line_count == 2


# -- the source ---------------------------------------------------------------------------------


async def test_each_poll_decodes_only_new_lines_and_gives_the_newest_snapshot_per_step() -> None:
    agy = FakeAgy()
    source = await opened(agy)
    assert await source.poll() == []
    agy.events.feed(init() + step(0, "user_input", "DONE") + delta(1, "Hel") + delta(1, "lo"))
    first = await source.poll()
    assert [(s.index, s.kind, s.text) for s in first] == [
        (0, StepKind.USER, ""),
        (1, StepKind.ASSISTANT, "Hello"),
    ]
    assert await source.poll() == []  # nothing new: nothing decoded, nothing given
    usage = {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}
    agy.events.feed(delta(1, ", world") + step(1, "agent_response", "DONE", usage=usage))
    (done,) = await source.poll()
    assert done.text == "Hello, world" and done.status is StepStatus.DONE
    assert done.usage is not None and done.usage.input == 10
    assert not done.thinking  # stream-json never carries thinking text
    assert source.last_final_index() == 1
    await source.aclose()


async def test_a_line_split_across_feeds_and_torn_or_foreign_lines() -> None:
    agy = FakeAgy()
    source = await opened(agy)
    whole = init() + delta(1, "one ")
    agy.events.feed(whole[:-7])
    got = await source.poll()
    assert got == []  # `init` alone changes no step; the delta's line is not whole yet
    agy.events.feed(whole[-7:] + b"warning: ignoring unsupported stream input\n")
    agy.events.feed(b'{"event":"step_update","step_upd\n')  # torn: kept raw, skipped by the source
    agy.events.feed(b'{"event":"mystery"}\n' + delta(1, "two"))
    texts = [s.text for s in await source.poll()]
    assert texts == ["one two"]
    assert source.skipped == 2  # the torn line and the unknown event, each skipped with a reason
    assert b"warning: ignoring" in agy.events.text  # not an event: kept as agy's words


async def test_the_assembler_gets_the_same_events_however_the_bytes_arrive() -> None:
    blob = (
        init()
        + step(0, "user_input", "DONE")
        + delta(1, "Hel")
        + delta(1, "lo ")
        + step(2, "tool", "ACTIVE", tool_name="run_command", tool_info={"name": "run_command"})
        + delta(3, "done")
        + step(3, "agent_response", "DONE")
        + result("done")
    )

    async def events_for(sizes: int) -> list[Any]:
        agy = FakeAgy()
        source = await opened(agy)
        assembler = StepAssembler(model="m", min_index=0)
        out = []
        for at in range(0, len(blob), sizes):
            agy.events.feed(blob[at : at + sizes])
            out += assembler.feed(await source.poll())
        out += assembler.feed(await source.poll(force=True))
        return [(e.type, getattr(e, "delta", "")) for e in out + assembler.finish()]

    whole = await events_for(len(blob))
    text = "".join(d for kind, d in whole if kind == "text_delta")
    assert text == "Hello done" and whole[-1][0] == "done"
    assert any(kind == "thinking_start" for kind, _ in whole)  # agy's tool run, as a block
    # Byte by byte the deltas come in more pieces; what they add up to is the same.
    for size in (1, 7):
        pieces = await events_for(size)
        assert "".join(d for kind, d in pieces if kind == "text_delta") == text
        assert [k for k, _ in pieces if not k.endswith("delta")] == [
            k for k, _ in whole if not k.endswith("delta")
        ]


async def test_a_long_answer_is_copied_a_bounded_number_of_times() -> None:
    # Each snapshot copies the step's whole text; past COALESCE_FROM the source snapshots a
    # growing text when it doubled or, when asked (force, or FLUSH_EVERY passed), once per
    # poll: 2,000 deltas in one poll are joined a handful of times, not 2,000.
    agy = FakeAgy()
    source = await opened(agy)
    chunk = "x" * 99 + " "
    agy.events.feed(init() + b"".join(delta(1, chunk) for _ in range(2000)))
    (snapshot,) = await source.poll(force=True)
    total = 2000 * len(chunk)
    assert snapshot.text == chunk * 2000
    assert source.chars_joined < 2 * total + COALESCE_FROM * len(chunk)  # linear, not quadratic


async def test_a_stream_past_its_bound_gives_what_it_kept_then_fails_the_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stdout_module, "MAX_EVENT_BYTES", 4 * len(delta(1, "abc")))
    agy = FakeAgy()
    source = await opened(agy)
    agy.events.feed(init() + b"".join(delta(1, "abc") for _ in range(10)))
    (kept,) = await source.poll(force=True)
    assert kept.text == "abc" * 3
    with pytest.raises(SourceError, match="not in it"):
        await source.poll()


async def test_wait_returns_when_agy_prints_and_cancel_has_nothing_to_say() -> None:
    agy = FakeAgy()
    source = await opened(agy)
    waiting = asyncio.ensure_future(source.wait(HANG))
    await asyncio.sleep(0)
    assert not waiting.done()
    asyncio.get_running_loop().call_soon(agy.events.feed, init() + delta(1, "hi"))
    await asyncio.wait_for(waiting, HANG)
    await source.cancel()  # a no-op: nothing to tell agy over its stdout
    assert [s.text for s in await source.poll()] == ["hi"]
    await source.aclose()
    assert agy.events._listeners == []


async def test_no_stream_json_no_source() -> None:
    text_agy = FakeAgy(request=TurnRequest(prompt="hi", cwd=".", agy_bin="agy", output_format=""))
    source = StreamJsonEventSource.for_turn(turn_for(text_agy))
    with pytest.raises(SourceError, match="output-format text"):
        await source.open()
    with pytest.raises(SourceError, match="not read"):
        await StreamJsonEventSource.for_turn(turn_for(None)).open()


async def test_the_stream_end_releases_what_was_held() -> None:
    # agy 1.1.12–1.1.15 broke characters at delta boundaries: text from a U+FFFD on is held for
    # `result` to heal; a stream that ends without one shows it as it streamed.
    agy = FakeAgy()
    source = await opened(agy)
    agy.events.feed(init() + delta(1, "caf") + delta(1, "\ufffd ok"))
    assert [s.text for s in await source.poll(force=True)] == ["caf"]
    agy.events.end_of_input()
    assert [s.text for s in await source.poll()] == ["caf\ufffd ok"]
    # No `result` came: agy died mid-turn, so this is not the whole turn (the database may say
    # more): the source says so once it has given what it holds.
    with pytest.raises(SourceError, match="without the turn's result"):
        await source.poll()


# -- the handover and the binding: stdout as the last resort ------------------------------------


def specs_with_stdout(tmp_path: Path, script: Script) -> dict[str, EventSourceSpec]:
    specs = dict(edges_for(script, tmp_path, names=("rpc", "sqlite")).sources())
    specs["stream-json"] = EventSourceSpec(
        name="stream-json", factory=StreamJsonEventSource.for_turn, plugin="test", stdout=True
    )
    return specs


async def test_stdout_reads_when_neither_the_database_nor_rpc_can(tmp_path: Path) -> None:
    script = Script(
        open_errors={
            "sqlite": SourceError("database is locked"),
            "rpc": SourceError("no language server"),
        }
    )
    agy = FakeAgy()
    turn = turn_for(agy)
    specs = specs_with_stdout(tmp_path, script)
    handover = SourceHandover(specs, turn, database=database_source(specs))
    await handover.open("rpc")
    assert handover.state is HandoverState.STDOUT and turn.source == "stream-json"
    agy.events.feed(init() + step(0, "user_input", "DONE") + delta(1, "from stdout"))
    polled = await handover.poll(Exits())  # type: ignore[arg-type]
    assert [s.text for s in polled] == ["", "from stdout"]
    fed: list[Any] = []

    async def feed(steps: list[Any]) -> None:
        fed.extend(steps)

    agy.events.feed(step(1, "agent_response", "DONE") + result("from stdout"))
    agy.events.end_of_input()
    await handover.drain(feed)  # stdout has its own last word: the database is not asked
    assert [(s.text, s.status) for s in fed] == [("from stdout", StepStatus.DONE)]
    assert handover.state is HandoverState.STDOUT
    await handover.aclose()
    assert all(s.closed for s in script.sources)


async def test_a_chosen_stdout_source_reads_alone_or_hands_the_turn_to_the_database(
    tmp_path: Path,
) -> None:
    script = Script()
    specs = specs_with_stdout(tmp_path, script)
    turn = turn_for(FakeAgy())
    handover = SourceHandover(specs, turn, database=database_source(specs))
    await handover.open("stream-json")
    assert handover.state is HandoverState.STDOUT and script.sources == []  # nothing beside it
    await handover.aclose()
    text_agy = FakeAgy(request=TurnRequest(prompt="hi", cwd=".", agy_bin="agy", output_format=""))
    turn = turn_for(text_agy)
    handover = SourceHandover(specs, turn, database=database_source(specs))
    await handover.open("stream-json")  # no stream-json from this agy: the database reads
    assert handover.state is HandoverState.LAST and turn.source == "sqlite"
    await handover.aclose()


async def test_an_unbound_database_is_no_failure_when_stdout_can_be_read(
    tmp_path: Path,
) -> None:
    script = Script()
    edges = edges_for(script, tmp_path, names=("sqlite",))

    async def never(folder: Path, before: set[str], process: Any, **kw: Any) -> Any:
        raise TurnError("conversation's database did not appear (agy exited first)")

    process = FakeProcess(TurnRequest(prompt="hi", cwd=".", agy_bin="agy"), script)
    await process.start()
    process.exit(0)
    plan = TurnPlan(
        config=Config(),
        state_dir="",
        session_id="",
        resume=False,
        conversation_id="",
        min_index=-1,
        prompt="hi",
        source_name="sqlite",
        request=process.request,
    )
    with pytest.raises(TurnError, match="did not appear"):  # nothing else to read from
        await bind_turn(dataclasses.replace(edges, bind=never), tmp_path, set(), process, plan)
    specs = specs_with_stdout(tmp_path, script)
    with_stdout = dataclasses.replace(edges, bind=never, sources=lambda: specs)
    binding = await bind_turn(with_stdout, tmp_path, set(), process, plan)
    assert binding.conversation_id == CID and binding.path == tmp_path / f"{CID}.db"


async def test_a_stdout_stream_that_ends_without_its_result_is_finished_from_the_database(
    tmp_path: Path,
) -> None:
    script = Script()
    specs = specs_with_stdout(tmp_path, script)
    agy = FakeAgy()
    turn = turn_for(agy)
    handover = SourceHandover(specs, turn, database=database_source(specs))
    await handover.open("stream-json")
    agy.events.feed(init() + step(0, "user_input", "DONE") + delta(1, "cut sh"))
    agy.events.end_of_input()  # agy died mid-turn: no `result`
    fed: list[Any] = []

    async def feed(steps: list[Any]) -> None:
        fed.extend(steps)

    await handover.drain(feed)
    assert [s.text for s in fed] == ["", "cut sh"]  # what stdout had, then the database's word
    assert handover.state is HandoverState.LAST and turn.source == "sqlite"
    (database,) = script.sources
    await handover.aclose()
    assert database.closed
