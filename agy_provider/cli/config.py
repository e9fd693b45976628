"""The `config` subcommand: show, set or unset the settings in config.json.

Each setting an environment variable overrides says so when it is listed.
"""

from __future__ import annotations

import os

from agy_provider.cli.conventions import EXIT_OK
from agy_provider.errors import UsageError

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    import argparse
    from typing import TextIO

__all__ = ["DESCRIPTION", "EXAMPLES", "HELP", "add_arguments", "run"]

HELP = "show or change settings (config.json; environment variables override)"
DESCRIPTION = None
EXAMPLES = (
    "agy-provider config",
    "agy-provider config mode",
    "agy-provider config mode accept-edits",
    "agy-provider config --unset mode",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """KEY, VALUE and `--unset`: show all, show one, set one, or remove one."""
    parser.add_argument("key", nargs="?", metavar="KEY")
    parser.add_argument("value", nargs="?", metavar="VALUE")
    parser.add_argument(
        "--unset", action="store_true", help="remove KEY: its default applies again"
    )


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Show every setting, show one KEY, set KEY to VALUE, or unset KEY."""
    from agy_provider.store.config import ENV_OVERRIDES
    from agy_provider.store.config import config_path
    from agy_provider.store.config import load_config
    from agy_provider.store.config import set_config_value

    if args.unset:
        if not args.key or args.value is not None:
            raise UsageError("config --unset takes one KEY")
        set_config_value(args.key, None)
        print(f"{args.key} removed from {config_path()}", file=err)
        return EXIT_OK
    if args.value is not None:
        set_config_value(args.key, args.value)
        print(f"{args.key} set in {config_path()}", file=err)
    config = load_config().to_json()
    env_of = {name: variable for variable, name in ENV_OVERRIDES.items()}
    if args.key:
        if args.key not in config:
            raise UsageError(f"config: no setting {args.key!r}; settings: {', '.join(config)}")
        out.write(f"{config[args.key]}\n")
        return EXIT_OK
    for key, value in config.items():
        variable = env_of.get(key, "")
        note = f"  (from {variable})" if variable and os.environ.get(variable) else ""
        out.write(f"{key} = {value}{note}\n")
    print(f"# {config_path()}", file=err)
    return EXIT_OK
