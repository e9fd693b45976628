"""The `serve` subcommand: agy behind OpenAI- and Anthropic-compatible endpoints on loopback.

Parses the address and token, refuses a non-loopback bind without a token of the user's own,
prints the base URL (and a token it made) once on stderr, and serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

from agy_provider.cli.conventions import EXIT_OK
from agy_provider.cli.conventions import EXIT_USAGE
from agy_provider.cli.options import add_agy_bin
from agy_provider.cli.options import add_cwd

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    import argparse
    from typing import TextIO

__all__ = ["DESCRIPTION", "EXAMPLES", "HELP", "add_arguments", "run"]

TOKEN_VARIABLE = "AGY_PROVIDER_SERVE_TOKEN"
_MIN_TOKEN = 16  # a token shorter than this is refused: the server is a door to agy's account

HELP = "serve agy as OpenAI- and Anthropic-compatible endpoints on 127.0.0.1"
DESCRIPTION = (
    "Serve agy at http://HOST:PORT/v1: OpenAI Chat Completions (/v1/chat/completions, "
    "/v1/models) and Anthropic Messages (/v1/messages), for Claude Code, the openai and "
    "anthropic SDKs, the TypeScript pi, opencode, Aider and other clients. Model names "
    "clients know (claude-*, gpt-*) map to agy's models (--model-map). Every request needs the "
    "token (Authorization: Bearer or x-api-key). Without --token or "
    f"{TOKEN_VARIABLE} a token is made and printed once. Serving other people through "
    "one agy sign-in may break agy's terms."
)
EXAMPLES = (
    "agy-provider serve",
    "agy-provider serve -v --model-map 'claude-*haiku*=gemini-3.7-flash'",
    "AGY_PROVIDER_SERVE_TOKEN=$(openssl rand -hex 24) agy-provider serve --port 8642",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Where to listen, the token, and the folder and binary its turns use."""
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=int, default=None, help="port (default: 8642; 0: any free port)"
    )
    parser.add_argument(
        "--token",
        default=None,
        help=f"the token clients must send (default: {TOKEN_VARIABLE}, else one is made); "
        "prefer the variable: a flag is visible to other users in the process list",
    )
    parser.add_argument(
        "--model-map",
        action="append",
        default=[],
        metavar="PATTERN=MODEL",
        help="send requests for model names matching PATTERN (a glob such as 'claude-*opus*') "
        "to agy's MODEL (an id, a glob of agy's ids, or 'default'); repeatable, tried before the "
        "config's serve_model_map and the defaults; '*=none' refuses unknown names (404) "
        "instead of answering them with 'default'",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log one line per request on stderr (no bodies, no tokens); -vv adds its "
        "headers, secrets masked",
    )
    add_cwd(parser)
    add_agy_bin(parser)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Serve until SIGTERM or SIGINT; exit 0 after a clean stop, 2 for a refused setting."""
    import os
    import secrets

    from agy_provider.hosts.serve.app import DEFAULT_PORT
    from agy_provider.hosts.serve.app import is_loopback

    token = args.token or os.environ.get(TOKEN_VARIABLE, "")
    port = DEFAULT_PORT if args.port is None else args.port
    if not 0 <= port <= 65535:
        print(f"agy-provider: --port must be 0-65535, not {port}", file=err)
        return EXIT_USAGE
    if not is_loopback(args.host) and not token:
        print(
            f"agy-provider: refusing to listen on {args.host} without a token: anyone who "
            f"reaches it could use your agy. Pass --token or set {TOKEN_VARIABLE}, or listen "
            "on 127.0.0.1",
            file=err,
        )
        return EXIT_USAGE
    if token and (len(token) < _MIN_TOKEN or not token.isprintable() or " " in token):
        print(
            f"agy-provider: the token must be at least {_MIN_TOKEN} printable characters "
            "without spaces",
            file=err,
        )
        return EXIT_USAGE
    from agy_provider.hosts.serve.models import parse_model_map
    from agy_provider.store.config import load_config

    try:
        model_map = parse_model_map([*args.model_map, load_config().serve_model_map])
    except ValueError as exc:
        print(f"agy-provider: --model-map: {exc}", file=err)
        return EXIT_USAGE
    made = not token
    token = token or secrets.token_urlsafe(24)
    return _serve(args, token, port, made, model_map, err)


def _serve(
    args: argparse.Namespace,
    token: str,
    port: int,
    made: bool,
    model_map: tuple[tuple[str, str], ...],
    err: TextIO,
) -> int:
    import asyncio
    import signal

    from agy_provider.cli.simulator_state import simulator_state
    from agy_provider.hosts.serve.app import ServeServer
    from agy_provider.hosts.serve.app import ServeSettings
    from agy_provider.pi.host_input import checked_cwd
    from agy_provider.store.config import load_config

    def log_line(line: str) -> None:
        print(f"agy-provider serve: {line}", file=err, flush=True)

    settings = ServeSettings(
        token=token,
        host=args.host,
        port=port,
        agy_bin=args.agy_bin,
        cwd=checked_cwd(args.cwd),
        model_map=model_map,
        verbosity=args.verbose,
        log=log_line,
    )

    def ready(bound: int) -> None:
        host = f"[{args.host}]" if ":" in args.host else args.host
        base = f"http://{host}:{bound}/v1"
        print(f"agy-provider serve: listening on {base}", file=err)
        if made:
            # Printed once, here, and never logged: the user's copy is the only one.
            print(f"agy-provider serve: token {token}", file=err)
        print(
            f"agy-provider serve: OPENAI_BASE_URL={base} OPENAI_API_KEY=<token>  |  "
            f"ANTHROPIC_BASE_URL={base[:-3]} ANTHROPIC_API_KEY=<token>",
            file=err,
        )
        err.flush()

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await ServeServer(settings).run(stop, ready)
        print("agy-provider serve: stopped", file=err)

    with simulator_state(args.agy_bin or load_config().agy_bin, err):
        try:
            asyncio.run(main())
        except OSError as exc:
            print(f"agy-provider: cannot listen on {args.host}:{port}: {exc}", file=err)
            return EXIT_USAGE
    return EXIT_OK
