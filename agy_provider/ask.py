"""`agy_provider.ask`: the documented import path of AskAntigravity (the code lives in `hosts/`).

Kept so `import agy_provider.ask` and `from agy_provider.ask import …` work as documented.
"""

from agy_provider.hosts.ask import *  # noqa: F403
from agy_provider.hosts.ask import __all__ as _core
from agy_provider.hosts.ask_command import *  # noqa: F403
from agy_provider.hosts.ask_command import __all__ as _command
from agy_provider.hosts.ask_tool import *  # noqa: F403
from agy_provider.hosts.ask_tool import __all__ as _tool

__all__ = sorted([*_core, *_tool, *_command])
