"""agy-sim as one agy for many turns (`--input-format stream-json`, no `-p`; AGY-FORMATS §2.3, §2.4).

Real agy-sim processes driven over their stdin and stdout: `init` before any input after the cold
start, turns with running totals, the endings (stdin's end, SIGINT/SIGTERM mid-turn and idle),
the unsupported-input table, and the per-turn plays and faults a warm pool is tested with.
Expectations come from the scenario files; nothing here measures wall-clock time.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest
from sim_support import PersistentSim
from sim_support import databases
from sim_support import rows
from sim_support import run_sim
from sim_support import user_line

from agy_provider.sim.scenario import PlannerSpec
from agy_provider.sim.scenario import load_scenario
from agy_provider.sim.stream_input import Refused
from agy_provider.sim.stream_input import Skipped
from agy_provider.sim.stream_input import UserTurn
from agy_provider.sim.stream_input import read_input_line
from agy_provider.sim.versions import AgyVersion

pytestmark = pytest.mark.slow


def answer_of(scenario: str, turn: int = 0) -> str:
    """The text a scenario's turn answers with (its planners' chunks, the last one wins)."""
    texts = [
        "".join(step.text)
        for step in load_scenario(scenario).turn(turn).steps
        if isinstance(step, PlannerSpec) and step.text
    ]
    return texts[-1]


def results(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["result"] for e in events if e["event"] == "result"]


def updates(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["step_update"] for e in events if e["event"] == "step_update"]


# -- 1. init before any input, after the cold start ------------------------------------------


@pytest.mark.parametrize("version", ["1.1.8", "1.1.17", "1.1.20", "1.2.13", "1.3.3"])
def test_init_comes_before_any_input_in_every_version(tmp_path: Path, version: str) -> None:
    with PersistentSim(tmp_path / "app", AGY_SIM_VERSION=version) as sim:
        init = sim.next_event()  # nothing has been written to stdin yet
        assert init["event"] == "init" and init["conversation_id"]
        events = sim.turn("hi")
        sim.close_stdin()
        assert sim.wait() == 0
        assert sim.rest() == []
    assert [e["event"] for e in events].count("init") == 0
    [result] = results(events)
    assert result["conversation_id"] == init["conversation_id"]
    assert result["response"] == answer_of("default")
    [db] = databases(tmp_path / "app")
    assert db.stem == init["conversation_id"]


def test_the_default_cold_start_is_applied_before_init(tmp_path: Path) -> None:
    log = tmp_path / "agy.log"
    # No AGY_SIM_COLD_START_MS: the persistent default. Speed 50 makes 2500 ms take 50 ms.
    with PersistentSim(
        tmp_path / "app", "--log-file", str(log), speed=50, AGY_SIM_COLD_START_MS=""
    ) as sim:
        assert sim.next_event()["event"] == "init"
        # The cold start was logged before init was printed, so it is in the log by now.
        assert "agy-sim cold start: 2500 ms (the default for --input-format stream-json)" in (
            log.read_text()
        )
        sim.close_stdin()
        assert sim.wait() == 0


def test_the_cold_start_comes_from_the_environment(tmp_path: Path) -> None:
    log = tmp_path / "agy.log"
    with PersistentSim(tmp_path / "app", "--log-file", str(log), AGY_SIM_COLD_START_MS="7") as sim:
        assert sim.next_event()["event"] == "init"
        assert "agy-sim cold start: 7 ms (AGY_SIM_COLD_START_MS)" in log.read_text()
        sim.close_stdin()
        assert sim.wait() == 0
    # `-p` keeps the scenario's cold start unless the variable is set, which then wins.
    one_shot = tmp_path / "p.log"
    done = run_sim(tmp_path / "app", "-p", "hi", "--log-file", str(one_shot), AGY_SIM_COLD_START_MS="")
    assert done.returncode == 0
    assert "agy-sim cold start: 150 ms (scenario 'default')" in one_shot.read_text()
    run_sim(tmp_path / "app", "-p", "hi", "--log-file", str(one_shot), AGY_SIM_COLD_START_MS="9")
    assert "agy-sim cold start: 9 ms (AGY_SIM_COLD_START_MS)" in one_shot.read_text()
    bad = run_sim(tmp_path / "app", "-p", "hi", AGY_SIM_COLD_START_MS="soon")
    assert bad.returncode == 1 and "AGY_SIM_COLD_START_MS" in bad.stderr


def test_a_resumed_process_names_its_conversation_and_counts_earlier_turns(
    tmp_path: Path,
) -> None:
    app = tmp_path / "app"
    with PersistentSim(app, scenario="two-turn") as sim:
        cid = sim.next_event()["conversation_id"]
        [first] = results(sim.turn("one"))
        sim.close_stdin()
        assert sim.wait() == 0
    with PersistentSim(app, "--conversation", cid, scenario="two-turn") as sim:
        init = sim.next_event()
        [second] = results(sim.turn("two"))
        sim.close_stdin()
        assert sim.wait() == 0
        assert "not found" not in sim.stderr()
    assert init["conversation_id"] == cid == second["conversation_id"]
    assert second["response"] == answer_of("two-turn", 1)  # the conversation's second turn
    assert second["num_turns"] == 2
    turn_two = load_scenario("two-turn").turn(1).steps[-1]
    assert isinstance(turn_two, PlannerSpec)
    wanted = first["usage"]["input_tokens"] + turn_two.usage.input
    assert second["usage"]["input_tokens"] == wanted
    assert second["duration_seconds"] > first["duration_seconds"]


@pytest.mark.parametrize("version", ["1.2.13", "1.3.3"])
def test_an_unknown_conversation_forks_with_only_a_warning(tmp_path: Path, version: str) -> None:
    unknown = "0badc0de-0000-4000-8000-000000000000"
    with PersistentSim(tmp_path / "app", "--conversation", unknown, AGY_SIM_VERSION=version) as sim:
        init = sim.next_event()
        [result] = results(sim.turn("hi"))
        sim.close_stdin()
        assert sim.wait() == 0
        assert sim.stderr() == f'warning: conversation "{unknown}" not found\n'
    assert init["conversation_id"] != unknown
    assert result["conversation_id"] == init["conversation_id"]


def test_an_unknown_conversation_is_refused_by_1_1(tmp_path: Path) -> None:
    unknown = "0badc0de-0000-4000-8000-000000000000"
    with PersistentSim(
        tmp_path / "app", "--conversation", unknown, AGY_SIM_VERSION="1.1.20"
    ) as sim:
        assert sim.wait() == 1
        assert sim.rest() == []  # no init
        assert f"conversation {unknown} not found" in sim.stderr()


# -- 2. one turn per line, running totals ------------------------------------------------------


def test_turns_share_one_conversation_with_running_totals(tmp_path: Path) -> None:
    with PersistentSim(tmp_path / "app", scenario="two-turn") as sim:
        init = sim.next_event()
        # A string content, then a list of text blocks with a role: both are one turn each.
        turn_one = sim.turn("count")
        sim.send(
            json.dumps(
                {
                    "event": "user",
                    "message": {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "and "},
                            {"type": "text", "text": "on"},
                        ],
                    },
                }
            ).encode()
            + b"\n"
        )
        turn_two = sim.until_result()
        sim.close_stdin()
        assert sim.wait() == 0
    for events in (turn_one, turn_two):
        assert [e["event"] for e in events].count("result") == 1 and events[-1]["event"] == "result"
        assert {u["conversation_id"] for u in updates(events)} == {init["conversation_id"]}
    [first], [second] = results(turn_one), results(turn_two)
    assert (first["response"], second["response"]) == (
        answer_of("two-turn"),
        answer_of("two-turn", 1),
    )
    assert (first["num_turns"], second["num_turns"]) == (1, 2)
    step = load_scenario("two-turn").turn(1).steps[-1]
    assert isinstance(step, PlannerSpec)
    assert second["usage"]["input_tokens"] == first["usage"]["input_tokens"] + step.usage.input
    assert second["usage"]["cache_read_tokens"] == step.usage.cache_read
    assert second["duration_seconds"] >= first["duration_seconds"]
    # step_index goes on across turns: turn 2 starts after turn 1's last row.
    assert min(u["step_index"] for u in updates(turn_two)) > max(
        u["step_index"] for u in updates(turn_one)
    )
    # The database holds both turns' prompts, the second one joined from its blocks.
    [db] = databases(tmp_path / "app")
    payloads = b"".join(r[4] or b"" for r in rows(db) if r[1] == 14)  # USER_INPUT rows
    assert b"count" in payloads and b"and on" in payloads


def test_a_turn_is_read_only_after_the_previous_result(tmp_path: Path) -> None:
    # Two lines written at once: every event of turn 1 comes before any of turn 2.
    with PersistentSim(tmp_path / "app", scenario="two-turn") as sim:
        sim.next_event()
        sim.send(user_line("one") + user_line("two"))
        turn_one, turn_two = sim.until_result(), sim.until_result()
        sim.close_stdin()
        assert sim.wait() == 0
    assert results(turn_one)[0]["num_turns"] == 1 and results(turn_two)[0]["num_turns"] == 2
    assert all(
        u["step_index"] > max(v["step_index"] for v in updates(turn_one)) for u in updates(turn_two)
    )


# -- 3. endings --------------------------------------------------------------------------------


def test_stdin_end_finishes_the_running_turn(tmp_path: Path) -> None:
    with PersistentSim(tmp_path / "app", scenario="slow") as sim:
        sim.next_event()
        sim.send(user_line("take your time"))
        sim.close_stdin()  # while the turn runs
        events = sim.until_result()
        assert sim.wait() == 0
        assert sim.rest() == []
    [result] = results(events)
    assert result["status"] == "SUCCESS" and result["response"] == answer_of("slow")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_turn_is_context_canceled(tmp_path: Path, signum: int) -> None:
    # Turn 2 hangs forever (the `hang` scenario): only the signal can end it.
    with PersistentSim(
        tmp_path / "app", speed=1, AGY_SIM_TURNS="default,hang", AGY_SIM_NO_SERVER="0"
    ) as sim:
        sim.next_event()
        server = psutil.Process(sim.proc.pid).children()
        [first] = results(sim.turn("hi"))
        sim.send(user_line("and now?"))
        while not (
            (e := sim.next_event())["event"] == "step_update"
            and e["step_update"]["step_type"] == "agent_response"
            and e["step_update"]["state"] == "DONE"
        ):
            pass  # turn 2 has answered in part and is now stuck
        sim.proc.send_signal(signum)
        last = sim.next_event()
        assert sim.wait() == 1
        assert sim.rest() == []  # the result is the last line
        assert "Error: context canceled" in sim.stderr()
    result = last["result"]
    assert (result["status"], result["error"], result["response"]) == (
        "ERROR",
        "context canceled",
        "",
    )
    assert result["num_turns"] == 2
    assert result["usage"]["input_tokens"] >= first["usage"]["input_tokens"]
    assert server and not any(
        child.is_running() for child in server
    )  # the language server went too
    [db] = databases(tmp_path / "app")
    turn_two_rows = [r for r in rows(db) if r[0] > 2]
    assert turn_two_rows  # the partial turn's rows stay


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_idle_exits_1_printing_nothing(tmp_path: Path, signum: int) -> None:
    with PersistentSim(tmp_path / "app") as sim:
        sim.next_event()
        sim.turn("hi")
        sim.proc.send_signal(signum)
        assert sim.wait() == 1
        assert sim.rest() == []
        assert sim.stderr() == ""


def test_a_signal_before_any_turn_exits_1_printing_nothing(tmp_path: Path) -> None:
    with PersistentSim(tmp_path / "app") as sim:
        assert sim.next_event()["event"] == "init"
        sim.proc.send_signal(signal.SIGTERM)
        assert sim.wait() == 1
        assert sim.rest() == []
    assert databases(tmp_path / "app") == []  # no turn, no conversation database


# -- 4. unsupported input (AGY-FORMATS §2.4) ---------------------------------------------------

PARSE = "failed to parse stream input message: "
# What each kind of line means (agy 1.2.13 unless named): the pure reading is pinned here, and
# the end-to-end test below checks that a real process acts on it.
TABLE = [
    (b'{"event":"user","message":{"content":"hi"}}\n', UserTurn("hi")),
    (b'{"event":"user","message":{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}', UserTurn("ab")),
    (b"  \n", Skipped()),
    (b'{"event":"assistant","message":{"content":"x"}}', Skipped('warning: ignoring unsupported stream input message event "assistant"')),
    (b'{"event":"control_request","request":{"subtype":"interrupt"}}', Refused('unsupported stream input message event "control_request"', 2)),
    (b'{"event":"control_response","response":{}}', Refused('unsupported stream input message event "control_response"', 2)),
    (b'{"event":"user","message":{"content":"/model"}}', Refused('slash command "/model" is not supported in stream-json input mode', 2)),
    (b'{"event":"user","message":{"content":[{"type":"text","text":"/usage"}]}}', Refused('slash command "/usage" is not supported in stream-json input mode', 2)),
    (b'{"event":"user","message":{"content":"/model x"}}', Refused('slash command "/model" is not supported in stream-json input mode', 2)),
    (b'{"event":"user","message":{"content":"/deploy now"}}', UserTurn("/deploy now")),  # a skill
    (b'{"message":{"content":"hi"}}', Refused('stream input message is missing the "event" field')),
    (b"this is not json", Refused(PARSE + "invalid character 't' looking for beginning of value")),
    (b'{"event":"user"', Refused(PARSE + "unexpected end of JSON input")),
    (b'{"event":"user","message":{"content":[{"type":"image","source":{}}]}}', Refused('stream input message has an unsupported content block type "image": only text is supported')),
    (b'{"event":"user"}', Refused('stream input message is missing the "message" field')),
    (b'{"event":"user","message":{"content":""}}', Refused("stream input message has no content")),
    (b'{"event":"user","message":{"content":[]}}', Refused("stream input message has no content")),
    (b'{"event":"user","message":"hi"}', Refused(PARSE + "json: cannot unmarshal string into Go struct field InputMessage.message of type UserMessage")),
    (b'{"event":"user","message":{"content":5}}', Refused(PARSE + "json: cannot unmarshal number into Go struct field message.content of type []ContentBlock")),
    (b'{"event":5}', Refused(PARSE + "json: cannot unmarshal number into Go struct field InputMessage.event of type string")),
    (b"[1]", Refused(PARSE + "json: cannot unmarshal array into Go value of type stream.InputMessage")),
]  # fmt: skip
OLDER = [
    (b'{"event":"user","message":{"content":"/usage"}}', "1.1.17", UserTurn("/usage")),  # no CLI commands yet
    (b'{"type":"user","message":{"content":"hi"}}', "1.1.14", UserTurn("hi")),
    (b'{"message":{"content":"hi"}}', "1.1.14", Skipped("Error: invalid stream-json input line")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "version", "expected"), [(raw, "1.2.13", want) for raw, want in TABLE] + OLDER
)
def test_read_input_line(raw: bytes, version: str, expected: object) -> None:
    assert read_input_line(raw, AgyVersion.parse(version)) == expected


@pytest.mark.parametrize(
    ("line", "expected"), [row for row in TABLE if row[0].strip() and row[0] != TABLE[0][0]]
)
def test_a_process_acts_on_each_kind_of_line(
    tmp_path: Path, line: bytes, expected: UserTurn | Skipped | Refused
) -> None:
    with PersistentSim(tmp_path / "app", scenario="two-turn") as sim:
        init = sim.next_event()
        [first] = results(sim.turn("one"))
        sim.send(line.rstrip(b"\n") + b"\n")
        if isinstance(expected, Refused):
            refusal = sim.next_event()
            assert sim.wait() == expected.exit_code
            assert sim.rest() == []
            assert f"Error: {expected.error}" in sim.stderr()
            result = refusal["result"]
            assert (result["status"], result["error"]) == ("ERROR", expected.error)
            assert result["conversation_id"] == init["conversation_id"]
            assert result["num_turns"] == 1 and result["usage"] == first["usage"]  # totals so far
            return
        if isinstance(expected, UserTurn):  # it runs as turn 2
            [second] = results(sim.until_result())
        else:  # skipped: the next line runs as turn 2
            assert isinstance(expected, Skipped)
            [second] = results(sim.turn("two"))
        sim.close_stdin()
        assert sim.wait() == 0
        assert (expected.warning + "\n" if isinstance(expected, Skipped) else "") == sim.stderr()
    assert second["status"] == "SUCCESS" and second["response"] == answer_of("two-turn", 1)


# -- 5. per-turn plays and faults --------------------------------------------------------------


def test_turn_n_plays_the_scenario_agy_sim_turns_names(tmp_path: Path) -> None:
    with PersistentSim(
        tmp_path / "app", scenario="two-turn", AGY_SIM_TURNS="default,-,two-turn#2"
    ) as sim:
        sim.next_event()
        answers = [results(sim.turn(f"turn {n}"))[0]["response"] for n in range(1, 5)]
        # A marker in the prompt wins over the list for its turn.
        marked = results(sim.turn("once more [agy-sim:thinking]"))[0]["response"]
        sim.close_stdin()
        assert sim.wait() == 0
    # 1: default; 2: the process's scenario as usual (its turn 2); 3: two-turn's second turn;
    # 4: past the list, as usual.
    assert answers == [
        answer_of("default"),
        answer_of("two-turn", 1),
        answer_of("two-turn", 1),
        answer_of("two-turn", 1),
    ]
    assert marked == answer_of("thinking")


def test_a_scenario_can_name_its_process_turns(tmp_path: Path) -> None:
    path = tmp_path / "pool.json"
    document = json.loads(
        (Path(__file__).parents[1] / "agy_provider/sim/scenarios/two-turn.json").read_text()
    )
    document["process_turns"] = ["two-turn#2", "two-turn#1"]
    path.write_text(json.dumps(document))
    with PersistentSim(tmp_path / "app", scenario=str(path)) as sim:
        sim.next_event()
        answers = [results(sim.turn("go"))[0]["response"] for _ in range(2)]
        sim.close_stdin()
        assert sim.wait() == 0
    assert answers == [answer_of("two-turn", 1), answer_of("two-turn")]


def test_a_bad_turn_list_fails_before_init_and_a_bad_marker_only_warns(tmp_path: Path) -> None:
    with PersistentSim(tmp_path / "app", AGY_SIM_TURNS="default,no-such-scenario") as sim:
        assert sim.wait() == 1
        assert sim.rest() == []
        assert "AGY_SIM_TURNS" in sim.stderr() and "no-such-scenario" in sim.stderr()
    with PersistentSim(tmp_path / "app") as sim:
        sim.next_event()
        [result] = results(sim.turn("[agy-sim:no-such-scenario] hi"))
        sim.close_stdin()
        assert sim.wait() == 0
        assert "warning: agy-sim:" in sim.stderr() and "no-such-scenario" in sim.stderr()
    assert result["response"] == answer_of("default")


def test_a_one_shot_turn_plays_the_list_too(tmp_path: Path) -> None:
    done = run_sim(tmp_path / "app", "-p", "hi", AGY_SIM_TURNS="two-turn#2")
    assert done.returncode == 0 and done.stdout.strip() == answer_of("two-turn", 1)


def test_a_crash_mid_turn_leaves_its_last_words(tmp_path: Path) -> None:
    crash = load_scenario("crash").faults
    with PersistentSim(tmp_path / "app", AGY_SIM_TURNS="default,crash") as sim:
        sim.next_event()
        [first] = results(sim.turn("hi"))
        sim.send(user_line("again"))
        code = sim.wait()
        later = [json.loads(line) for line in sim.rest()]
        stderr = sim.stderr()
    assert code == crash.crash_exit_code
    assert results(later) == []  # died mid-turn: no result
    assert "panic: runtime error" in stderr and "goroutine" in stderr
    assert first["response"] == answer_of("default")
    # The crash fault counts from the turn's first row: turn 2 wrote its user, history and
    # first answer rows (3 rows from its start), then died before the next.
    [db] = databases(tmp_path / "app")
    turn_two = [r for r in rows(db) if r[0] >= 3]
    assert [r[0] for r in turn_two] == [3, 4, 5] and crash.crash_at_step == 3


def test_a_crash_between_turns_happens_while_idle(tmp_path: Path) -> None:
    faults = load_scenario("crash-between-turns").faults
    with PersistentSim(tmp_path / "app", AGY_SIM_TURNS="default,crash-between-turns") as sim:
        sim.next_event()
        sim.turn("one")
        [second] = results(sim.turn("two"))
        code = sim.wait()  # stdin is still open: the process died on its own
        assert sim.rest() == []
        stderr = sim.stderr()
    assert second["status"] == "SUCCESS" and second["response"] == answer_of("crash-between-turns")
    assert code == faults.crash_exit_code
    assert faults.crash_message.splitlines()[0] in stderr
