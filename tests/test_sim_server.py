"""End-to-end tests of agy-sim's language server, driven over real sockets with plain httpx.

The test plays the simulated agy parent itself (CONTRACT.md): it starts the server with a
socketpair, announces conversations whose databases it writes, and answers forwarded requests.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import socket
import struct
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from waiting import wait_until

from agy_provider.sim import descriptors as pb
from agy_provider.sim.control import control_lines
from agy_provider.sim.writer import ConversationWriter

SERVICE = "/exa.language_server_pb.LanguageServerService/"
JSON_HEADERS = {"Content-Type": "application/json", "Connect-Protocol-Version": "1"}
STREAM_HEADERS = {"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"}
MINIMAL_SCENARIO: dict[str, Any] = {"turns": [{"steps": [{"type": "planner", "text": ["hi"]}]}]}
START_TIMEOUT_S = 20.0
REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference"


class FakeParent:
    """Plays agy-sim's parent process for one language server child."""

    def __init__(
        self,
        app_dir: Path,
        *,
        csrf: str | None = None,
        server: Any = None,
        parent_pid: int | None = None,
    ) -> None:
        app_dir.mkdir(parents=True, exist_ok=True)
        self.app_dir = app_dir
        self.log_file = app_dir / "log" / "cli-test.log"
        scenario_path = app_dir / "scenario.json"
        scenario_path.write_text(json.dumps({**MINIMAL_SCENARIO, "server": server or {}}))
        ours, theirs = socket.socketpair()
        argv = [
            sys.executable, "-m", "agy_provider.sim.server",
            "--app-dir", str(app_dir), "--control-fd", str(theirs.fileno()),
            "--parent-pid", str(parent_pid or os.getpid()), "--log-file", str(self.log_file),
        ] + (["--csrf-token", csrf] if csrf else [])  # fmt: skip
        env = {**os.environ, "AGY_SIM_SCENARIO": str(scenario_path)}
        self.proc = subprocess.Popen(
            argv, pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL
        )
        theirs.close()
        self.sock = ours
        self.requests: queue.Queue[dict[str, Any]] = queue.Queue()
        self.responder: Callable[[dict[str, Any]], dict[str, Any]] = lambda _r: {"ok": True}
        self._send_lock = threading.Lock()
        self._ready: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()
        self.ready = self._ready.get(timeout=START_TIMEOUT_S)
        self.https = f"https://127.0.0.1:{self.ready['https']}"
        self.http = f"http://127.0.0.1:{self.ready['http']}"
        self.client = httpx.Client(verify=False, trust_env=False, timeout=10.0)

    def _read_loop(self) -> None:
        for line in control_lines(self.sock):
            message = json.loads(line)
            if message["op"] == "ready":
                self._ready.put(message)
                continue
            self.requests.put(message)
            self.send({"op": "reply", "seq": message["seq"], **self.responder(message)})

    def hang_up(self) -> None:
        # shutdown() first: a plain close() does not end the reader thread's blocked recv().
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()

    def send(self, message: dict[str, Any]) -> None:
        with self._send_lock:
            self.sock.sendall(json.dumps(message).encode() + b"\n")

    def announce(self, conversation_id: str, db: Path, trajectory_id: str) -> None:
        self.send(
            {
                "op": "conversation",
                "id": conversation_id,
                "db": str(db),
                "trajectoryId": trajectory_id,
            }
        )

    def status(self, conversation_id: str, running: bool) -> None:
        self.send(
            {"op": "status", "id": conversation_id, "status": "RUNNING" if running else "IDLE"}
        )

    def call(
        self, method: str, body: Any = None, *, base: str | None = None, **kw: Any
    ) -> httpx.Response:
        headers = {**JSON_HEADERS, **kw.pop("headers", {})}
        return self.client.post(
            (base or self.https) + SERVICE + method, json=body or {}, headers=headers, **kw
        )

    def close(self) -> None:
        self.client.close()
        self.hang_up()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def parent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeParent]:
    fake = FakeParent(tmp_path_factory.mktemp("agy-app"))
    yield fake
    fake.close()


# --- conversations the test writes ------------------------------------------------------------


def user_input(text: str) -> Any:
    step = pb.Step(type=pb.STEP_TYPE["CORTEX_STEP_TYPE_USER_INPUT"])
    step.status = pb.STEP_STATUS["CORTEX_STEP_STATUS_DONE"]
    step.user_input.user_response = text
    step.user_input.items.add(text=text)
    return step


def planner(text: str, *, done: bool = True, tool: bool = False) -> Any:
    step = pb.Step(type=pb.STEP_TYPE["CORTEX_STEP_TYPE_PLANNER_RESPONSE"])
    status = "CORTEX_STEP_STATUS_DONE" if done else "CORTEX_STEP_STATUS_GENERATING"
    step.status = pb.STEP_STATUS[status]
    step.planner_response.modified_response = text
    if done:
        step.planner_response.response = text
    step.metadata.model_usage.input_tokens = 12
    if tool:
        call = step.planner_response.tool_calls.add()
        call.id, call.name, call.arguments_json = "t1", "run_command", '{"CommandLine":"pwd"}'
    return step


def run_command(*, waiting: bool = False) -> Any:
    step = pb.Step(type=pb.STEP_TYPE["CORTEX_STEP_TYPE_RUN_COMMAND"])
    status = "CORTEX_STEP_STATUS_WAITING" if waiting else "CORTEX_STEP_STATUS_DONE"
    step.status = pb.STEP_STATUS[status]
    call = step.metadata.tool_call
    call.id, call.name, call.arguments_json = "t1", "run_command", '{"CommandLine":"pwd"}'
    step.run_command.command_line = "pwd"
    return step


def checkpoint(title: str) -> Any:
    step = pb.Step(type=pb.STEP_TYPE["CORTEX_STEP_TYPE_CHECKPOINT"])
    step.status = pb.STEP_STATUS["CORTEX_STEP_STATUS_DONE"]
    step.checkpoint.user_intent = title + "\n\nThe user says hello."
    return step


class Conv:
    """A conversation the fake parent hosts: its id, trajectory and writer."""

    def __init__(self, parent: FakeParent, folder: Path, *, notify: bool = True) -> None:
        self.id = str(uuid.uuid4())
        self.trajectory_id = str(uuid.uuid4())
        self.parent = parent
        self.db = folder / "conversations" / f"{self.id}.db"
        parent.announce(self.id, self.db, self.trajectory_id)
        on_commit = (lambda: parent.send({"op": "changed", "id": self.id})) if notify else None
        self.writer = ConversationWriter(
            self.db, self.id, trajectory_id=self.trajectory_id, on_commit=on_commit
        )

    def steps(self, offset: int | None = None) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"cascadeId": self.id}
        if offset is not None:
            body["stepOffset"] = offset
        response = self.parent.call("GetCascadeTrajectorySteps", body)
        assert response.status_code == 200, response.text
        steps: list[dict[str, Any]] = response.json().get("steps", [])
        return steps


@pytest.fixture
def conv(parent: FakeParent, tmp_path: Path) -> Iterator[Conv]:
    conversation = Conv(parent, tmp_path)
    conversation.writer.append(user_input("Say hello"))
    yield conversation
    conversation.writer.close()


# --- the stream client ------------------------------------------------------------------------


def envelope(payload: bytes, flags: int = 0) -> bytes:
    return struct.pack(">BI", flags, len(payload)) + payload


class StreamReader:
    """Reads StreamAgentStateUpdates in a thread; frames land in `frames` as (flags, bytes)."""

    def __init__(
        self,
        parent: FakeParent,
        conversation_id: str,
        *,
        base: str | None = None,
        extra: dict[str, Any] | None = None,
    ):
        self.frames: queue.Queue[tuple[int, bytes] | BaseException | None] = queue.Queue()
        self.reads = 0
        self.status = 0
        self.raw = bytearray()
        request = {"conversationId": conversation_id, **(extra or {})}
        body = envelope(json.dumps(request).encode())
        self._client = httpx.Client(verify=False, trust_env=False, timeout=30.0)
        url = (base or parent.https) + SERVICE + "StreamAgentStateUpdates"
        self._request = self._client.build_request(
            "POST", url, content=body, headers=STREAM_HEADERS
        )
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        buffer = b""
        try:
            response = self._client.send(self._request, stream=True)
            self.status = response.status_code
            for chunk in response.iter_raw():
                self.reads += 1
                self.raw += chunk
                buffer += chunk
                while len(buffer) >= 5:
                    flags, length = struct.unpack(">BI", buffer[:5])
                    if len(buffer) < 5 + length:
                        break
                    self.frames.put((flags, buffer[5 : 5 + length]))
                    buffer = buffer[5 + length :]
            self.frames.put(None)
        except BaseException as exc:  # the stream-drop test expects a transport error here
            self.frames.put(exc)

    def next(self, timeout: float = 5.0) -> tuple[int, bytes] | BaseException | None:
        return self.frames.get(timeout=timeout)

    def update(self, timeout: float = 5.0) -> dict[str, Any]:
        item = self.next(timeout)
        assert isinstance(item, tuple), item
        flags, payload = item
        assert flags == 0, (flags, payload)
        update: dict[str, Any] = json.loads(payload)["update"]
        return update

    def close(self) -> None:
        self._client.close()


# --- the tests --------------------------------------------------------------------------------


def test_heartbeat_on_both_ports_and_listening_lines(parent: FakeParent) -> None:
    for base in (parent.https, parent.http):
        response = parent.call("Heartbeat", base=base)
        assert response.status_code == 200
        assert response.json() == {}
    log = parent.log_file.read_text()
    https, http = parent.ready["https"], parent.ready["http"]
    assert f"Language server listening on random port at {https} for HTTPS (gRPC)" in log
    assert f"Language server listening on random port at {http} for HTTP" in log
    assert https != http


def test_server_is_a_child_listening_on_loopback(parent: FakeParent) -> None:
    import psutil

    child = psutil.Process(parent.proc.pid)
    assert child.ppid() == os.getpid()
    ports = {c.laddr.port for c in child.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    assert ports == {parent.ready["https"], parent.ready["http"]}
    assert not list((parent.app_dir / "tmp").glob("*/*.pem"))  # the key is not left on disk


def test_get_conversation_metadata(parent: FakeParent, conv: Conv) -> None:
    response = parent.call("GetConversationMetadata", {"conversationId": conv.id})
    assert response.status_code == 200
    assert response.json()["metadata"]["rootConversationId"] == conv.id
    unknown = parent.call("GetConversationMetadata", {"conversationId": str(uuid.uuid4())})
    assert unknown.status_code == 500
    assert unknown.json() == {"code": "unknown", "message": "trajectory not found"}


def test_get_all_cascade_trajectories(parent: FakeParent, conv: Conv) -> None:
    conv.writer.append(checkpoint("Friendly Greeting"))
    conv.writer.append(planner("Hello!"))
    summaries = parent.call("GetAllCascadeTrajectories").json()["trajectorySummaries"]
    summary = summaries[conv.id]
    assert summary == {
        "trajectoryId": conv.trajectory_id,
        "status": "CASCADE_RUN_STATUS_IDLE",
        "stepCount": 3,
        "summary": "Friendly Greeting",
        "trajectoryMetadata": {"rootConversationId": conv.id},
    }  # lastUserInputStepIndex is 0, which protobuf JSON omits
    conv.writer.append(user_input("Again"))
    parent.status(conv.id, running=True)
    wait_until(
        lambda: parent.call("GetAllCascadeTrajectories").json()["trajectorySummaries"][conv.id]
        .get("status") == "CASCADE_RUN_STATUS_RUNNING",
        "the server lists the conversation as running",
    )  # fmt: skip
    summary = parent.call("GetAllCascadeTrajectories").json()["trajectorySummaries"][conv.id]
    assert summary["lastUserInputStepIndex"] == 3
    parent.status(conv.id, running=False)


def test_get_cascade_trajectory_steps_with_offset(parent: FakeParent, conv: Conv) -> None:
    conv.writer.append(planner("Let me look.", tool=True))
    conv.writer.append(run_command())
    steps = conv.steps()
    assert [s["type"] for s in steps] == [
        "CORTEX_STEP_TYPE_USER_INPUT",
        "CORTEX_STEP_TYPE_PLANNER_RESPONSE",
        "CORTEX_STEP_TYPE_RUN_COMMAND",
    ]
    info = steps[0]["metadata"]["sourceTrajectoryStepInfo"]
    assert "stepIndex" not in info and info["trajectoryId"] == conv.trajectory_id
    assert steps[1]["metadata"]["modelUsage"]["inputTokens"] == "12"  # int64 as a string
    # The poll shape keeps the tool calls (the stream shape drops them).
    assert steps[1]["plannerResponse"]["toolCalls"][0]["name"] == "run_command"
    assert steps[2]["metadata"]["toolCall"]["argumentsJson"] == '{"CommandLine":"pwd"}'
    tail = conv.steps(offset=1)
    assert tail == steps[1:]
    assert conv.steps(offset="2") == steps[2:]  # type: ignore[arg-type]
    assert conv.steps(offset=9) == []
    unknown = parent.call("GetCascadeTrajectorySteps", {"cascadeId": "nope"})
    assert (unknown.status_code, unknown.json()["message"]) == (500, "trajectory not found")


def generic_run_command() -> Any:
    inner = pb.Step(type=pb.STEP_TYPE["CORTEX_STEP_TYPE_RUN_COMMAND"])
    inner.status = pb.STEP_STATUS["CORTEX_STEP_STATUS_DONE"]
    inner.run_command.command_line = "pwd"
    inner.run_command.exit_code = 0
    step = pb.Step(type=pb.STEP_TYPE["CORTEX_STEP_TYPE_GENERIC"])
    step.status = pb.STEP_STATUS["CORTEX_STEP_STATUS_DONE"]
    step.generic.args["CommandLine"] = "pwd"
    step.generic.result.result = "/home/user"
    step.generic.result.payload.Pack(inner)
    return step


def test_generic_step_renders_its_embedded_legacy_step(parent: FakeParent, conv: Conv) -> None:
    conv.writer.append(generic_run_command())
    result = conv.steps(offset=1)[0]["generic"]["result"]
    assert result["payload"]["@type"] == "type.googleapis.com/gemini_coder.Step"
    assert result["payload"]["runCommand"] == {"commandLine": "pwd", "exitCode": 0}


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="../shared/reference is not present")
def test_step_json_equals_the_real_schema_rendering(parent: FakeParent, conv: Conv) -> None:
    import importlib
    import sqlite3

    from google.protobuf import descriptor_pb2
    from google.protobuf import descriptor_pool
    from google.protobuf import json_format
    from google.protobuf import message_factory

    pool = descriptor_pool.DescriptorPool()
    loaded = set()
    for name in ("any", "duration", "empty", "field_mask", "struct", "timestamp", "wrappers"):
        module = importlib.import_module(f"google.protobuf.{name}_pb2")
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        pool.Add(proto)
        loaded.add(proto.name)
    descriptor_proto = descriptor_pb2.FileDescriptorProto()
    descriptor_pb2.DESCRIPTOR.CopyToProto(descriptor_proto)
    pool.Add(descriptor_proto)
    loaded.add(descriptor_proto.name)
    fds = descriptor_pb2.FileDescriptorSet.FromString(
        (REFERENCE / "schema" / "antigravity_schema.fds").read_bytes()
    )
    for file in fds.file:
        if file.name not in loaded:
            pool.Add(file)
    real_step = message_factory.GetMessageClass(pool.FindMessageTypeByName("gemini_coder.Step"))
    conv.writer.append(planner("Let me look.", tool=True))
    conv.writer.append(run_command(waiting=True))
    conv.writer.append(generic_run_command())
    served = conv.steps()
    with sqlite3.connect(f"file:{conv.db}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT step_payload FROM steps ORDER BY idx").fetchall()
    expected = [
        json_format.MessageToDict(real_step.FromString(row[0]), descriptor_pool=pool)
        for row in rows
    ]
    assert served == expected


def test_corrupt_row_is_skipped_and_logged(parent: FakeParent, conv: Conv) -> None:
    conv.writer.write_raw(1, 15, 3, b"\xff\xff\xff\xff")
    conv.writer.append(planner("still here"))
    steps = conv.steps()
    assert [s["metadata"]["sourceTrajectoryStepInfo"].get("stepIndex", 0) for s in steps] == [0, 2]
    wait_until(
        lambda: "skipping step row 1 of" in parent.log_file.read_text(), "the bad row was skipped"
    )


def test_stream_rejects_a_bare_json_body(parent: FakeParent, conv: Conv) -> None:
    body = json.dumps({"conversationId": conv.id}).encode()
    response = parent.client.post(
        parent.https + SERVICE + "StreamAgentStateUpdates", content=body, headers=STREAM_HEADERS
    )
    assert response.status_code == 200
    flags, length = struct.unpack(">BI", response.content[:5])
    assert flags == 0x02
    error = json.loads(response.content[5 : 5 + length])["error"]
    assert error["code"] == "invalid_argument"
    promised = struct.unpack(">I", body[1:5])[0]
    assert f"promised {promised} bytes in enveloped message" in error["message"]


def test_stream_unknown_conversation_ends_with_an_error(parent: FakeParent) -> None:
    stream = StreamReader(parent, str(uuid.uuid4()))
    flags, payload = stream.next()  # type: ignore[misc]
    assert flags == 0x02
    assert json.loads(payload)["error"]["message"] == "trajectory not found"
    assert stream.next() is None
    stream.close()


def test_stream_replays_then_a_frame_per_change_then_ends(parent: FakeParent, conv: Conv) -> None:
    conv.writer.append(planner("Let me look.", tool=True))
    conv.writer.append(run_command())
    stream = StreamReader(parent, conv.id)
    with pytest.raises(queue.Empty):  # idle: the stream blocks with no frame at all
        stream.next(timeout=0.5)
    assert stream.status == 0  # as connect-go does, the 200 goes out with the first frame

    parent.status(conv.id, running=True)
    first = stream.update()
    assert stream.status == 200
    assert first["conversationId"] == conv.id and first["trajectoryId"] == conv.trajectory_id
    assert first["status"] == "CASCADE_RUN_STATUS_RUNNING" and "fullyIdle" not in first
    replay = first["mainTrajectoryUpdate"]["stepsUpdate"]
    assert replay["indices"] == [0, 1, 2] and replay["totalLength"] == 3
    # The stream shape drops the tool calls that the poll shape keeps.
    assert "toolCalls" not in replay["steps"][1]["plannerResponse"]
    assert "toolCall" not in replay["steps"][2]["metadata"]
    assert replay["steps"][2]["runCommand"]["commandLine"] == "pwd"

    index = conv.writer.append(planner("Hel", done=False))
    update = stream.update()["mainTrajectoryUpdate"]["stepsUpdate"]
    assert update["indices"] == [index] and update["totalLength"] == 4
    assert update["steps"][0]["plannerResponse"]["modifiedResponse"] == "Hel"

    conv.writer.update(index, planner("Hello there", done=True))
    update = stream.update()["mainTrajectoryUpdate"]["stepsUpdate"]
    assert update["indices"] == [index]
    assert update["steps"][0]["status"] == "CORTEX_STEP_STATUS_DONE"

    parent.status(conv.id, running=False)
    last = stream.update()
    assert last["status"] == "CASCADE_RUN_STATUS_IDLE" and last["fullyIdle"] is True
    assert last["mainTrajectoryUpdate"]["fullyIdle"] is True
    assert stream.next() == (0x02, b"{}")
    assert stream.next() is None
    stream.close()


def test_a_paged_stream_replays_only_its_page_then_every_later_change(
    parent: FakeParent, conv: Conv
) -> None:
    """`initialStepsPageBounds` (agy's own request schema): a resumed client asks for the steps
    after its last index only; the rows before it are never sent, not even as "changes"."""
    conv.writer.append(planner("Earlier answer."))
    conv.writer.append(user_input("one more"))
    bounds = {"startIndex": 2, "endIndexExclusive": 2**31 - 1}
    stream = StreamReader(parent, conv.id, extra={"initialStepsPageBounds": bounds})
    parent.status(conv.id, running=True)
    replay = stream.update()["mainTrajectoryUpdate"]["stepsUpdate"]
    assert replay["indices"] == [2] and replay["totalLength"] == 3
    assert replay["pageBounds"] == bounds
    index = conv.writer.append(planner("Hello", done=True))
    update = stream.update()["mainTrajectoryUpdate"]["stepsUpdate"]
    assert update["indices"] == [index] and "pageBounds" not in update
    parent.status(conv.id, running=False)
    assert stream.update()["fullyIdle"] is True
    stream.close()


@pytest.mark.parametrize("bounds", [{"startIndex": -1}, {"startIndex": "x"}, [2]])
def test_bad_page_bounds_end_the_stream_with_invalid_argument(
    parent: FakeParent, conv: Conv, bounds: Any
) -> None:
    stream = StreamReader(parent, conv.id, extra={"initialStepsPageBounds": bounds})
    flags, payload = stream.next()  # type: ignore[misc]
    assert flags == 0x02 and json.loads(payload)["error"]["code"] == "invalid_argument"
    stream.close()


def test_stream_polls_the_database_without_changed_notifications(
    parent: FakeParent, tmp_path: Path
) -> None:
    quiet = Conv(parent, tmp_path, notify=False)
    quiet.writer.append(user_input("hi"))
    parent.status(quiet.id, running=True)
    stream = StreamReader(parent, quiet.id, base=parent.http)
    assert stream.update()["mainTrajectoryUpdate"]["stepsUpdate"]["indices"] == [0]
    quiet.writer.append(planner("polled"))
    assert stream.update()["mainTrajectoryUpdate"]["stepsUpdate"]["indices"] == [1]
    parent.status(quiet.id, running=False)
    stream.update()
    assert stream.next() == (0x02, b"{}")
    stream.close()
    quiet.writer.close()


def test_stream_client_leaving_while_idle_is_harmless(parent: FakeParent, conv: Conv) -> None:
    def said(words: str) -> int:
        return parent.log_file.read_text().count(words) if parent.log_file.exists() else 0

    opened, left = said("stream open"), said("the client left")
    stream = StreamReader(parent, conv.id)
    wait_until(
        lambda: said("stream open") > opened, "the stream is open"
    )  # the server holds it, idle: no frame yet
    stream.close()
    wait_until(
        lambda: said("the client left") > left, "the server saw its client leave"
    )  # and saw its client go
    assert parent.call("Heartbeat").status_code == 200
    assert parent.proc.poll() is None


def test_handle_cascade_user_interaction(parent: FakeParent, conv: Conv) -> None:
    index = conv.writer.append(run_command(waiting=True))
    body = {
        "cascadeId": conv.id,
        "stray": "ignored",
        "interaction": {
            "trajectoryId": conv.trajectory_id,
            "stepIndex": index,
            "permission": {"allow": True},
        },
    }
    response = parent.call("HandleCascadeUserInteraction", body)
    assert (response.status_code, response.json()) == (200, {})
    forwarded = parent.requests.get(timeout=2)
    assert isinstance(forwarded.pop("seq"), int)
    assert forwarded == {
        "op": "interaction",
        "id": conv.id,
        "stepIndex": index,
        "permission": {"allow": True},
    }

    answers = [{"question": "Which?", "selectedOptionIds": ["2"], "writeInResponse": "x"}]
    body["interaction"] = {
        "trajectoryId": conv.trajectory_id,
        "stepIndex": str(index),
        "askQuestion": {"responses": answers},
    }
    assert parent.call("HandleCascadeUserInteraction", body).status_code == 200
    forwarded = parent.requests.get(timeout=2)
    assert forwarded["askQuestion"] == {"responses": answers}
    assert forwarded["stepIndex"] == index

    parent.responder = lambda r: {
        "ok": False,
        "error": f"input not registered for step {r['stepIndex']}",
    }
    try:
        body["interaction"] = {
            "trajectoryId": conv.trajectory_id,
            "stepIndex": 7,
            "permission": {"allow": False},
        }
        stale = parent.call("HandleCascadeUserInteraction", body)
        assert stale.status_code == 500
        assert stale.json() == {"code": "unknown", "message": "input not registered for step 7"}
        assert parent.requests.get(timeout=2)["permission"] == {"allow": False}
    finally:
        parent.responder = lambda _r: {"ok": True}
    # trajectoryId and stepIndex must sit inside `interaction`; top-level copies are dropped.
    misplaced = {
        "cascadeId": conv.id,
        "trajectoryId": conv.trajectory_id,
        "stepIndex": index,
        "interaction": {"permission": {"allow": True}},
    }
    assert parent.call("HandleCascadeUserInteraction", misplaced).status_code == 500
    assert parent.requests.empty()


def test_cancel_cascade_steps(parent: FakeParent, conv: Conv) -> None:
    response = parent.call("CancelCascadeSteps", {"cascadeId": conv.id, "stepIndices": [1, "2"]})
    assert (response.status_code, response.json()) == (200, {})
    forwarded = parent.requests.get(timeout=2)
    assert (forwarded["op"], forwarded["id"], forwarded["stepIndices"]) == (
        "cancel",
        conv.id,
        [1, 2],
    )
    assert parent.call("CancelCascadeSteps", {"cascadeId": conv.id}).status_code == 200
    assert parent.requests.get(timeout=2)["stepIndices"] is None


def test_start_cascade(parent: FakeParent) -> None:
    made = str(uuid.uuid4())
    parent.responder = lambda r: {"ok": True, "id": r["id"] or made}
    try:
        response = parent.call("StartCascade", {"source": "CORTEX_TRAJECTORY_SOURCE_CLI"})
        assert response.json() == {"cascadeId": made}
        assert parent.requests.get(timeout=2)["id"] is None
        chosen = str(uuid.uuid4())
        response = parent.call("StartCascade", {"cascadeId": chosen, "source": "x"})
        assert response.json() == {"cascadeId": chosen}
        assert parent.requests.get(timeout=2)["id"] == chosen
    finally:
        parent.responder = lambda _r: {"ok": True}


def test_send_user_cascade_message(parent: FakeParent, conv: Conv) -> None:
    body: dict[str, Any] = {"cascadeId": conv.id, "items": [{"text": "Hello "}, {"text": "there"}]}
    missing = parent.call("SendUserCascadeMessage", body)
    assert missing.status_code == 400
    assert missing.json() == {
        "code": "invalid_argument",
        "message": "neither PlanModel nor RequestedModel specified",
    }
    assert parent.requests.empty()
    body["cascadeConfig"] = {"plannerConfig": {"planModel": "MODEL_PLACEHOLDER_M20"}}
    response = parent.call("SendUserCascadeMessage", body)
    assert (response.status_code, response.json()) == (200, {})
    forwarded = parent.requests.get(timeout=2)
    assert forwarded["op"] == "send_message" and forwarded["id"] == conv.id
    assert (forwarded["text"], forwarded["model"]) == ("Hello there", "MODEL_PLACEHOLDER_M20")


def test_get_available_models(parent: FakeParent) -> None:
    response = parent.call("GetAvailableModels").json()["response"]
    models = response["models"]
    assert response["defaultAgentModelId"] in models
    entry = models["gemini-3.1-pro-high"]
    assert entry["displayName"] == "Gemini 3.1 Pro (High)"
    assert entry["model"].startswith("MODEL_PLACEHOLDER_M") and entry["supportsThinking"] is True
    assert models[response["defaultAgentModelId"]]["recommended"] is True


def test_unknown_method_and_wrong_verb(parent: FakeParent) -> None:
    response = parent.call("NoSuchMethod")
    assert response.status_code == 404
    assert response.json()["code"] == "unimplemented"
    assert parent.client.get(parent.https + SERVICE + "Heartbeat").status_code == 405
    bad = parent.client.post(
        parent.http + SERVICE + "Heartbeat", content=b"{", headers=JSON_HEADERS
    )
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid_argument")


def test_csrf_token_is_enforced(tmp_path: Path) -> None:
    token = "s3cret-" + uuid.uuid4().hex
    guarded = FakeParent(tmp_path / "app", csrf=token)
    try:
        for base in (guarded.https, guarded.http):
            missing = guarded.call("Heartbeat", base=base)
            assert missing.status_code == 401
            assert missing.json() == {"code": "unauthenticated", "message": "missing CSRF token"}
            wrong = guarded.call("Heartbeat", base=base, headers={"x-codeium-csrf-token": "no"})
            assert (wrong.status_code, wrong.json()["code"]) == (401, "unauthenticated")
            right = guarded.call("Heartbeat", base=base, headers={"x-codeium-csrf-token": token})
            assert right.status_code == 200
        assert token not in guarded.log_file.read_text()
    finally:
        guarded.close()


def _faulty_turn(fake: FakeParent, folder: Path) -> tuple[Conv, StreamReader]:
    conversation = Conv(fake, folder)
    conversation.writer.append(user_input("hi"))
    fake.status(conversation.id, running=True)
    return conversation, StreamReader(fake, conversation.id)


def test_fault_stream_drop(tmp_path: Path) -> None:
    fake = FakeParent(tmp_path / "app", server={"stream_drop_after": 2})
    try:
        conversation, stream = _faulty_turn(fake, tmp_path)
        assert stream.update()["mainTrajectoryUpdate"]["stepsUpdate"]["indices"] == [0]
        conversation.writer.append(planner("one"))
        assert stream.update()["mainTrajectoryUpdate"]["stepsUpdate"]["indices"] == [1]
        ending = stream.next()
        assert isinstance(ending, httpx.TransportError), ending  # no end frame: a cut stream
        # The next stream (a reconnect) is not dropped: it replays and ends cleanly.
        again = StreamReader(fake, conversation.id)
        assert again.update()["mainTrajectoryUpdate"]["stepsUpdate"]["indices"] == [0, 1]
        conversation.writer.append(planner("two"))
        assert again.update()["mainTrajectoryUpdate"]["stepsUpdate"]["indices"] == [2]
        fake.status(conversation.id, running=False)
        again.update()
        assert again.next() == (0x02, b"{}")
        stream.close()
        again.close()
        conversation.writer.close()
    finally:
        fake.close()


def test_fault_split_frames(tmp_path: Path) -> None:
    fake = FakeParent(tmp_path / "app", server={"split_frames": 7, "seed": 3})
    try:
        conversation, stream = _faulty_turn(fake, tmp_path)
        first = stream.update()
        assert first["mainTrajectoryUpdate"]["stepsUpdate"]["indices"] == [0]
        fake.status(conversation.id, running=False)
        assert stream.update()["fullyIdle"] is True
        assert stream.next() == (0x02, b"{}")
        assert stream.reads > 10  # the frames came in many small reads
        stream.close()
        conversation.writer.close()
    finally:
        fake.close()


def test_fault_malformed_frame(tmp_path: Path) -> None:
    fake = FakeParent(tmp_path / "app", server={"malformed_frame_after": 1})
    try:
        conversation, stream = _faulty_turn(fake, tmp_path)
        assert stream.update()["mainTrajectoryUpdate"]["stepsUpdate"]["indices"] == [0]
        flags, payload = stream.next()  # type: ignore[misc]
        assert flags == 0
        with pytest.raises(json.JSONDecodeError):
            json.loads(payload)
        conversation.writer.append(planner("after"))
        assert stream.update()["mainTrajectoryUpdate"]["stepsUpdate"]["indices"] == [1]
        fake.status(conversation.id, running=False)
        stream.update()
        assert stream.next() == (0x02, b"{}")
        # The project's own client-side decoder reads the same bytes: it skips the bad frame.
        from agy_provider.errors import DecodeError
        from agy_provider.wire.connect import NEED_DATA
        from agy_provider.wire.connect import ConnectStreamDecoder

        decoder = ConnectStreamDecoder()
        decoder.feed(bytes(stream.raw))
        outcomes: list[str] = []
        while True:
            try:
                message = decoder.next_message()
            except DecodeError:
                outcomes.append("bad")
                continue
            if message is NEED_DATA:
                break
            outcomes.append("update" if isinstance(message, dict) and "update" in message else "?")
        assert outcomes == ["update", "bad", "update", "update"] and decoder.ended
        stream.close()
        conversation.writer.close()
    finally:
        fake.close()


def test_server_exits_when_the_control_socket_closes(tmp_path: Path) -> None:
    fake = FakeParent(tmp_path / "app")
    fake.client.close()
    fake.hang_up()
    assert fake.proc.wait(timeout=5) == 0
    assert "control channel closed" in fake.log_file.read_text()


def test_server_exits_when_the_parent_dies(tmp_path: Path) -> None:
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    fake = FakeParent(tmp_path / "app", parent_pid=stand_in.pid)
    try:
        assert fake.call("Heartbeat").status_code == 200
        stand_in.kill()
        stand_in.wait()
        assert fake.proc.wait(timeout=5) == 0
        assert f"parent {stand_in.pid} is gone" in fake.log_file.read_text()
    finally:
        fake.close()


def test_server_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    import signal

    fake = FakeParent(tmp_path / "app")
    try:
        conversation, stream = _faulty_turn(fake, tmp_path)
        stream.update()
        fake.proc.send_signal(signal.SIGTERM)
        assert fake.proc.wait(timeout=5) == 0
        ending = stream.next()
        assert ending is None or isinstance(ending, httpx.TransportError)
        assert "language server stopped" in fake.log_file.read_text()
        stream.close()
        conversation.writer.close()
    finally:
        fake.close()


def test_wait_for_conversation_fully_idle(parent: FakeParent, conv: Conv) -> None:
    assert parent.call("WaitForConversationFullyIdle", {"conversationId": conv.id}).json() == {}
    parent.status(conv.id, running=True)
    wait_until(
        lambda: parent.call("GetAllCascadeTrajectories").json()["trajectorySummaries"][conv.id]
        .get("status") == "CASCADE_RUN_STATUS_RUNNING",
        "the server lists the conversation as running",
    )  # fmt: skip
    went_idle = threading.Event()

    def idle() -> None:
        went_idle.set()  # before the change, so the answer it releases cannot overtake it
        parent.status(conv.id, False)

    threading.Timer(0.3, idle).start()
    response = parent.call("WaitForConversationFullyIdle", {"conversationId": conv.id})
    # The call returned only once the conversation went idle, not at once.
    assert response.status_code == 200 and went_idle.is_set()


def test_a_turn_that_settles_as_agy_exits_still_ends_cleanly(tmp_path: Path) -> None:
    fake = FakeParent(tmp_path / "app")
    try:
        conversation, stream = _faulty_turn(fake, tmp_path)
        stream.update()
        conversation.writer.append(planner("done"))
        fake.status(conversation.id, running=False)
        fake.hang_up()  # `agy -p` exits right after the turn settles
        seen: list[int] = []
        while True:  # step 1 may come in its own RUNNING frame or in the last one
            update = stream.update()
            seen += update["mainTrajectoryUpdate"]["stepsUpdate"].get("indices", [])
            if update.get("fullyIdle"):
                break
        assert seen == [1]
        assert stream.next() == (0x02, b"{}")
        assert fake.proc.wait(timeout=5) == 0
        stream.close()
        conversation.writer.close()
    finally:
        fake.close()


def test_request_bodies_chunked_and_content_types(parent: FakeParent) -> None:
    chunked = parent.client.post(
        parent.http + SERVICE + "Heartbeat", content=iter([b"{", b"}"]), headers=JSON_HEADERS
    )
    assert (chunked.status_code, chunked.json()) == (200, {})
    proto = parent.client.post(
        parent.https + SERVICE + "Heartbeat",
        content=b"",
        headers={"Content-Type": "application/proto"},
    )
    assert proto.status_code == 415


def test_tls_context_without_the_cryptography_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from agy_provider.sim import tls

    if shutil.which("openssl") is None:
        pytest.skip("no openssl binary")

    def missing() -> tuple[bytes, bytes]:
        raise ImportError("cryptography")

    monkeypatch.setattr(tls, "_self_signed_with_cryptography", missing)
    context = tls.make_server_context(tmp_path)
    assert context.get_ca_certs() == [] and list(tmp_path.iterdir()) == []


def test_tls_certificate_is_made_at_the_first_handshake_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from agy_provider.sim import tls

    made: list[Path] = []
    real = tls.make_server_context

    def counting(work_dir: Path) -> Any:
        made.append(work_dir)
        return real(work_dir)

    monkeypatch.setattr(tls, "make_server_context", counting)

    async def serve_twice() -> list[str]:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(
            answer, "127.0.0.1", 0, ssl=tls.lazy_server_context(tmp_path / "tls")
        )
        assert made == []  # nothing made until a client shakes hands
        port = server.sockets[0].getsockname()[1]
        texts = []
        async with server, httpx.AsyncClient(verify=False) as client:
            for _ in range(2):  # by IP address: no SNI, the callback still runs
                texts.append((await client.get(f"https://127.0.0.1:{port}/")).text)
        return texts

    assert asyncio.run(serve_twice()) == ["ok", "ok"]
    assert made == [tmp_path / "tls"]


def test_a_number_of_non_ascii_digits_is_invalid_argument_not_a_crash() -> None:
    """"²".isdigit() is True, but int("²") raises: the simulator answers invalid_argument."""
    from agy_provider.sim.rpc_methods import ConnectError
    from agy_provider.sim.rpc_methods import _int_field

    for bad in ("²", "-٣"):
        with pytest.raises(ConnectError, match="invalid value"):
            _int_field(bad, "stepOffset")
    assert _int_field("-12", "stepOffset") == -12
