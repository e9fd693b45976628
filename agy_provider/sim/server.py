"""The simulated agy language server process: two loopback ports speaking Connect, run by agy-sim.

Owns the process (arguments, log lines, lifecycle), the control channel to the parent (CONTRACT.md),
and the HTTP side of Connect: routing, CSRF, unary JSON bodies, error bodies and stream responses.

Run as `python -m agy_provider.sim.server --app-dir DIR --control-fd FD --parent-pid PID
[--csrf-token TOKEN] [--log-file PATH]`. It binds HTTPS (a self-signed certificate, made at the first
handshake) and plain HTTP on 127.0.0.1, logs agy's "Language server listening on random port at P for ..."
lines, sends `{"op":"ready","https":P1,"http":P2}` and serves until the parent dies or closes the
control socket.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import hmac
import json
import logging
import os
import signal
import socket
import ssl
import sys
from pathlib import Path
from typing import Any
from typing import Final

from agy_provider.errors import UsageError
from agy_provider.sim.agent_stream import Conversation
from agy_provider.sim.agent_stream import ServerFaults
from agy_provider.sim.agent_stream import StreamPhase
from agy_provider.sim.http1 import MAX_HEADER_BYTES
from agy_provider.sim.http1 import ChunkedResponse
from agy_provider.sim.http1 import HttpProtocolError
from agy_provider.sim.http1 import HttpRequest
from agy_provider.sim.http1 import read_request
from agy_provider.sim.http1 import write_response
from agy_provider.sim.rpc_methods import SERVICE_PATH_PREFIX
from agy_provider.sim.rpc_methods import STREAM_METHOD
from agy_provider.sim.rpc_methods import ConnectError
from agy_provider.sim.rpc_methods import LanguageServerService
from agy_provider.sim.rpc_methods import ModelEntry
from agy_provider.sim.step_reader import ConversationSteps
from agy_provider.sim.tls import lazy_server_context

__all__ = [
    "CSRF_HEADER",
    "ControlChannel",
    "LanguageServerProcess",
    "main",
    "parse_args",
]

_log = logging.getLogger("agy_provider.sim.server")

CSRF_HEADER: Final = "x-codeium-csrf-token"
# How often we look for the parent; agy's language server also dies within a fraction of a second
# of its CLI.
_PARENT_POLL_S: Final = 0.2
# Control lines are small JSON objects; a reply to `start_cascade` is the largest.
_CONTROL_LINE_LIMIT: Final = 1024 * 1024
_TLS_HANDSHAKE_TIMEOUT_S: Final = 10.0
# At shutdown, how long streams may take to write their last frames before connections are cut.
_STREAM_GRACE_S: Final = 1.0
_JSON_HEADERS: Final = [("Content-Type", "application/json")]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The server's arguments, as CONTRACT.md gives them."""
    parser = argparse.ArgumentParser(
        prog="python -m agy_provider.sim.server",
        description="agy-sim's language server (started by agy-sim, not by hand).",
    )
    parser.add_argument("--app-dir", required=True, type=Path, help="agy's state root")
    parser.add_argument(
        "--control-fd", required=True, type=int, help="socketpair end to the parent"
    )
    parser.add_argument("--parent-pid", required=True, type=int, help="exit when this pid dies")
    parser.add_argument("--csrf-token", "--csrf_token", dest="csrf_token", default=None)
    parser.add_argument("--log-file", type=Path, default=None)
    return parser.parse_args(argv)


class _GlogFormatter(logging.Formatter):
    """agy's log lines look like glog's: `I1130 11:38:00.123456 4242 file:line] message`."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created)
        level = record.levelname[:1] if record.levelno >= logging.INFO else "I"
        line = (
            f"{level}{when:%m%d %H:%M:%S.%f} {record.process} "
            f"{record.filename}:{record.lineno}] {record.getMessage()}"
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _setup_logging(app_dir: Path, log_file: Path | None) -> Path:
    if log_file is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        log_file = app_dir / "log" / f"cli-{stamp}.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log_file, mode="a", encoding="utf-8")
    handler.setFormatter(_GlogFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return log_file


class ControlChannel:
    """The newline-delimited JSON channel to the parent: our requests and its notifications."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._seq = 0
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}

    async def send(self, message: dict[str, Any]) -> None:
        """Write one line to the parent."""
        self._writer.write(json.dumps(message, separators=(",", ":")).encode("utf-8") + b"\n")
        await self._writer.drain()

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send a request with a fresh `seq` and wait for the parent's `reply` to it.

        Raises:
            ConnectionError: the channel closed before the reply came.
        """
        if self._writer.is_closing():
            raise ConnectionError("control channel closed")
        self._seq += 1
        seq = self._seq
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[seq] = future
        try:
            await self.send({**message, "seq": seq})
            return await future
        finally:
            self._pending.pop(seq, None)

    async def messages(self) -> Any:
        """Yield the parent's notifications (replies are routed to their requests); ends at EOF."""
        try:
            while True:
                try:
                    line = await self._reader.readline()
                except (ValueError, ConnectionError) as exc:
                    _log.warning("control channel unreadable: %s", exc)
                    return
                if not line:
                    return
                try:
                    message = json.loads(line)
                except ValueError:
                    _log.warning("control line is not JSON: %r", line[:200])
                    continue
                if not isinstance(message, dict):
                    _log.warning("control line is not an object: %r", line[:200])
                    continue
                if message.get("op") == "reply":
                    future = self._pending.get(message.get("seq", -1))
                    if future is not None and not future.done():
                        future.set_result(message)
                    continue
                yield message
        finally:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionError("control channel closed"))

    def close(self) -> None:
        """Close our end."""
        self._writer.close()


class _StreamSink:
    """A FrameSink over one HTTP/1.1 connection: chunked 200 with `application/connect+json`."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._response = ChunkedResponse(writer)
        self.started = False

    async def _start(self) -> None:
        if not self.started:
            self.started = True
            # The connection closes after a stream: the EOF watcher may have read past it.
            headers = [("Content-Type", "application/connect+json"), ("Connection", "close")]
            await self._response.start(200, headers)

    async def send(self, data: bytes) -> None:
        await self._start()
        await self._response.write(data)

    async def drop(self) -> None:
        self._writer.transport.abort()

    async def finish(self) -> None:
        await self._start()
        await self._response.end()


class LanguageServerProcess:
    """The running server: its two listeners, the service, the control channel and lifecycle."""

    def __init__(
        self,
        service: LanguageServerService,
        control: ControlChannel,
        *,
        csrf_token: str | None,
        parent_pid: int,
    ) -> None:
        self.service = service
        self.control = control
        self.csrf_token = csrf_token
        self.parent_pid = parent_pid
        self.stopping = asyncio.Event()
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._streaming: set[asyncio.Task[None]] = set()
        self._servers: list[asyncio.Server] = []

    async def listen(self, tls: ssl.SSLContext) -> tuple[int, int]:
        """Bind HTTPS and HTTP on loopback (port 0 each); returns (https_port, http_port)."""
        https = await asyncio.start_server(
            self._connection,
            "127.0.0.1",
            0,
            ssl=tls,
            ssl_handshake_timeout=_TLS_HANDSHAKE_TIMEOUT_S,
            limit=MAX_HEADER_BYTES,
        )
        plain = await asyncio.start_server(self._connection, "127.0.0.1", 0, limit=MAX_HEADER_BYTES)
        self._servers = [https, plain]
        return _port(https), _port(plain)

    async def run_control(self) -> None:
        """Apply the parent's notifications until the control socket closes, then stop."""
        async for message in self.control.messages():
            try:
                self._apply(message)
            except (KeyError, TypeError, ValueError) as exc:
                _log.warning("bad control message %r: %s", message.get("op"), exc)
        _log.info("control channel closed; shutting down")
        self.stopping.set()

    def _apply(self, message: dict[str, Any]) -> None:
        op = message.get("op")
        if op == "conversation":
            conversation = Conversation(
                id=str(message["id"]),
                trajectory_id=str(message.get("trajectoryId") or ""),
                steps=ConversationSteps(Path(message["db"])),
            )
            self.service.host(conversation)
        elif op == "status":
            hosted = self.service.conversations.get(str(message["id"]))
            if hosted is not None:
                hosted.steps.refresh()
                hosted.set_status(message["status"] == "RUNNING")
        elif op == "changed":
            self.service.changed(str(message["id"]))
        else:
            _log.warning("unknown control op %r", op)

    async def watch_parent(self) -> None:
        """Stop when the parent process is gone (or a zombie)."""
        if self.parent_pid == os.getppid():
            # Our own parent (agy-sim): an exiting process's children are handed to another
            # parent at once, before it is reaped, so this sees a zombie parent too, and needs
            # no psutil (whose import is a good part of a server's start).
            while not self.stopping.is_set() and os.getppid() == self.parent_pid:
                await asyncio.sleep(_PARENT_POLL_S)
        else:
            await self._watch_other_parent()
        if not self.stopping.is_set():
            _log.info("parent %d is gone; shutting down", self.parent_pid)
        self.stopping.set()

    async def _watch_other_parent(self) -> None:
        import psutil

        try:
            parent = psutil.Process(self.parent_pid)
            while not self.stopping.is_set():
                if not parent.is_running() or parent.status() == psutil.STATUS_ZOMBIE:
                    break
                await asyncio.sleep(_PARENT_POLL_S)
        except psutil.Error:
            pass

    async def shutdown(self) -> None:
        """Close the listeners and every open connection, the databases and the channel."""
        for server in self._servers:
            server.close()
        # Streams first get to send what the parent's last notifications changed, so a turn that
        # settled just before agy exited still ends cleanly.
        self.service.closing.set()
        if self._streaming:
            await asyncio.wait(list(self._streaming), timeout=_STREAM_GRACE_S)
        # Aborting the transports ends each handler on its own (a stream sees its client go);
        # cancelling handler tasks instead makes Python 3.11's asyncio log spurious errors.
        for writer in list(self._connections.values()):
            writer.transport.abort()
        if self._connections:
            _done, stuck = await asyncio.wait(list(self._connections), timeout=2.0)
            for task in stuck:
                task.cancel()
        self.service.close()
        self.control.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections[task] = writer
        try:
            while True:
                try:
                    request = await read_request(reader)
                except HttpProtocolError as exc:
                    body = json.dumps({"code": "invalid_argument", "message": str(exc)}).encode()
                    await write_response(writer, exc.status, _JSON_HEADERS, body, keep_alive=False)
                    return
                if request is None:
                    return
                if not await self._handle(request, reader, writer) or not request.keep_alive:
                    return
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
            return  # the client went away; nothing to answer
        finally:
            if task is not None:
                self._connections.pop(task, None)
            writer.close()
            with contextlib.suppress(OSError, ssl.SSLError, asyncio.CancelledError):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _handle(
        self, request: HttpRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one request; False when the connection must close afterwards."""
        keep = request.keep_alive
        path = request.path.split("?", 1)[0]
        if request.method != "POST":
            headers = [*_JSON_HEADERS, ("Allow", "POST")]
            refusal = json.dumps({"code": "unimplemented", "message": "method not allowed"})
            await write_response(writer, 405, headers, refusal.encode(), keep_alive=keep)
            return keep
        failure = self._csrf_failure(request)
        if failure is not None:
            await _write_error(writer, failure, keep)
            return keep
        method = path[len(SERVICE_PATH_PREFIX) :] if path.startswith(SERVICE_PATH_PREFIX) else ""
        if method == STREAM_METHOD:
            return await self._stream(request, reader, writer)
        handler = self.service.method(method) if method else None
        if handler is None:
            name = path.strip("/").replace("/", ".") or "/"
            error = ConnectError("unimplemented", f"{name} is not implemented", status=404)
            await _write_error(writer, error, keep)
            return keep
        content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if content_type != "application/json":
            error = ConnectError(
                "unknown",
                f"invalid content-type: {content_type!r}; expecting application/json",
                status=415,
            )
            await _write_error(writer, error, keep)
            return keep
        try:
            body = _parse_json_body(request.body)
            result = await handler(self.service, body)
        except ConnectError as exc:
            await _write_error(writer, exc, keep)
            return keep
        except Exception as exc:
            _log.exception("%s failed", method)
            await _write_error(writer, ConnectError("internal", str(exc)), keep)
            return keep
        payload = json.dumps(result, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        await write_response(writer, 200, _JSON_HEADERS, payload, keep_alive=keep)
        return keep

    def _csrf_failure(self, request: HttpRequest) -> ConnectError | None:
        if self.csrf_token is None:
            return None
        offered = request.headers.get(CSRF_HEADER)
        if not offered:
            return ConnectError("unauthenticated", "missing CSRF token")
        if not hmac.compare_digest(offered.encode("utf-8"), self.csrf_token.encode("utf-8")):
            return ConnectError("unauthenticated", "invalid CSRF token")
        return None

    async def _stream(
        self, request: HttpRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        sink = _StreamSink(writer)
        client_gone = asyncio.Event()
        watcher = asyncio.create_task(_watch_eof(reader, client_gone))
        task = asyncio.current_task()
        if task is not None:
            self._streaming.add(task)
        try:
            # Said in the log (as the stream's end below) so a test can wait for it, not sleep.
            _log.info("%s stream open", STREAM_METHOD)
            phase = await self.service.stream_agent_state_updates(request.body, sink, client_gone)
            if phase is StreamPhase.ENDED and not client_gone.is_set():
                await sink.finish()
        except (OSError, ssl.SSLError):
            pass  # the client left (or shutdown cut the connection) in the middle of a write
        except Exception:
            _log.exception("%s failed", STREAM_METHOD)
            await sink.drop()
        finally:
            watcher.cancel()
            if task is not None:
                self._streaming.discard(task)
            if client_gone.is_set():
                _log.info("%s stream ended: the client left", STREAM_METHOD)
        return False


async def _watch_eof(reader: asyncio.StreamReader, client_gone: asyncio.Event) -> None:
    # During a server stream the client sends nothing more; EOF (or an error) means it left.
    try:
        while await reader.read(4096):
            pass
    except (OSError, ssl.SSLError):
        pass
    client_gone.set()


def _parse_json_body(body: bytes) -> dict[str, Any]:
    if not body.strip():
        return {}
    try:
        parsed = json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise ConnectError("invalid_argument", f"unmarshal message: {exc}") from exc
    if not isinstance(parsed, dict):
        raise ConnectError("invalid_argument", "unmarshal message: expected a JSON object")
    return parsed


async def _write_error(writer: asyncio.StreamWriter, error: ConnectError, keep: bool) -> None:
    body = json.dumps(error.to_json(), separators=(",", ":")).encode("utf-8")
    await write_response(writer, error.status, _JSON_HEADERS, body, keep_alive=keep)


def _port(server: asyncio.Server) -> int:
    port: int = server.sockets[0].getsockname()[1]
    return port


def _scenario_settings() -> tuple[ServerFaults, tuple[ModelEntry, ...], str | None]:
    from agy_provider.sim import scenario as scenario_module

    try:
        scenario = scenario_module.load_scenario()
    except UsageError as exc:
        _log.warning("scenario not loaded (%s); serving without server faults", exc)
        catalog, faults, default = scenario_module.DEFAULT_CATALOG, ServerFaults(), None
    else:
        catalog, default = scenario.catalog, scenario.model
        faults = ServerFaults.from_json(scenario.server)
    models = tuple(
        ModelEntry(m.slug, m.name, f"MODEL_PLACEHOLDER_M{m.placeholder}") for m in catalog
    )
    return faults, models, default


async def serve(args: argparse.Namespace) -> int:
    """Run the server until the parent goes away; the process exit code."""
    app_dir: Path = args.app_dir
    log_file = _setup_logging(app_dir, args.log_file)
    loop = asyncio.get_running_loop()
    try:
        sock = socket.socket(fileno=args.control_fd)
    except OSError as exc:
        _log.error("control fd %d unusable: %s", args.control_fd, exc)
        return 2
    sock.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=sock, limit=_CONTROL_LINE_LIMIT)
    control = ControlChannel(reader, writer)
    faults, catalog, default_model = _scenario_settings()
    service = LanguageServerService(
        control, faults=faults, catalog=catalog, default_model=default_model
    )
    process = LanguageServerProcess(
        service, control, csrf_token=args.csrf_token, parent_pid=args.parent_pid
    )
    try:
        tls = lazy_server_context(app_dir / "tmp")  # the certificate: at the first handshake
        https_port, http_port = await process.listen(tls)
    except OSError as exc:
        _log.error("language server could not start: %s", exc)
        control.close()
        return 1
    _log.info("Language server listening on random port at %d for HTTPS (gRPC)", https_port)
    _log.info("Language server listening on random port at %d for HTTP", http_port)
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, process.stopping.set)
    tasks = [
        asyncio.create_task(process.run_control()),
        asyncio.create_task(process.watch_parent()),
    ]
    try:
        await control.send({"op": "ready", "https": https_port, "http": http_port})
    except OSError:
        process.stopping.set()
    await process.stopping.wait()
    for task in tasks:
        task.cancel()
    await process.shutdown()
    _log.info("language server stopped (log %s)", log_file.name)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m agy_provider.sim.server`."""
    args = parse_args(argv)
    try:
        return asyncio.run(serve(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
