"""What `import agy_provider` and each CLI command load: only what they use.

Each check runs in a fresh interpreter and asserts the set of modules imported (never a time):
the package root loads nothing until a name is used, the types never pull in the live path, and
the CLI imports per subcommand.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import FIXTURES

# Heavy modules only the live path (or the simulator) needs.
LIVE = {"asyncio", "httpx", "psutil", "pluggy", "google.protobuf"}
REPLAY = {"sqlite3", "agy_provider.offline.replay", "agy_provider.assembly.assembler"}


def loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code` that a bare one did not."""
    probe = (
        "import sys\n"
        "before = set(sys.modules)\n"
        f"{code}\n"
        "new = sorted(set(sys.modules) - before)\n"
        "print(' '.join(new))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return set(run.stdout.splitlines()[-1].split())


def test_importing_the_package_loads_nothing_else() -> None:
    new = loaded_after("import agy_provider")
    assert {m for m in new if m.startswith("agy_provider")} == {"agy_provider"}
    assert not new & (LIVE | REPLAY | {"typing", "json", "logging", "dataclasses"}), new


def test_the_types_never_load_the_live_path_or_replay() -> None:
    new = loaded_after(
        "import agy_provider\n"
        "agy_provider.Model, agy_provider.UserMessage, agy_provider.DoneEvent\n"
        "agy_provider.AgyError, agy_provider.hookimpl"
    )
    assert {"agy_provider.pi.types", "agy_provider.pi.events", "agy_provider.errors"} <= new
    assert not new & ({"asyncio", "httpx", "psutil", "google.protobuf"} | REPLAY), new


def test_replay_never_loads_the_live_path() -> None:
    new = loaded_after(
        "from agy_provider import load_recording, replay\n"
        f"with load_recording({str(FIXTURES / 'db' / 'two-turn.db')!r}) as r:\n"
        "    list(replay(r, 'all'))"
    )
    assert "sqlite3" in new
    assert not new & LIVE, new


def test_the_live_path_loads_on_first_use() -> None:
    new = loaded_after("from agy_provider import stream_simple")
    assert "agy_provider.live.provider" in new
    assert "agy_provider.live.turn" not in new  # the turn itself loads with the first turn


def test_only_an_rpc_turn_loads_httpx() -> None:
    """The plugins a turn loads (every event source among them) leave httpx, ~150 ms of imports
    with its CLI and HTTP/2 dependencies installed, to the turns that talk to agy's server."""
    new = loaded_after(
        "from agy_provider.plugin_manager import get_plugin_manager\nget_plugin_manager()"
    )
    assert "agy_provider.plugins.rpc_source" in new
    assert not new & {"httpx", "agy_provider.rpc.language_server", "agy_provider.rpc.client"}, new


def test_replay_keeps_its_name_after_its_module_is_imported() -> None:
    # The function and its module share a name: the package must keep answering the function.
    new = loaded_after(
        "import agy_provider.offline.replay\n"
        "from agy_provider import replay\n"
        "assert callable(replay) and replay.__name__ == 'replay', replay\n"
        "assert agy_provider.replay is replay"
    )
    assert "agy_provider.offline.replay" in new


@pytest.mark.parametrize(
    ("argv", "absent"),
    [
        (["--help"], LIVE | REPLAY | {"agy_provider.offline.formatters"}),
        (["chat", "--help"], LIVE | REPLAY | {"agy_provider.cli.chat_turn"}),
        (["replay", str(FIXTURES / "db" / "tool-run.db")], LIVE | {"agy_provider.cli.chat_turn"}),
    ],
    ids=["help", "chat-help", "replay"],
)
def test_the_cli_imports_per_subcommand(argv: list[str], absent: set[str]) -> None:
    new = loaded_after(
        "import io\n"
        "from agy_provider.cli import main\n"
        "try:\n"
        f"    main({argv!r}, out=io.StringIO(), err=io.StringIO())\n"
        "except SystemExit:\n"
        "    pass"
    )
    assert "agy_provider.cli" in new
    assert not new & absent, sorted(new & absent)


def test_the_options_never_load_asyncio() -> None:
    """A host building a model, a context and options (before any loop runs) pays for no
    asyncio: only `AbortSignal.wait`, on a running loop, needs it."""
    new = loaded_after(
        "from agy_provider import AbortSignal, Context, Model, SimpleStreamOptions, UserMessage\n"
        "SimpleStreamOptions(signal=AbortSignal()).to_json()"
    )
    assert {"agy_provider.pi.options", "agy_provider.pi.types"} <= new
    assert not new & (LIVE | REPLAY), sorted(new & (LIVE | REPLAY))


def test_a_hosts_import_line_loads_only_pis_types_and_the_light_provider() -> None:
    # Every `llm` command and short script pays this line: the turn machinery loads with the
    # first turn instead (in a worker thread, `start` already out).
    new = loaded_after(
        "from agy_provider import Context, Model, SimpleStreamOptions, UserMessage, stream_simple"
    )
    ours = {m for m in new if m.startswith("agy_provider")}
    assert ours <= {
        "agy_provider",
        "agy_provider.errors",
        "agy_provider.pi",
        "agy_provider.pi._pijson",
        "agy_provider.pi.options",
        "agy_provider.pi.tool_run",
        "agy_provider.pi.types",
        "agy_provider.live",
        "agy_provider.live.provider",
    }, ours
    assert not new & (LIVE | REPLAY), new


# What the blocking API needs only once a turn runs: the turn machinery and what it imports.
TURN_MACHINERY = {
    "agy_provider.hosts.turns",
    "agy_provider.live.parking",
    "agy_provider.live.provider",
    "agy_provider.live.turn",
    "agy_provider.pi.host_input",
    "agy_provider.pi.stream",
    "agy_provider.plugin_manager",
    "concurrent.futures",
    "logging",
    "mcp",
    "socket",
    "sqlite3",
    "ssl",
    "starlette",
    "subprocess",
    "uvicorn",
}


def test_the_sync_api_loads_no_turn_machinery() -> None:
    # `import agy_provider.sync` costs less than a host's import line: `iter_events` and
    # `complete` import pi's values, the turn (and asyncio) at their first call.
    new = loaded_after(
        "import agy_provider.sync\nfrom agy_provider.sync import complete, iter_events"
    )
    heavy = new & (LIVE | REPLAY | TURN_MACHINERY)
    assert not heavy, sorted(heavy)
    ours = {m for m in new if m.startswith("agy_provider")}
    assert ours == {
        "agy_provider",
        "agy_provider.errors",
        "agy_provider.hosts",
        "agy_provider.hosts.sync",
        "agy_provider.sync",
    }, sorted(ours)


def test_the_sync_api_imports_the_turn_at_its_first_call() -> None:
    # The lazy imports are real: a first blocking turn loads the machinery and ends (agy is
    # missing here, so with an `error` event naming it).
    new = loaded_after(
        "from agy_provider import Context, Model, UserMessage\n"
        "from agy_provider.sync import complete\n"
        "model = Model(id='x', name='x', api='agy', provider='agy', base_url='',\n"
        "              reasoning=True, context_window=0, max_tokens=0)\n"
        "context = Context(messages=[UserMessage(content='hi', timestamp=0)])\n"
        "message = complete(model, context, agy_bin='/nonexistent/agy')\n"
        "assert message.stop_reason == 'error', message\n"
        "assert '/nonexistent/agy' in (message.error_message or ''), message"
    )
    assert {"asyncio", "agy_provider.live.turn", "agy_provider.hosts.turns"} <= new


FIRST_TURN = (
    "import asyncio\n"
    "from agy_provider import Context, Model, UserMessage, stream_simple\n"
    "async def main():\n"
    "    model = Model(id='x', name='x', api='agy', provider='agy', base_url='',\n"
    "                  reasoning=True, context_window=0, max_tokens=0)\n"
    "    context = Context(messages=[UserMessage(content='hi', timestamp=0)])\n"
    "    stream = stream_simple(model, context, agy_bin='/nonexistent/agy')\n"
    "    kinds = [event.type async for event in stream]\n"
    "    assert kinds == ['start', 'error'], kinds\n"
    "    message = (await stream.result()).error_message\n"
    "    assert WHY in message, message\n"
    "asyncio.run(main())"
)


def test_the_first_turn_loads_the_machinery_and_streams() -> None:
    # The first stream_simple of a process: `start` at once, the rest once imported off the loop.
    new = loaded_after("WHY = '/nonexistent/agy'\n" + FIRST_TURN)
    assert {"agy_provider.live.turn_start", "agy_provider.live.turn"} <= new


def test_a_first_turn_that_cannot_load_the_machinery_ends_with_an_error() -> None:
    # A broken install must not leave the host waiting on a stream that never ends.
    loaded_after(
        "import sys\n"
        "sys.modules['agy_provider.live.turn_start'] = None  # its import now fails\n"
        "WHY = 'agy-provider could not start the turn: ModuleNotFoundError'\n" + FIRST_TURN
    )
